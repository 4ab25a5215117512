/**
 * @file gpurt.hpp
 * gpurt.hpp: C++17 over gpurt's C ABI, header-only.
 *
 * Move-only RAII owners for every gpurt handle, owning buffers, scope guards, and
 * errors as exceptions (gpurt::Error, carrying the status and gpurt's message). Each
 * call forwards to one C function; nothing here keeps state of its own.
 *
 * With GPURT_CPP_NO_EXCEPTIONS defined, nothing throws: every fallible call returns
 * gpurt::Result<T> (Result<void> for calls with no value), and objects are made
 * through their static create() functions instead of throwing constructors.
 *
 *   gpurt::Stream s;                               // a stream on the current device
 *   gpurt::DeviceBuffer<float> x(1 << 20);         // on the current stream
 *   gpurt::Event done;
 *   done.record(s);
 *   gpurt::Device(0).synchronize();
 *
 * Each member's reference names the C function it calls: its statuses become the
 * gpurt::Error a failure throws (or returns), and its ordering is the C call's.
 */
#ifndef GPURT_HPP
#define GPURT_HPP

#include "gpurt.h"

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#if !defined(GPURT_CPP_NO_EXCEPTIONS)
#include <stdexcept>
#endif
#if __has_include(<memory_resource>)
#include <memory_resource>
#define GPURT_HPP_HAS_PMR 1
#endif

namespace gpurt {

/* ---- errors ------------------------------------------------------------------ */

/** A failed call: its status and gpurt's message (the call, the argument, the CUDA
 *  error). With exceptions, thrown by every failing call. */
#if defined(GPURT_CPP_NO_EXCEPTIONS)
class Error {
public:
    /** An error with `status` and gpurt's `message`. @param status the C call's status @param message its detail */
    Error(gpurt_status_t status, std::string message) : status_(status), message_(std::move(message)) {}
    const char *what() const noexcept { return message_.c_str(); }
#else
class Error : public std::runtime_error {
public:
    /** An error with `status` and gpurt's `message`. @param status the C call's status @param message its detail */
    Error(gpurt_status_t status, const std::string &message) : std::runtime_error(message), status_(status) {}
#endif
    /** The gpurt_status_t the C call returned.
     *  @return the gpurt_status_t
     */
    gpurt_status_t status() const noexcept { return status_; }
    /** The status's short description (gpurt_status_string).
     *  @return a static description of the status
     */
    const char *status_string() const noexcept { return gpurt_status_string(status_); }

private:
    gpurt_status_t status_;
#if defined(GPURT_CPP_NO_EXCEPTIONS)
    std::string message_;
#endif
};

/** A value or the Error that prevented it: what every fallible call returns with
 *  GPURT_CPP_NO_EXCEPTIONS. value() on an error prints it and aborts. */
template <class T>
class Result {
public:
    /** A success holding `value`. @param value the result */
    Result(T value) : value_(std::move(value)), error_(GPURT_SUCCESS, std::string()) {}
    /** A failure. @param error why */
    Result(Error error) : value_(), error_(std::move(error)) {}
    /** @return true for a success. */
    bool ok() const noexcept { return value_.has_value(); }
    /** @return ok(). */
    explicit operator bool() const noexcept { return ok(); }
    /** @return the value; on an error, prints it and aborts. */
    T &value() & { check(); return *value_; }
    /** @return the value, moved out; on an error, prints it and aborts. */
    T &&value() && { check(); return std::move(*value_); }
    /** @return the error (status GPURT_SUCCESS for a success). */
    const Error &error() const noexcept { return error_; }

private:
    void check() const {
        if (!ok()) {
            std::fprintf(stderr, "gpurt::Result::value() on an error: %s\n", error_.what());
            std::abort();
        }
    }
    std::optional<T> value_;
    Error error_;
};

/** A success or the Error of a call that returns no value (with GPURT_CPP_NO_EXCEPTIONS). */
template <>
class Result<void> {
public:
    /** A success. */
    Result() : error_(GPURT_SUCCESS, std::string()) {}
    /** A failure. @param error why */
    Result(Error error) : error_(std::move(error)) {}
    /** @return true for a success. */
    bool ok() const noexcept { return error_.status() == GPURT_SUCCESS; }
    /** @return ok(). */
    explicit operator bool() const noexcept { return ok(); }
    /** @return the error (status GPURT_SUCCESS for a success). */
    const Error &error() const noexcept { return error_; }

private:
    Error error_;
};

#if defined(GPURT_CPP_NO_EXCEPTIONS)
/** What a fallible call returns: Result<T> without exceptions, T with them. */
template <class T>
using Ret = Result<T>;
#else
/** What a fallible call returns: T, a failure throwing gpurt::Error (Result<T> with GPURT_CPP_NO_EXCEPTIONS). */
template <class T>
using Ret = T;
#endif

namespace detail {
inline Error error(gpurt_status_t status) { return Error(status, gpurt_last_error_message()); }

/** `value` when `status` is success; otherwise the error, thrown or returned. */
template <class T>
Ret<T> finish(gpurt_status_t status, T &&value) {
#if defined(GPURT_CPP_NO_EXCEPTIONS)
    if (status != GPURT_SUCCESS) return Result<T>(error(status));
    return Result<T>(std::forward<T>(value));
#else
    if (status != GPURT_SUCCESS) throw error(status);
    return std::forward<T>(value);
#endif
}

inline Ret<void> finish(gpurt_status_t status) {
#if defined(GPURT_CPP_NO_EXCEPTIONS)
    if (status != GPURT_SUCCESS) return Result<void>(error(status));
    return Result<void>();
#else
    if (status != GPURT_SUCCESS) throw error(status);
#endif
}

/** A failure found by the C++ layer itself (an argument the C call never saw). */
template <class T = void>
inline Ret<T> invalid_argument(const char *message) {
#if defined(GPURT_CPP_NO_EXCEPTIONS)
    return Result<T>(Error(GPURT_ERROR_INVALID_ARGUMENT, message));
#else
    throw Error(GPURT_ERROR_INVALID_ARGUMENT, message);
#endif
}

/** Bytes for `n` elements of `size` bytes; a product that overflows becomes
 *  SIZE_MAX, which gpurt refuses as out of memory with its usual message. */
inline std::size_t bytes_of(std::size_t n, std::size_t size) noexcept {
    return n > GPURT_MAX_ALLOCATION_SIZE / size ? static_cast<std::size_t>(-1) : n * size;
}

/** A query's answer: true when done, false when GPURT_ERROR_NOT_READY. */
inline Ret<bool> finish_query(gpurt_status_t status) {
    bool done = status == GPURT_SUCCESS;
    return finish(status == GPURT_ERROR_NOT_READY ? GPURT_SUCCESS : status, std::move(done));
}

/** Calls `f(args..., &value)`: the value, or the error. */
template <class T, class... Params, class... Args>
Ret<T> out(gpurt_status_t (*f)(Params...), Args... args) {
    T value{};
    gpurt_status_t s = f(args..., &value);
    return finish(s, std::move(value));
}

/** Calls `f(args..., &handle)`: the handle in its C++ type O, or the error. */
template <class O, class... Params, class... Args>
Ret<O> make(gpurt_status_t (*f)(Params...), Args... args) {
    typename O::handle_type handle{};
    gpurt_status_t s = f(args..., &handle);
    return finish(s, O(handle));
}

/** One owner of a gpurt handle: destroys it once, moves, never copies. */
template <class H, gpurt_status_t (*Destroy)(H)>
class Owner {
public:
    using handle_type = H;
    Owner() noexcept = default;
    explicit Owner(H handle) noexcept : handle_(handle) {}
    Owner(Owner &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    Owner &operator=(Owner &&other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, nullptr);
        }
        return *this;
    }
    Owner(const Owner &) = delete;
    Owner &operator=(const Owner &) = delete;
    ~Owner() { reset(); }
    /** The C handle, still owned by this object. */
    H get() const noexcept { return handle_; }
    /** Gives up ownership: the caller destroys the C handle. */
    H release() noexcept { return std::exchange(handle_, nullptr); }
    explicit operator bool() const noexcept { return handle_ != nullptr; }

protected:
    void reset() noexcept {
        if (handle_ != nullptr) (void)Destroy(std::exchange(handle_, nullptr));
    }
    H handle_ = nullptr;
};

/** `count` elements of T at `data`, owned: given back with `Free` once, moved, never copied. */
template <class T, gpurt_status_t (*Free)(void *)>
class Buffer {
public:
    Buffer() noexcept = default;
    Buffer(Buffer &&o) noexcept : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
    Buffer &operator=(Buffer &&o) noexcept {
        if (this != &o) {
            reset();
            data_ = std::exchange(o.data_, nullptr);
            count_ = std::exchange(o.count_, 0);
        }
        return *this;
    }
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    ~Buffer() { reset(); }
    T *data() const noexcept { return data_; }
    std::size_t size() const noexcept { return count_; }
    std::size_t size_bytes() const noexcept { return count_ * sizeof(T); }
    bool empty() const noexcept { return count_ == 0; }

protected:
    Buffer(T *data, std::size_t count) noexcept : data_(data), count_(count) {}

private:
    void reset() noexcept {
        if (data_ != nullptr) (void)Free(std::exchange(data_, nullptr));
        count_ = 0;
    }
    T *data_ = nullptr;
    std::size_t count_ = 0;
};
} // namespace detail

/* ---- devices ----------------------------------------------------------------- */

/** Free and total device memory, in bytes. */
struct MemoryInfo {
    /** Free bytes. */
    std::size_t free = 0;
    /** The device's bytes. */
    std::size_t total = 0;
};

/** A device by ordinal (a value, not an owner): `gpurt::Device(0).properties()`. */
class Device {
public:
    /** No call is made. @param ordinal a device ordinal, or GPURT_CURRENT_DEVICE */
    explicit Device(int ordinal = GPURT_CURRENT_DEVICE) noexcept : ordinal_(ordinal) {}
    /** Devices visible to this process; 0 where there is no driver.
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<int> count() {
        return detail::out<int>(gpurt_device_count);
    }
    /** This thread's current device.
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<Device> current() {
        int d = 0;
        gpurt_status_t s = gpurt_get_device(&d);
        return detail::finish(s, Device(d));
    }
    /** The ordinal as given (GPURT_CURRENT_DEVICE for "the current one").
     *  @return the ordinal as given
     */
    int ordinal() const noexcept { return ordinal_; }
    /** Makes the device this thread's current one (gpurt_set_device).
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> make_current() const { return detail::finish(gpurt_set_device(ordinal_)); }
    /** @return the device's properties (gpurt_device_get_properties). */
    Ret<gpurt_device_properties_t> properties() const {
        gpurt_device_properties_t p = GPURT_DEVICE_PROPERTIES_INIT;
        gpurt_status_t s = gpurt_device_get_properties(ordinal_, &p);
        return detail::finish(s, std::move(p));
    }
    /** @return free and total memory (gpurt_mem_get_info). */
    Ret<MemoryInfo> memory_info() const {
        MemoryInfo m;
        gpurt_status_t s = gpurt_mem_get_info(ordinal_, &m.free, &m.total);
        return detail::finish(s, std::move(m));
    }
    /** Blocks until the device's work is done (gpurt_device_synchronize: a synchronising call).
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> synchronize() const { return detail::finish(gpurt_device_synchronize(ordinal_)); }
    /** gpurt_device_can_access_peer. @param peer the other device @return whether this device can access its memory */
    Ret<bool> can_access_peer(Device peer) const {
        int can = 0;
        gpurt_status_t s = gpurt_device_can_access_peer(ordinal_, peer.ordinal_, &can);
        bool b = can != 0;
        return detail::finish(s, std::move(b));
    }
    /** gpurt_device_enable_peer_access. @param peer the device whose memory this one may access
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> enable_peer_access(Device peer) const { return detail::finish(gpurt_device_enable_peer_access(ordinal_, peer.ordinal_)); }
    /** gpurt_device_disable_peer_access. @param peer the device whose memory this one may no longer access
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> disable_peer_access(Device peer) const { return detail::finish(gpurt_device_disable_peer_access(ordinal_, peer.ordinal_)); }
    /** torch.cuda.memory_stats() for this device.
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<gpurt_memory_stats_t> memory_stats() const {
        gpurt_memory_stats_t st = GPURT_MEMORY_STATS_INIT;
        gpurt_status_t s = gpurt_memory_stats(ordinal_, &st);
        return detail::finish(s, std::move(st));
    }
    /** gpurt_memory_report: where this process's memory on this device is.
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<gpurt_memory_report_t> memory_report() const {
        gpurt_memory_report_t r = GPURT_MEMORY_REPORT_INIT;
        gpurt_status_t s = gpurt_memory_report(ordinal_, &r);
        return detail::finish(s, std::move(r));
    }
    /** torch.cuda.memory_summary() for this device.
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<std::string> memory_summary() const {
        std::size_t needed = 0;
        gpurt_status_t s = gpurt_memory_summary(ordinal_, nullptr, 0, &needed);
        std::string text(s == GPURT_SUCCESS ? needed : 1, '\0');
        if (s == GPURT_SUCCESS) s = gpurt_memory_summary(ordinal_, &text[0], text.size(), &needed);
        text.resize(text.empty() ? 0 : text.size() - 1);
        return detail::finish(s, std::move(text));
    }
    /** gpurt_reset_peak_memory_stats for this device.
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> reset_peak_memory_stats() const { return detail::finish(gpurt_reset_peak_memory_stats(ordinal_)); }
    /** gpurt_set_per_process_memory_fraction. @param fraction of the device's memory gpurt may reserve, in [0, 1]
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> set_memory_fraction(double fraction) const {
        return detail::finish(gpurt_set_per_process_memory_fraction(fraction, ordinal_));
    }

private:
    int ordinal_;
};

/** Makes a device current for a scope, and restores the previous one. */
class DeviceGuard {
public:
    /** Makes `device` current until the guard is destroyed. @param device the device */
    explicit DeviceGuard(Device device) : previous_(0) {
        (void)gpurt_get_device(&previous_);
        detail::finish(gpurt_set_device(device.ordinal()));
    }
    DeviceGuard(const DeviceGuard &) = delete;
    DeviceGuard &operator=(const DeviceGuard &) = delete;
    ~DeviceGuard() { (void)gpurt_set_device(previous_); }

private:
    int previous_;
};

/* ---- streams and events ------------------------------------------------------ */

class Event;

/** A gpurt stream. Owned streams (created, or from the pool) are released on
 *  destruction; queued work still runs (gpurt_stream_destroy). */
class Stream : public detail::Owner<gpurt_stream_t, gpurt_stream_destroy> {
public:
    /** Takes ownership of a C handle. */
    using Owner::Owner;
#if !defined(GPURT_CPP_NO_EXCEPTIONS)
    /** A new non-blocking stream on the current device. */
    Stream() : Owner(create().release()) {}
    /** A new non-blocking stream on `device`.
     *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
     */
    explicit Stream(int device) : Owner(create(device).release()) {}
#endif
    /** A new stream (gpurt_stream_create). @param device the device @param flags 0 or GPURT_STREAM_NON_BLOCKING @param priority in the device's range @return the stream */
    static Ret<Stream> create(int device = GPURT_CURRENT_DEVICE, unsigned flags = GPURT_STREAM_NON_BLOCKING, int priority = 0) {
        return detail::make<Stream>(gpurt_stream_create, device, flags, priority);
    }
    /** One of the device's pooled streams (no driver call; PyTorch's getStreamFromPool).
     *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
     *  @param high_priority true: from the highest-priority pool
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<Stream> from_pool(int device = GPURT_CURRENT_DEVICE, bool high_priority = false) {
        return detail::make<Stream>(gpurt_stream_from_pool, device, high_priority ? 1 : 0);
    }
    /** This thread's current stream of `device`.
     *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<Stream> current(int device = GPURT_CURRENT_DEVICE) {
        return detail::make<Stream>(gpurt_current_stream, device);
    }
    /** The legacy default stream of `device`.
     *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<Stream> legacy_default(int device = GPURT_CURRENT_DEVICE) {
        return detail::make<Stream>(gpurt_stream_default, device);
    }
    /** Wraps a cudaStream_t / CUstream; gpurt never destroys it.
     *  @param native a cudaStream_t / CUstream of the device's primary context
     *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<Stream> wrap(void *native, int device = GPURT_CURRENT_DEVICE) {
        return detail::make<Stream>(gpurt_stream_wrap, device, native);
    }
    /** Blocks until the stream's work is done (gpurt_stream_synchronize: a synchronising call).
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> synchronize() const { return detail::finish(gpurt_stream_synchronize(handle_)); }
    /** true when all queued work is done.
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<bool> query() const { return detail::finish_query(gpurt_stream_query(handle_)); }
    /** Work queued after this waits for `event`'s last record (gpurt_stream_wait_event). @param event the event
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    inline Ret<void> wait(const Event &event) const;
    /** Work queued after this waits for `other`'s work so far (gpurt_stream_wait_stream). @param other the other stream
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> wait(const Stream &other) const { return detail::finish(gpurt_stream_wait_stream(handle_, other.handle_)); }
    /** gpurt_stream_launch_host_func. @param fn called once on a driver thread after the work before it; must not call CUDA @param user passed to `fn`
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> launch_host_func(gpurt_host_fn_t fn, void *user) const {
        return detail::finish(gpurt_stream_launch_host_func(handle_, fn, user));
    }
    /** @return the stream's device (gpurt_stream_get_device). */
    Ret<Device> device() const {
        int d = 0;
        gpurt_status_t s = gpurt_stream_get_device(handle_, &d);
        return detail::finish(s, Device(d));
    }
    /** The cudaStream_t for cuBLAS, cuDNN and your own kernels.
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void *> native() const {
        return detail::out<void *>(gpurt_stream_native, handle_);
    }
    /** @return whether the stream is being captured (gpurt_stream_is_capturing). */
    Ret<bool> is_capturing() const {
        int c = 0;
        gpurt_status_t s = gpurt_stream_is_capturing(handle_, &c);
        bool b = c != 0;
        return detail::finish(s, std::move(b));
    }
};

/** `with torch.cuda.stream(s):` — the stream and its device are current for a scope. */
class StreamGuard {
public:
    /** Makes `stream` and its device current until the guard is destroyed (gpurt_stream_push). @param stream the stream */
    explicit StreamGuard(const Stream &stream) { detail::finish(gpurt_stream_push(stream.get())); }
    StreamGuard(const StreamGuard &) = delete;
    StreamGuard &operator=(const StreamGuard &) = delete;
    ~StreamGuard() { (void)gpurt_stream_pop(); }
};

/** A share of a device's SMs with streams of its own (gpurt_green_context_create;
 *  torch.cuda.green_contexts.GreenContext). Destroy its streams before it. */
class GreenContext : public detail::Owner<gpurt_green_context_t, gpurt_green_context_destroy> {
public:
    /** Takes ownership of a C handle. */
    using Owner::Owner;
    /** gpurt_green_context_create. @param sm_count the fewest SMs wanted @param device the device @return the green context */
    static Ret<GreenContext> create(unsigned sm_count, int device = GPURT_CURRENT_DEVICE) {
        return detail::make<GreenContext>(gpurt_green_context_create, device, sm_count);
    }
    /** Green contexts on disjoint SMs, one per count; of several, the last may be 0 for every SM left
     *  (gpurt_green_context_split). @param sm_counts the counts @param device the device @return the green contexts, in order */
    static Ret<std::vector<GreenContext>> split(const std::vector<unsigned> &sm_counts, int device = GPURT_CURRENT_DEVICE) {
        std::vector<gpurt_green_context_t> raw(sm_counts.size(), nullptr);
        gpurt_status_t s = gpurt_green_context_split(device, sm_counts.data(), sm_counts.size(), raw.data());
        std::vector<GreenContext> made;
        if (s == GPURT_SUCCESS)
            for (gpurt_green_context_t h : raw) made.emplace_back(h);
        return detail::finish(s, std::move(made));
    }
    /** @return its SM count (gpurt_green_context_sm_count). */
    Ret<unsigned> sm_count() const { return detail::out<unsigned>(gpurt_green_context_sm_count, handle_); }
    /** A stream on its SMs (gpurt_green_context_stream_create; non-blocking). @param priority in the device's range @return the stream */
    Ret<Stream> stream(int priority = 0) const {
        return detail::make<Stream>(gpurt_green_context_stream_create, handle_, unsigned(GPURT_STREAM_NON_BLOCKING), priority);
    }
};

/** A gpurt event. */
class Event : public detail::Owner<gpurt_event_t, gpurt_event_destroy> {
public:
    /** Takes ownership of a C handle. */
    using Owner::Owner;
#if !defined(GPURT_CPP_NO_EXCEPTIONS)
    /** A timing event on the current device. */
    Event() : Owner(create().release()) {}
    /** A new event (gpurt_event_create). @param device the device @param flags GPURT_EVENT_* flags */
    Event(int device, unsigned flags) : Owner(create(device, flags).release()) {}
#endif
    /** flags: GPURT_EVENT_BLOCKING_SYNC, GPURT_EVENT_DISABLE_TIMING, GPURT_EVENT_INTERPROCESS, GPURT_EVENT_EXTERNAL.
     *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
     *  @param flags flags, as the C call takes them
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<Event> create(int device = GPURT_CURRENT_DEVICE, unsigned flags = 0) {
        return detail::make<Event>(gpurt_event_create, device, flags);
    }
    /** A timing-free event from the device's pool (no driver call when cached).
     *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<Event> from_pool(int device = GPURT_CURRENT_DEVICE) {
        return detail::make<Event>(gpurt_event_pool_get, device);
    }
    /** Records the event on `stream` (gpurt_event_record). @param stream the stream
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> record(const Stream &stream) const { return detail::finish(gpurt_event_record(handle_, stream.get())); }
    /** Records on this thread's current stream of the event's device.
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> record() const { return detail::finish(gpurt_event_record_current(handle_)); }
    /** Blocks until the work before the last record is done (gpurt_event_synchronize: a synchronising call).
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> synchronize() const { return detail::finish(gpurt_event_synchronize(handle_)); }
    /** @return true when the work before the last record is done (gpurt_event_query). */
    Ret<bool> query() const { return detail::finish_query(gpurt_event_query(handle_)); }
    /** Milliseconds from `start`'s record to this one's (both timing events).
     *  @param start the timing event recorded first
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<float> elapsed_since(const Event &start) const {
        return detail::out<float>(gpurt_event_elapsed_time, start.handle_, handle_);
    }
};

inline Ret<void> Stream::wait(const Event &event) const { return detail::finish(gpurt_stream_wait_event(handle_, event.get())); }

/* ---- device memory ----------------------------------------------------------- */

/** `n` elements of T from gpurt's caching allocator, for use on a stream; freed
 *  (stream-ordered) on destruction. */
template <class T>
class DeviceBuffer : public detail::Buffer<T, gpurt_free> {
    using Base = detail::Buffer<T, gpurt_free>;
    using Base::Base;

public:
    DeviceBuffer() noexcept = default;
#if !defined(GPURT_CPP_NO_EXCEPTIONS)
    /** On the current device, for its current stream.
     *  @param n the number of elements
     */
    explicit DeviceBuffer(std::size_t n) : DeviceBuffer(create(n)) {}
    /** `n` elements for use on `stream`. @param n elements @param stream the stream */
    DeviceBuffer(std::size_t n, const Stream &stream) : DeviceBuffer(create(n, stream)) {}
#endif
    /** On `device`, for this thread's current stream of it.
     *  @param n the number of elements
     *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<DeviceBuffer> create(std::size_t n, int device = GPURT_CURRENT_DEVICE) {
        void *p = nullptr;
        gpurt_status_t s = gpurt_malloc_device(device, detail::bytes_of(n, sizeof(T)), &p);
        return detail::finish(s, DeviceBuffer(static_cast<T *>(p), s == GPURT_SUCCESS ? n : 0));
    }
    /** For use on `stream`.
     *  @param n the number of elements
     *  @param stream the stream the work is ordered on
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<DeviceBuffer> create(std::size_t n, const Stream &stream) {
        void *p = nullptr;
        gpurt_status_t s = gpurt_malloc(detail::bytes_of(n, sizeof(T)), stream.get(), &p);
        return detail::finish(s, DeviceBuffer(static_cast<T *>(p), s == GPURT_SUCCESS ? n : 0));
    }
    /** Takes over `n` elements at `data` that gpurt's allocator handed out (a C
     *  call's output, such as gpurt_comm_broadcast's).
      *  @param data the elements' device address
      *  @param n the number of elements
      *  @return a buffer owning `data`
      */
    static DeviceBuffer adopt(T *data, std::size_t n) noexcept { return DeviceBuffer(data, n); }
    using Base::data;
    using Base::empty;
    using Base::size;
    using Base::size_bytes;
    /** Its free will also wait for the work queued on `stream` so far.
     *  @param stream the stream the work is ordered on
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> record_stream(const Stream &stream) const { return detail::finish(gpurt_record_stream(data(), stream.get())); }
    /** Whether an offloading sleep of its pool drops its contents instead of copying them (gpurt_mem_discard_on_sleep).
     *  @param discard true: dropped (a cache rebuilt after wake); false: kept, as every buffer starts
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> discard_on_sleep(bool discard = true) const { return detail::finish(gpurt_mem_discard_on_sleep(data(), discard ? 1 : 0)); }
    /** Promises its contents do not change (a model's weights), so that later offloading sleeps of its pool keep one host copy instead of copying it again (gpurt_mem_read_only).
     *  @param read_only true: promised; false: the promise taken back, before a write (how every buffer starts)
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> read_only(bool read_only = true) const { return detail::finish(gpurt_mem_read_only(data(), read_only ? 1 : 0)); }
    /** Copies from host memory (any kind) on `stream`.
     *  @param host host memory
     *  @param n the number of elements
     *  @param stream the stream the work is ordered on
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> copy_from(const T *host, std::size_t n, const Stream &stream) {
        if (n > size()) return detail::invalid_argument("gpurt::DeviceBuffer::copy_from: more elements than the buffer holds");
        return detail::finish(gpurt_memcpy_async(data(), host, n * sizeof(T), stream.get()));
    }
    /** Copies into host memory on `stream` and waits for it.
     *  @param host host memory
     *  @param n the number of elements
     *  @param stream the stream the work is ordered on
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> copy_to(T *host, std::size_t n, const Stream &stream) const {
        if (n > size()) return detail::invalid_argument("gpurt::DeviceBuffer::copy_to: more elements than the buffer holds");
        return detail::finish(gpurt_memcpy(host, data(), n * sizeof(T), stream.get()));
    }
    /** Copies `host` in on `stream` (gpurt_memcpy_async). @param host the elements, at most size() @param stream the stream
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> copy_from(const std::vector<T> &host, const Stream &stream) { return copy_from(host.data(), host.size(), stream); }
    /** Copies the buffer out on `stream` and waits (gpurt_memcpy). @param stream the stream @return the elements */
    Ret<std::vector<T>> to_vector(const Stream &stream) const {
        std::vector<T> v(size());
        gpurt_status_t s = empty() ? GPURT_SUCCESS : gpurt_memcpy(v.data(), data(), size_bytes(), stream.get());
        return detail::finish(s, std::move(v));
    }
};

/** gpurt.empty_cache(): every wholly free cached segment goes back to the driver.
 *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<void> empty_cache() { return detail::finish(gpurt_empty_cache()); }

/** A pool's figures, as cupy's MemoryPool gives them. */
struct MemPoolUsage {
    std::uint64_t used_bytes;  ///< Bytes in live allocations.
    std::uint64_t free_bytes;  ///< Bytes cached free.
    std::uint64_t total_bytes; ///< All bytes held from the upstream.
    std::uint64_t free_blocks; ///< Free cached blocks.
};

/** A caching pool of its own (torch.cuda.MemPool, cupy.cuda.MemoryPool): its own
 *  segments, options and statistics. Destroyed with the object, which must then
 *  hold no live allocation (gpurt refuses, and the pool stays, otherwise). */
class MemPool : public detail::Owner<gpurt_mem_pool_t, gpurt_mem_pool_destroy> {
public:
    /** Takes ownership of a C handle. */
    using Owner::Owner;
    /** `config`: GPURT_ALLOC_CONF's syntax, for this pool alone (nullptr: the
     *  process's configuration); `limit_bytes`: the most it may reserve (0: no limit).
      *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
      *  @param config GPURT_ALLOC_CONF's syntax, for this pool alone (nullptr: the process's configuration)
      *  @param limit_bytes the most bytes the pool may hold (0: no limit)
      *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
      */
    static Ret<MemPool> create(int device = GPURT_CURRENT_DEVICE, const char *config = nullptr, std::uint64_t limit_bytes = 0) {
        gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT;
        options.config = config;
        options.limit_bytes = limit_bytes;
        const gpurt_mem_pool_options_t *given = &options;
        return detail::make<MemPool>(gpurt_mem_pool_create, device, given);
    }
    /** A device's default pool (not owned: never destroyed).
     *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<gpurt_mem_pool_t> default_pool(int device = GPURT_CURRENT_DEVICE) {
        return detail::out<gpurt_mem_pool_t>(gpurt_mem_pool_default, device);
    }
    /** @return the pool's statistics (gpurt_mem_pool_stats). */
    Ret<gpurt_memory_stats_t> stats() const {
        gpurt_memory_stats_t st = GPURT_MEMORY_STATS_INIT;
        gpurt_status_t s = gpurt_mem_pool_stats(handle_, &st);
        return detail::finish(s, std::move(st));
    }
    /** @return the pool's figures (gpurt_mem_pool_usage). */
    Ret<MemPoolUsage> usage() const {
        MemPoolUsage u{};
        gpurt_status_t s = gpurt_mem_pool_usage(handle_, &u.used_bytes, &u.free_bytes, &u.total_bytes, &u.free_blocks);
        return detail::finish(s, std::move(u));
    }
    /** cupy's free_all_blocks: the pool's wholly free segments go back to the driver.
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> empty_cache() const { return detail::finish(gpurt_mem_pool_empty_cache(handle_)); }
    /** Gives the pool's device memory back to the driver, its blocks keeping their
     *  addresses (gpurt_mem_pool_sleep; needs expandable segments).
     *  @param mode GPURT_SLEEP_OFFLOAD (contents kept in pinned host memory) or GPURT_SLEEP_DISCARD
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> sleep(gpurt_sleep_mode_t mode = GPURT_SLEEP_OFFLOAD) const { return detail::finish(gpurt_mem_pool_sleep(handle_, mode)); }
    /** Makes the pinned host memory the next offload needs now (gpurt_mem_pool_sleep_prepare).
     *  @return the bytes made; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
    Ret<std::size_t> sleep_prepare() const { return detail::out<std::size_t>(gpurt_mem_pool_sleep_prepare, handle_); }
    /** Maps the pool's memory back at the same addresses (gpurt_mem_pool_wake).
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> wake() const { return detail::finish(gpurt_mem_pool_wake(handle_)); }
    /** Before work that uses the pool's memory without allocating: counts as a use for a share group, and wakes a pool its request put to sleep (gpurt_mem_pool_touch).
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> touch() const { return detail::finish(gpurt_mem_pool_touch(handle_)); }
    /** @return whether the pool sleeps (gpurt_mem_pool_is_asleep). */
    Ret<bool> is_asleep() const {
        int asleep = 0;
        gpurt_status_t s = gpurt_mem_pool_is_asleep(handle_, &asleep);
        return detail::finish(s, asleep != 0);
    }
};

/** For a scope, `pool` sleeps (vLLM's sleep and wake around a trainer's turn): put to
 *  sleep by the constructor, woken by the destructor. Where exceptions are off, a
 *  failed sleep leaves the guard inactive (`active()`); a failed wake in the
 *  destructor leaves the pool asleep, with the error in gpurt_last_error_message(). */
class MemPoolSleep {
public:
    /** Puts `pool` to sleep until the guard is destroyed. @param pool the pool @param mode GPURT_SLEEP_OFFLOAD or GPURT_SLEEP_DISCARD */
    explicit MemPoolSleep(gpurt_mem_pool_t pool, gpurt_sleep_mode_t mode = GPURT_SLEEP_OFFLOAD) : pool_(pool) {
        gpurt_status_t s = gpurt_mem_pool_sleep(pool, mode);
        asleep_ = s == GPURT_SUCCESS;
        (void)detail::finish(s);
    }
    /** Puts `pool` to sleep until the guard is destroyed. @param pool the pool @param mode GPURT_SLEEP_OFFLOAD or GPURT_SLEEP_DISCARD */
    explicit MemPoolSleep(const MemPool &pool, gpurt_sleep_mode_t mode = GPURT_SLEEP_OFFLOAD) : MemPoolSleep(pool.get(), mode) {}
    MemPoolSleep(const MemPoolSleep &) = delete;
    MemPoolSleep &operator=(const MemPoolSleep &) = delete;
    ~MemPoolSleep() {
        if (asleep_) (void)gpurt_mem_pool_wake(pool_);
    }
    /** @return whether the sleep succeeded. */
    bool active() const noexcept { return asleep_; }

private:
    gpurt_mem_pool_t pool_;
    bool asleep_ = false;
};

/** Queues `count` copies on `stream` in one call (gpurt_memcpy_batch_async). @param dsts destinations @param srcs sources @param sizes bytes of each copy @param count how many @param stream the stream @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
inline Ret<void> memcpy_batch_async(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count, gpurt_stream_t stream) {
    return detail::finish(gpurt_memcpy_batch_async(dsts, srcs, sizes, count, stream));
}

/** Puts everything gpurt holds on `device` to sleep (gpurt_device_sleep). @param device a device ordinal @param mode GPURT_SLEEP_OFFLOAD or GPURT_SLEEP_DISCARD @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
inline Ret<void> device_sleep(int device, gpurt_sleep_mode_t mode = GPURT_SLEEP_OFFLOAD) { return detail::finish(gpurt_device_sleep(device, mode)); }
/** Makes the host memory the device's next offloading sleep needs now (gpurt_device_sleep_prepare).
 *  @param device a device ordinal @return the bytes made; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
inline Ret<std::size_t> device_sleep_prepare(int device) { return detail::out<std::size_t>(gpurt_device_sleep_prepare, device); }
/** Wakes what device_sleep put to sleep (gpurt_device_wake). @param device a device ordinal @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
inline Ret<void> device_wake(int device) { return detail::finish(gpurt_device_wake(device)); }
/** @return whether gpurt_device_sleep put `device` to sleep (gpurt_device_is_asleep). @param device a device ordinal */
inline Ret<bool> device_is_asleep(int device) {
    int asleep = 0;
    gpurt_status_t s = gpurt_device_is_asleep(device, &asleep);
    return detail::finish(s, asleep != 0);
}

/** Joins share group `name` for `device` (gpurt_share_join): an allocation the device refuses asks the group's other members for their cached memory, then for their idle pools put to sleep. @param device a device ordinal @param name the group's name @param options what this process offers and how long it waits; NULL: the defaults @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
inline Ret<void> share_join(int device, const char *name, const gpurt_share_options_t *options = nullptr) { return detail::finish(gpurt_share_join(device, name, options)); }
/** What the share group may take from one pool, in place of its device's offer (gpurt_share_pool_offer). @param pool a pool of gpurt_mem_pool_create or a default pool @param offer a GPURT_SHARE_OFFER_* value @param idle_ms with the sleep offers, how long the pool must be idle first; 0: the device's @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
inline Ret<void> share_pool_offer(gpurt_mem_pool_t pool, int offer, uint32_t idle_ms = 0) { return detail::finish(gpurt_share_pool_offer(pool, offer, idle_ms)); }
/** Leaves the share group `device` is in (gpurt_share_leave). @param device a device ordinal @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
inline Ret<void> share_leave(int device) { return detail::finish(gpurt_share_leave(device)); }

/** Everything gpurt holds on a device asleep for a scope (gpurt_device_sleep), woken
 *  when the guard is destroyed. Where exceptions are off, a failed sleep leaves the
 *  guard inactive (`active()`), with the error in gpurt_last_error_message(). */
class DeviceSleep {
public:
    /** @param device a device ordinal @param mode GPURT_SLEEP_OFFLOAD or GPURT_SLEEP_DISCARD */
    explicit DeviceSleep(int device, gpurt_sleep_mode_t mode = GPURT_SLEEP_OFFLOAD) : device_(device) {
        gpurt_status_t s = gpurt_device_sleep(device, mode);
        asleep_ = s == GPURT_SUCCESS;
        (void)detail::finish(s);
    }
    DeviceSleep(const DeviceSleep &) = delete;
    DeviceSleep &operator=(const DeviceSleep &) = delete;
    ~DeviceSleep() {
        if (asleep_) (void)gpurt_device_wake(device_);
    }
    /** @return whether the sleep succeeded. */
    bool active() const noexcept { return asleep_; }

private:
    int device_;
    bool asleep_ = false;
};

/** For a scope, this thread's allocations on the pool's device come from `pool`
 *  (torch.cuda.use_mem_pool). Where exceptions are off, a failed push leaves the
 *  guard inactive (`active()`), with the error in gpurt_last_error_message(). */
class MemPoolGuard {
public:
    /** Pushes `pool` (gpurt_mem_pool_push) until the guard is destroyed. @param pool the pool */
    explicit MemPoolGuard(gpurt_mem_pool_t pool) {
        gpurt_status_t s = gpurt_mem_pool_push(pool);
        pushed_ = s == GPURT_SUCCESS;
        (void)detail::finish(s);
    }
    /** Pushes `pool` until the guard is destroyed. @param pool the pool */
    explicit MemPoolGuard(const MemPool &pool) : MemPoolGuard(pool.get()) {}
    MemPoolGuard(const MemPoolGuard &) = delete;
    MemPoolGuard &operator=(const MemPoolGuard &) = delete;
    ~MemPoolGuard() {
        if (pushed_) (void)gpurt_mem_pool_pop();
    }
    /** @return whether the push succeeded (without exceptions, a failed push is not undone). */
    bool active() const noexcept { return pushed_; }

private:
    bool pushed_ = false;
};

/** The allocator behind every device's default pool: "native" or "cudaMallocAsync".
 *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<const char *> allocator_backend() { return detail::out<const char *>(gpurt_allocator_backend); }

/** The bytes another process of this machine opens the live allocation at `ptr`
 *  with (gpurt::IpcMemory::open).
  *  @param ptr the memory accessed
  *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
  */
inline Ret<gpurt_ipc_mem_handle_t> ipc_mem_handle(void *ptr) { return detail::out<gpurt_ipc_mem_handle_t>(gpurt_ipc_mem_handle, ptr); }

/** Frees the exported blocks this process freed that no other process holds now.
 *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<void> ipc_collect() { return detail::finish(gpurt_ipc_collect()); }

/** A growable virtual buffer (gpurt_vbuffer_create): addresses reserved once, memory mapped into them on
 *  demand; data() never moves. */
class VBuffer : public detail::Owner<gpurt_vbuffer_t, gpurt_vbuffer_destroy> {
public:
    /** Takes ownership of a C handle. */
    using Owner::Owner;
    /** Reserves `max_bytes` of addresses. @param max_bytes the most it may map @param device the device @return the vbuffer */
    static Ret<VBuffer> create(std::size_t max_bytes, int device = GPURT_CURRENT_DEVICE) {
        return detail::make<VBuffer>(gpurt_vbuffer_create, device, max_bytes);
    }
    /** @return the base address (gpurt_vbuffer_address). */
    Ret<void *> data() const { return detail::out<void *>(gpurt_vbuffer_address, handle_); }
    /** @return the unit of mapping in bytes (gpurt_vbuffer_granularity). */
    Ret<std::size_t> granularity() const { return detail::out<std::size_t>(gpurt_vbuffer_granularity, handle_); }
    /** @return the bytes mapped now (gpurt_vbuffer_mapped_bytes). */
    Ret<std::size_t> mapped_bytes() const { return detail::out<std::size_t>(gpurt_vbuffer_mapped_bytes, handle_); }
    /** Backs [offset, offset + bytes) with memory (gpurt_vbuffer_map). @param offset a multiple of the granularity @param bytes a multiple of it
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
    Ret<void> map(std::size_t offset, std::size_t bytes) const { return detail::finish(gpurt_vbuffer_map(handle_, offset, bytes)); }
    /** Gives whole mappings back after `stream`'s queued work (gpurt_vbuffer_unmap). @param offset where @param bytes how many @param stream the stream
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
    Ret<void> unmap(std::size_t offset, std::size_t bytes, const Stream &stream) const {
        return detail::finish(gpurt_vbuffer_unmap(handle_, offset, bytes, stream.get()));
    }
};

/** A block another process exported, open in this one; closed once, when destroyed. */
class IpcMemory : public detail::Owner<void *, gpurt_ipc_close_mem_handle> {
public:
    using Owner::Owner;
    /** Opens an exported block (gpurt_ipc_open_mem_handle). @param handle the exporter's bytes @return the open block */
    static Ret<IpcMemory> open(const gpurt_ipc_mem_handle_t &handle) {
        return detail::make<IpcMemory>(gpurt_ipc_open_mem_handle, &handle);
    }
};

/** A random number generator of its own (torch.Generator("cuda")): Philox4x32-10
 *  from `seed`. Fills take it, or nullptr for the stream's device's default one. */
class Generator : public detail::Owner<gpurt_generator_t, gpurt_generator_destroy> {
public:
    using Owner::Owner;
    /** gpurt_generator_create. @param device the device @param seed the seed @return the generator */
    static Ret<Generator> create(int device = GPURT_CURRENT_DEVICE, std::uint64_t seed = GPURT_RNG_DEFAULT_SEED) {
        return detail::make<Generator>(gpurt_generator_create, device, seed);
    }
    /** @return the generator's seed and offset (gpurt_rng_get_state). */
    Ret<gpurt_rng_state_t> state() const { return detail::out<gpurt_rng_state_t>(gpurt_rng_get_state, handle_); }
    /** gpurt_rng_set_state. @param state a state from state()
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> set_state(const gpurt_rng_state_t &state) const { return detail::finish(gpurt_rng_set_state(handle_, &state)); }
};

/** Seeds `device`'s default generator (torch.cuda.manual_seed).
 *  @param seed the seed
 *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
 *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<void> manual_seed(std::uint64_t seed, int device = GPURT_CURRENT_DEVICE) {
    return detail::finish(gpurt_rng_manual_seed(device, seed));
}

/** A file for transfers to and from device memory (torch.cuda.gds.GdsFile). */
class GdsFile : public detail::Owner<gpurt_gds_file_t, gpurt_gds_file_close> {
public:
    using Owner::Owner;
    /** `flags`: POSIX open flags (O_RDONLY, O_RDWR | O_CREAT, ...).
     *  @param path the file's path
     *  @param flags flags, as the C call takes them
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<GdsFile> open(const char *path, int flags) { return detail::make<GdsFile>(gpurt_gds_file_open, path, flags); }
    /** Reads up to `size` bytes at `offset` into device memory; gives the bytes read.
     *  @param device_ptr device memory
     *  @param size bytes
     *  @param offset where in the file
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<std::size_t> read(void *device_ptr, std::size_t size, std::int64_t offset) const {
        return detail::out<std::size_t>(gpurt_gds_read, handle_, device_ptr, size, offset);
    }
    /** gpurt_gds_write. @param device_ptr device memory @param size bytes @param offset where in the file @return the bytes written */
    Ret<std::size_t> write(const void *device_ptr, std::size_t size, std::int64_t offset) const {
        return detail::out<std::size_t>(gpurt_gds_write, handle_, device_ptr, size, offset);
    }
    /** gpurt_gds_read_async. @param device_ptr device memory @param size bytes @param offset where in the file @param stream the stream
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> read_async(void *device_ptr, std::size_t size, std::int64_t offset, const Stream &stream) const {
        return detail::finish(gpurt_gds_read_async(handle_, device_ptr, size, offset, stream.get()));
    }
    /** gpurt_gds_write_async. @param device_ptr device memory @param size bytes @param offset where in the file @param stream the stream
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> write_async(const void *device_ptr, std::size_t size, std::int64_t offset, const Stream &stream) const {
        return detail::finish(gpurt_gds_write_async(handle_, device_ptr, size, offset, stream.get()));
    }
};

/** Which path GDS transfers take.
 *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<gpurt_gds_mode_t> gds_mode() { return detail::out<gpurt_gds_mode_t>(gpurt_gds_mode); }

/** The stream sanitizer (torch.cuda._sanitizer). */
namespace sanitizer {
/** gpurt_sanitizer_enable. @param on true turns it on
 *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<void> enable(bool on = true) { return detail::finish(gpurt_sanitizer_enable(on ? 1 : 0)); }
/** Declares that work queued on `stream` reads (or writes) `size` bytes at `ptr`.
 *  @param ptr the memory accessed
 *  @param size bytes
 *  @param access GPURT_ACCESS_READ, GPURT_ACCESS_WRITE or both
 *  @param stream the stream the work is ordered on
 *  @param tag names the work in reports (may be nullptr)
 *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<void> access(const void *ptr, std::size_t size, int access, const Stream &stream, const char *tag = nullptr) {
    return detail::finish(gpurt_sanitizer_access(ptr, size, access, stream.get(), tag));
}
/** @return the reports so far (gpurt_sanitizer_report_count). */
inline Ret<std::uint64_t> report_count() { return detail::out<std::uint64_t>(gpurt_sanitizer_report_count); }
} // namespace sanitizer

/** torch.cuda.comm's helpers for one process over several GPUs (no NCCL needed; a
 *  device may appear more than once): inputs read after the work queued on their
 *  devices' current streams, outputs new buffers ready on their devices' current streams. */
namespace comm {
namespace detail {
template <class T>
struct Dtype;
template <>
struct Dtype<float> {
    static constexpr int value = GPURT_DTYPE_F32;
};
template <>
struct Dtype<double> {
    static constexpr int value = GPURT_DTYPE_F64;
};
template <>
struct Dtype<std::int32_t> {
    static constexpr int value = GPURT_DTYPE_I32;
};
template <>
struct Dtype<std::int64_t> {
    static constexpr int value = GPURT_DTYPE_I64;
};

/** Buffers of `counts[i]` elements at `ptrs[i]`, owned, or the error. */
template <class T>
Ret<std::vector<DeviceBuffer<T>>> adopt(gpurt_status_t status, const std::vector<void *> &ptrs, const std::vector<std::size_t> &counts) {
    std::vector<DeviceBuffer<T>> out;
    if (status == GPURT_SUCCESS)
        for (std::size_t i = 0; i < ptrs.size(); i++) out.push_back(DeviceBuffer<T>::adopt(static_cast<T *>(ptrs[i]), counts[i]));
    return ::gpurt::detail::finish(status, std::move(out));
}
} // namespace detail

/** A copy of `src` (on `src_device`) on each of `devices`.
 *  @param src the source buffer
 *  @param src_device the source's device
 *  @param devices the devices, one per buffer
 *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
 */
template <class T>
Ret<std::vector<DeviceBuffer<T>>> broadcast(const DeviceBuffer<T> &src, int src_device, const std::vector<int> &devices) {
    std::vector<void *> out(devices.size());
    gpurt_status_t s = gpurt_comm_broadcast(src.data(), src_device, src.size(), detail::Dtype<T>::value, devices.data(),
                                            static_cast<int>(devices.size()), out.data());
    return detail::adopt<T>(s, out, std::vector<std::size_t>(devices.size(), src.size()));
}

/** The elementwise sum of `inputs[i]` (on `devices[i]`, equal sizes) on `destination`.
 *  @param inputs the input buffers
 *  @param devices the devices, one per buffer
 *  @param destination the device of the result
 *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
 */
template <class T>
Ret<DeviceBuffer<T>> reduce_add(const std::vector<const DeviceBuffer<T> *> &inputs, const std::vector<int> &devices, int destination) {
    if (inputs.empty() || inputs.size() != devices.size())
        return ::gpurt::detail::invalid_argument<DeviceBuffer<T>>("gpurt::comm::reduce_add: one device per input, at least one");
    std::vector<const void *> ptrs;
    for (const DeviceBuffer<T> *b : inputs) ptrs.push_back(b->data());
    void *out = nullptr;
    std::size_t n = inputs[0]->size();
    gpurt_status_t s = gpurt_comm_reduce_add(ptrs.data(), devices.data(), static_cast<int>(devices.size()), n, detail::Dtype<T>::value,
                                             destination, &out);
    return ::gpurt::detail::finish(s, DeviceBuffer<T>::adopt(static_cast<T *>(out), s == GPURT_SUCCESS ? n : 0));
}

/** `src` cut into one chunk per device (`chunk_sizes` elements each, or torch's
 *  `chunk` where empty); an empty chunk is an empty buffer (gpurt_comm_scatter).
 *  @param src the source buffer
 *  @param src_device its device
 *  @param devices the destination devices, one per chunk
 *  @param chunk_sizes elements per chunk (empty: torch's chunk)
 *  @return the chunks; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
 */
template <class T>
Ret<std::vector<DeviceBuffer<T>>> scatter(const DeviceBuffer<T> &src, int src_device, const std::vector<int> &devices,
                                          std::vector<std::size_t> chunk_sizes = {}) {
    std::vector<void *> out(devices.size());
    const std::size_t *given = chunk_sizes.empty() ? nullptr : chunk_sizes.data();
    gpurt_status_t s = gpurt_comm_scatter(src.data(), src_device, src.size(), detail::Dtype<T>::value, devices.data(),
                                          static_cast<int>(devices.size()), given, out.data());
    if (chunk_sizes.empty()) {
        std::size_t n = devices.size(), chunk = n ? (src.size() + n - 1) / n : 0;
        for (std::size_t i = 0; i < n; i++) chunk_sizes.push_back(src.size() > i * chunk ? std::min(chunk, src.size() - i * chunk) : 0);
    }
    return detail::adopt<T>(s, out, chunk_sizes);
}

/** `inputs[i]` (on `devices[i]`) one after the other in a new buffer on `destination`.
 *  @param inputs the input buffers
 *  @param devices the devices, one per buffer
 *  @param destination the device of the result
 *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
 */
template <class T>
Ret<DeviceBuffer<T>> gather(const std::vector<const DeviceBuffer<T> *> &inputs, const std::vector<int> &devices, int destination) {
    if (inputs.size() != devices.size()) return ::gpurt::detail::invalid_argument<DeviceBuffer<T>>("gpurt::comm::gather: one device per input");
    std::vector<const void *> ptrs;
    std::vector<std::size_t> counts;
    for (const DeviceBuffer<T> *b : inputs) ptrs.push_back(b->data()), counts.push_back(b->size());
    void *out = nullptr;
    std::size_t total = 0;
    for (std::size_t c : counts) total += c;
    gpurt_status_t s = gpurt_comm_gather(ptrs.data(), devices.data(), counts.data(), static_cast<int>(devices.size()), detail::Dtype<T>::value,
                                         destination, &out);
    return ::gpurt::detail::finish(s, DeviceBuffer<T>::adopt(static_cast<T *>(out), s == GPURT_SUCCESS ? total : 0));
}
} // namespace comm

/** cuBLAS handles (torch.cuda.current_blas_handle): the calling thread's, bound to
 *  the stream, with gpurt's workspace for it set. Cast to cublasHandle_t; use on this
 *  thread with the stream's device current. Without cuBLAS, GPURT_ERROR_NOT_SUPPORTED. */
namespace blas {
/** gpurt_blas_handle. @param stream the stream @return a cublasHandle_t */
inline Ret<void *> handle(const Stream &stream) { return detail::out<void *>(gpurt_blas_handle, stream.get()); }
/** The handle for the thread's current stream on its current device.
 *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<void *> current_handle() { return detail::out<void *>(gpurt_current_blas_handle); }
/** A cuBLASLt handle and the workspace to pass to cublasLtMatmul on the stream. */
struct LtHandle {
    /** The cublasLtHandle_t. */
    void *handle = nullptr;
    /** The workspace for cublasLtMatmul on the stream. */
    void *workspace = nullptr;
    /** The workspace's bytes. */
    std::size_t workspace_size = 0;
};
/** gpurt_blaslt_handle. @param stream the stream @return the handle and its workspace */
inline Ret<LtHandle> lt_handle(const Stream &stream) {
    LtHandle lt;
    gpurt_status_t s = gpurt_blaslt_handle(stream.get(), &lt.handle, &lt.workspace, &lt.workspace_size);
    return detail::finish(s, std::move(lt));
}
/** torch.backends.cuda.matmul.allow_tf32: handles given out from now on use it.
 *  @param allow true allows TF32
 *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<void> set_allow_tf32(bool allow) { return detail::finish(gpurt_blas_set_allow_tf32(allow ? 1 : 0)); }
/** @return the TF32 setting (gpurt_blas_get_allow_tf32). */
inline Ret<bool> allow_tf32() {
    int allow = 0;
    gpurt_status_t s = gpurt_blas_get_allow_tf32(&allow);
    bool b = allow != 0;
    return detail::finish(s, std::move(b));
}
/** Gives the workspaces of the device's idle cuBLAS and cuBLASLt handles back to its pool.
 *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
 *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<void> clear_workspaces(int device = GPURT_CURRENT_DEVICE) { return detail::finish(gpurt_blas_clear_workspaces(device)); }
/** Destroys the device's cuBLAS and cuBLASLt handles, threads' included, for the memory
 *  the libraries keep per handle (gpurt_blas_handles_release): ask for a handle again after.
 *  @param device a device ordinal, or GPURT_CURRENT_DEVICE
 *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<void> release_handles(int device = GPURT_CURRENT_DEVICE) { return detail::finish(gpurt_blas_handles_release(device)); }
} // namespace blas

/** cuSOLVER (dense), cuSPARSE and cuDNN handles, as blas::handle: the calling
 *  thread's, bound to the stream. */
namespace solver {
/** gpurt_solver_handle. @param stream the stream @return a cusolverDnHandle_t */
inline Ret<void *> handle(const Stream &stream) { return detail::out<void *>(gpurt_solver_handle, stream.get()); }
} // namespace solver
namespace sparse {
/** gpurt_sparse_handle. @param stream the stream @return a cusparseHandle_t */
inline Ret<void *> handle(const Stream &stream) { return detail::out<void *>(gpurt_sparse_handle, stream.get()); }
} // namespace sparse
namespace dnn {
/** gpurt_dnn_handle. @param stream the stream @return a cudnnHandle_t */
inline Ret<void *> handle(const Stream &stream) { return detail::out<void *>(gpurt_dnn_handle, stream.get()); }
} // namespace dnn

/** The allocator's memory history and snapshots (torch.cuda.memory's
 *  _record_memory_history and _dump_snapshot). */
namespace memory {
/** gpurt_memory_record_history. @param enabled start or stop @param max_entries events kept (0: 10 000) @param flags GPURT_HISTORY_* flags
 *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<void> record_history(bool enabled = true, std::size_t max_entries = 0, unsigned flags = 0) {
    return detail::finish(gpurt_memory_record_history(enabled ? 1 : 0, max_entries, flags));
}
/** gpurt_memory_snapshot. @param path the file @param format JSON, pickle or HTML @param device the device
 *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<void> snapshot(const char *path, gpurt_snapshot_format_t format = GPURT_SNAPSHOT_PICKLE, int device = GPURT_CURRENT_DEVICE) {
    return detail::finish(gpurt_memory_snapshot(device, format, path));
}
/** Tags what this thread allocates during a scope with `name` in the history. */
class Annotation {
public:
    /** Pushes `name` until the annotation is destroyed (gpurt_memory_annotate_push). @param name the annotation */
    explicit Annotation(const char *name) {
        gpurt_status_t s = gpurt_memory_annotate_push(name);
        pushed_ = s == GPURT_SUCCESS;
        (void)detail::finish(s);
    }
    Annotation(const Annotation &) = delete;
    Annotation &operator=(const Annotation &) = delete;
    ~Annotation() {
        if (pushed_) (void)gpurt_memory_annotate_pop();
    }

private:
    bool pushed_ = false;
};
} // namespace memory

/** NVTX marks and ranges (torch.cuda.nvtx). */
namespace nvtx {
/** gpurt_nvtx_mark. @param message the text
 *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
 */
inline Ret<void> mark(const char *message) { return detail::finish(gpurt_nvtx_mark(message)); }
/** A push/pop range for a scope; `depth()` is NVTX's answer to the push (-2,
 *  GPURT_NVTX_NO_TRACKING, when no tool tracks ranges). */
class Range {
public:
    /** Pushes a range until it is destroyed (gpurt_nvtx_range_push). @param message the text */
    explicit Range(const char *message) {
        gpurt_status_t s = gpurt_nvtx_range_push(message, &depth_);
        pushed_ = s == GPURT_SUCCESS;
        (void)detail::finish(s);
    }
    Range(const Range &) = delete;
    Range &operator=(const Range &) = delete;
    ~Range() {
        if (pushed_) (void)gpurt_nvtx_range_pop(nullptr);
    }
    /** @return NVTX's answer to the push. */
    int depth() const noexcept { return depth_; }

private:
    bool pushed_ = false;
    int depth_ = GPURT_NVTX_NO_TRACKING;
};
} // namespace nvtx

#if defined(GPURT_HPP_HAS_PMR) && !defined(GPURT_CPP_NO_EXCEPTIONS)
/** A std::pmr::memory_resource over gpurt's caching allocator, for one stream:
 *  device memory for containers of trivially copyable types that only the GPU
 *  touches (their elements must not be constructed on the host). Allocation
 *  failures throw gpurt::Error (std::bad_alloc's role). */
class DeviceMemoryResource final : public std::pmr::memory_resource {
public:
    /** Allocates for `stream`. @param stream the stream */
    explicit DeviceMemoryResource(gpurt_stream_t stream) noexcept : stream_(stream) {}
    /** Allocates for `stream`. @param stream the stream */
    explicit DeviceMemoryResource(const Stream &stream) noexcept : stream_(stream.get()) {}
    /** @return the stream its blocks are for. */
    gpurt_stream_t stream() const noexcept { return stream_; }

private:
    void *do_allocate(std::size_t bytes, std::size_t alignment) override {
        void *p = nullptr;
        if (alignment > 512) detail::invalid_argument("gpurt::DeviceMemoryResource: blocks are aligned to 512 bytes at most");
        detail::finish(gpurt_malloc(bytes, stream_, &p));
        return p;
    }
    void do_deallocate(void *p, std::size_t, std::size_t) override { (void)gpurt_free(p); }
    bool do_is_equal(const std::pmr::memory_resource &other) const noexcept override {
        const DeviceMemoryResource *o = dynamic_cast<const DeviceMemoryResource *>(&other);
        return o != nullptr && o->stream_ == stream_;
    }
    gpurt_stream_t stream_;
};
#endif

/* ---- pinned host memory ------------------------------------------------------ */

/** A pinned host memory pool (gpurt_pinned_pool_create); the default pool is not owned. */
class PinnedPool : public detail::Owner<gpurt_pinned_pool_t, gpurt_pinned_pool_destroy> {
public:
    /** Takes ownership of a C handle. */
    using Owner::Owner;
    /** flags: GPURT_PINNED_PORTABLE | GPURT_PINNED_DEVICE_MAPPED | GPURT_PINNED_WRITE_COMBINED.
     *  @param flags flags, as the C call takes them
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<PinnedPool> create(unsigned flags = 0) {
        return detail::make<PinnedPool>(gpurt_pinned_pool_create, flags);
    }
    /** The process-wide pool's handle (not owned: never destroyed).
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<gpurt_pinned_pool_t> default_pool() {
        return detail::out<gpurt_pinned_pool_t>(gpurt_pinned_pool_default);
    }
    /** @return the pool's statistics (gpurt_pinned_stats). */
    Ret<gpurt_host_memory_stats_t> stats() const {
        gpurt_host_memory_stats_t st = GPURT_HOST_MEMORY_STATS_INIT;
        gpurt_status_t s = gpurt_pinned_stats(handle_, &st);
        return detail::finish(s, std::move(st));
    }
    /** Returns the pool's free blocks to the driver (gpurt_pinned_empty_cache).
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> empty_cache() const { return detail::finish(gpurt_pinned_empty_cache(handle_)); }
};

/** `n` elements of T in pinned host memory from a pool; host-accessible. */
template <class T>
class PinnedBuffer : public detail::Buffer<T, gpurt_pinned_free> {
    using Base = detail::Buffer<T, gpurt_pinned_free>;
    using Base::Base;

public:
    PinnedBuffer() noexcept = default;
#if !defined(GPURT_CPP_NO_EXCEPTIONS)
    /** From the default pinned pool.
     *  @param n the number of elements
     */
    explicit PinnedBuffer(std::size_t n) : PinnedBuffer(create(n)) {}
#endif
    /** From `pool` (NULL: the default pool).
     *  @param n the number of elements
     *  @param pool the pool (nullptr: as the C call says)
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<PinnedBuffer> create(std::size_t n, gpurt_pinned_pool_t pool = nullptr) {
        gpurt_status_t s = pool == nullptr ? gpurt_pinned_pool_default(&pool) : GPURT_SUCCESS;
        void *p = nullptr;
        if (s == GPURT_SUCCESS) s = gpurt_pinned_malloc(pool, detail::bytes_of(n, sizeof(T)), &p);
        return detail::finish(s, PinnedBuffer(static_cast<T *>(p), s == GPURT_SUCCESS ? n : 0));
    }
    using Base::data;
    using Base::size;
    /** @param i an index below size() @return element `i` */
    T &operator[](std::size_t i) const noexcept { return data()[i]; }
    /** @return the first element. */
    T *begin() const noexcept { return data(); }
    /** @return one past the last element. */
    T *end() const noexcept { return data() + size(); }
    /** Declares a use on `stream` that gpurt did not see (a kernel of yours).
     *  @param stream the stream the work is ordered on
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> record_stream(const Stream &stream) const { return detail::finish(gpurt_pinned_record_stream(data(), stream.get())); }
};

/* ---- graphs ------------------------------------------------------------------ */

/** A private memory pool several captures can share (torch.cuda.graph_pool_handle). */
class GraphPool : public detail::Owner<gpurt_graph_pool_t, gpurt_graph_pool_destroy> {
public:
    /** Takes ownership of a C handle. */
    using Owner::Owner;
    /** gpurt_graph_pool_create. @param device the device @return the pool */
    static Ret<GraphPool> create(int device = GPURT_CURRENT_DEVICE) {
        return detail::make<GraphPool>(gpurt_graph_pool_create, device);
    }
    /** Makes the captures this thread did not begin through gpurt (cudaStreamBeginCapture
     *  of your own, a framework's) allocate from this pool (gpurt_graph_pool_bind_thread).
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> bind_thread() const { return detail::finish(gpurt_graph_pool_bind_thread(get())); }
    /** Unbinds this thread's pool: each foreign capture gets a pool of its own again.
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<void> unbind_thread() { return detail::finish(gpurt_graph_pool_bind_thread(nullptr)); }
};

class GraphExec;

/** A captured graph. */
class Graph : public detail::Owner<gpurt_graph_t, gpurt_graph_destroy> {
public:
    /** Takes ownership of a C handle. */
    using Owner::Owner;
    /** Starts capturing `stream` (mode: GPURT_CAPTURE_MODE_*), with allocations from
     *  `pool` or, when NULL, from a private pool of the graph.
      *  @param stream the stream the work is ordered on
      *  @param mode GPURT_CAPTURE_MODE_GLOBAL, _THREAD_LOCAL or _RELAXED
      *  @param pool the pool (nullptr: as the C call says)
      *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
      */
    static Ret<void> begin_capture(const Stream &stream, int mode = GPURT_CAPTURE_MODE_THREAD_LOCAL, gpurt_graph_pool_t pool = nullptr) {
        return detail::finish(gpurt_stream_begin_capture(stream.get(), mode, pool));
    }
    /** Starts capturing `stream` with allocations from `pool` in stream order, shared
     *  with the stream's other work (gpurt_stream_begin_capture_shared: replay on the
     *  capturing stream; the pool keeps its memory mapped while the graph lives).
      *  @param stream the stream the work is ordered on
      *  @param pool a pool made with gpurt_mem_pool_create, or a default pool
      *  @param mode GPURT_CAPTURE_MODE_GLOBAL, _THREAD_LOCAL or _RELAXED
      *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
      */
    static Ret<void> begin_capture_shared(const Stream &stream, gpurt_mem_pool_t pool, int mode = GPURT_CAPTURE_MODE_THREAD_LOCAL) {
        return detail::finish(gpurt_stream_begin_capture_shared(stream.get(), mode, pool));
    }
    /** gpurt_stream_end_capture. @param stream the capturing stream @return the graph */
    static Ret<Graph> end_capture(const Stream &stream) {
        return detail::make<Graph>(gpurt_stream_end_capture, stream.get());
    }
    /** gpurt_graph_instantiate. @param flags GPURT_GRAPH_INSTANTIATE_* flags (not _UPLOAD) @return the instantiated graph */
    inline Ret<GraphExec> instantiate(unsigned long long flags = 0) const;
    /** gpurt_graph_debug_dot_print. @param path the DOT file @param verbose with each node's parameters
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> debug_dot_print(const char *path, bool verbose = false) const {
        return detail::finish(gpurt_graph_debug_dot_print(handle_, path, verbose ? 1 : 0));
    }
};

/** An instantiated graph, replayed with launch(). */
class GraphExec : public detail::Owner<gpurt_graph_exec_t, gpurt_graph_exec_destroy> {
public:
    /** Takes ownership of a C handle. */
    using Owner::Owner;
    /** Replays the graph on `stream` (gpurt_graph_launch). @param stream the stream
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> launch(const Stream &stream) const { return detail::finish(gpurt_graph_launch(handle_, stream.get())); }
    /** gpurt_graph_upload. @param stream the stream
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> upload(const Stream &stream) const { return detail::finish(gpurt_graph_upload(handle_, stream.get())); }
    /** New parameters from a graph of the same topology (GPURT_ERROR_GRAPH_UPDATE otherwise).
     *  @param graph a graph of the same topology
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> update(const Graph &graph) const { return detail::finish(gpurt_graph_exec_update(handle_, graph.get())); }
};

inline Ret<GraphExec> Graph::instantiate(unsigned long long flags) const {
    return detail::make<GraphExec>(gpurt_graph_instantiate, handle_, flags, gpurt_stream_t{});
}

/** A conditional handle for the graph `stream` captures into now (gpurt_graph_conditional_handle_create).
 *  @param stream a capturing stream @param default_value its value at each launch, with GPURT_GRAPH_CONDITIONAL_ASSIGN_DEFAULT
 *  @param flags 0 or GPURT_GRAPH_CONDITIONAL_ASSIGN_DEFAULT @return the handle (a cudaGraphConditionalHandle) */
inline Ret<unsigned long long> conditional_handle(const Stream &stream, unsigned default_value = 0, unsigned flags = 0) {
    return detail::out<unsigned long long>(gpurt_graph_conditional_handle_create, stream.get(), default_value, flags);
}

/** Captures gpurt's kernel setting `handle` from the unsigned int at device address `value` (gpurt_graph_conditional_set).
 *  @param stream a capturing stream @param handle a conditional handle @param value a device address
 *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
inline Ret<void> conditional_set(const Stream &stream, unsigned long long handle, const unsigned *value) {
    return detail::finish(gpurt_graph_conditional_set(stream.get(), handle, value));
}

/** A conditional node whose bodies are captured on `stream` (gpurt_graph_conditional_begin): work queued
 *  on `stream` goes into the current body; next() moves to the next body; end(), or the destructor, ends
 *  the node. */
class ConditionalNode {
public:
    /** Adds the node and begins its first body. @param stream a capturing stream @param handle its handle
     *  @param type GPURT_GRAPH_CONDITIONAL_IF, _WHILE or _SWITCH @param bodies how many bodies @return the node */
    static Ret<ConditionalNode> begin(const Stream &stream, unsigned long long handle, int type, unsigned bodies = 1) {
        gpurt_status_t s = gpurt_graph_conditional_begin(stream.get(), handle, type, bodies);
        return detail::finish(s, ConditionalNode(s == GPURT_SUCCESS ? stream.get() : nullptr));
    }
    /** Takes over `other`'s open node. @param other a node */
    ConditionalNode(ConditionalNode &&other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
    ConditionalNode &operator=(ConditionalNode &&) = delete;
    ConditionalNode(const ConditionalNode &) = delete;
    ConditionalNode &operator=(const ConditionalNode &) = delete;
    /** Ends the node if end() was not called. */
    ~ConditionalNode() {
        if (stream_ != nullptr) (void)gpurt_graph_conditional_end(stream_);
    }
    /** Ends this body and begins the next (gpurt_graph_conditional_next).
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
    Ret<void> next() const { return detail::finish(gpurt_graph_conditional_next(stream_)); }
    /** Ends the node (gpurt_graph_conditional_end): the stream captures after it again.
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS) */
    Ret<void> end() { return detail::finish(gpurt_graph_conditional_end(std::exchange(stream_, nullptr))); }

private:
    explicit ConditionalNode(gpurt_stream_t stream) noexcept : stream_(stream) {}
    gpurt_stream_t stream_;
};

/* ---- modules and kernels ----------------------------------------------------- */

/** A kernel of a Module or of the NVRTC cache (not owned: it lives with them). */
class Kernel {
public:
    /** The C handle's type. */
    using handle_type = gpurt_kernel_t;
    /** Wraps a C handle (not owned). @param handle the kernel */
    explicit Kernel(gpurt_kernel_t handle = nullptr) noexcept : handle_(handle) {}
    /** @return the C handle. */
    gpurt_kernel_t get() const noexcept { return handle_; }
    /** The kernel `name` of CUDA C++ `source`, compiled for the current device once.
     *  @param source CUDA C++ source
     *  @param name the kernel's name
     *  @param options NVRTC options
     *  @return the result; a failure throws gpurt::Error (or is returned in a Result, with GPURT_CPP_NO_EXCEPTIONS)
     */
    static Ret<Kernel> compile(const char *source, const char *name, const std::vector<const char *> &options = {}) {
        return detail::make<Kernel>(gpurt_rtc_get_kernel, source, name, options.empty() ? nullptr : options.data(), options.size());
    }
    /** Launches with the addresses of the kernel's arguments, in order.
     *  @param grid blocks (x)
     *  @param block threads per block (x)
     *  @param stream the stream the work is ordered on
     *  @param args the kernel's arguments
     *  @param shared_bytes dynamic shared memory per block, in bytes
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    Ret<void> launch(unsigned grid, unsigned block, const Stream &stream, void **args, unsigned shared_bytes = 0) const {
        return detail::finish(gpurt_launch_kernel(handle_, grid, 1, 1, block, 1, 1, shared_bytes, stream.get(), args));
    }
    /** Launches with `args` (values, not pointers): `k.launch_with(grid, block, s, x, n)`.
     *  @param grid blocks (x)
     *  @param block threads per block (x)
     *  @param stream the stream the work is ordered on
     *  @param args the kernel's arguments
     *  @return nothing; a failure throws gpurt::Error (or is returned, with GPURT_CPP_NO_EXCEPTIONS)
     */
    template <class... Args>
    Ret<void> launch_with(unsigned grid, unsigned block, const Stream &stream, Args... args) const {
        void *pointers[sizeof...(Args) + 1] = {static_cast<void *>(&args)...};
        return launch(grid, block, stream, pointers);
    }
    /** gpurt_kernel_get_attribute. @param which a GPURT_KERNEL_* attribute @return its value */
    Ret<int> attribute(int which) const {
        return detail::out<int>(gpurt_kernel_get_attribute, handle_, which);
    }

private:
    gpurt_kernel_t handle_;
};

/** A loaded module (PTX, cubin or fatbin); its kernels die with it. */
class Module : public detail::Owner<gpurt_module_t, gpurt_module_unload> {
public:
    /** Takes ownership of a C handle. */
    using Owner::Owner;
    /** gpurt_module_load_file. @param path the file @return the module */
    static Ret<Module> load_file(const char *path) {
        return detail::make<Module>(gpurt_module_load_file, path);
    }
    /** gpurt_module_load_data. @param image PTX, cubin or fatbin @param size its bytes @return the module */
    static Ret<Module> load_data(const void *image, std::size_t size) {
        return detail::make<Module>(gpurt_module_load_data, image, size);
    }
    /** gpurt_module_get_kernel. @param name the kernel's name @return the kernel */
    Ret<Kernel> kernel(const char *name) const {
        return detail::make<Kernel>(gpurt_module_get_kernel, handle_, name);
    }
};

} // namespace gpurt

#endif /* GPURT_HPP */
