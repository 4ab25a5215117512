/**
 * @file gpurt_rmm.hpp
 * gpurt as an RMM memory resource (RMM 25.10 and later: CCCL's cuda::mr concepts).
 * Include it where RMM is on the include path; gpurt.h alone stays free of RMM.
 *
 *   gpurt::RmmResource gpurt_mr;                        // the current device's pool
 *   rmm::mr::set_current_device_resource(gpurt_mr);     // RMM / RAPIDS allocate through gpurt
 *   rmm::device_uvector<float> v(n, stream);            // or pass rmm::device_async_resource_ref{gpurt_mr}
 *
 * Allocations are stream-ordered on the cudaStream_t RMM passes: reused at once on
 * that stream; freed on another stream, reused once that stream's queued work is
 * done. Statistics, empty_cache, the allocator's configuration and the per-process
 * memory fraction are gpurt's, shared with every other gpurt user in the process.
 */
#ifndef GPURT_RMM_HPP
#define GPURT_RMM_HPP

#include <gpurt.h>

#include <cuda/memory_resource>
#include <cuda/stream_ref>
#include <rmm/aligned.hpp>
#include <rmm/error.hpp>

#include <cstddef>

namespace gpurt {

/// An RMM device memory resource over gpurt's caching allocator. Copies are cheap
/// and compare equal when they name the same device: they all share its pool.
class RmmResource {
public:
    /// gpurt's blocks are aligned to 512 bytes; larger alignments are refused.
    static constexpr std::size_t max_alignment = 512;

    /// The pool of `device` (GPURT_CURRENT_DEVICE: the device current at each call).
    /// @param device a device ordinal, or GPURT_CURRENT_DEVICE
    explicit RmmResource(int device = GPURT_CURRENT_DEVICE) noexcept : device_(device) {}

    /// @return the device as given.
    int device() const noexcept { return device_; }

    /// Allocates `bytes` for use on `stream`; throws rmm::out_of_memory when the
    /// device is full (after gpurt freed its cache and retried) and rmm::bad_alloc on
    /// other failures, with gpurt's message.
    /// @param stream the stream the block is for
    /// @param bytes bytes wanted
    /// @param alignment a power of two up to 512
    /// @return the block's device address
    void* allocate(cuda::stream_ref stream, std::size_t bytes,
                   std::size_t alignment = rmm::CUDA_ALLOCATION_ALIGNMENT) {
        if (alignment > max_alignment || (alignment & (alignment - 1)) != 0) {
            throw rmm::bad_alloc("gpurt::RmmResource: alignment must be a power of two up to 512");
        }
        void* ptr = nullptr;
        gpurt_status_t status = gpurt_malloc_native(device_, bytes, stream.get(), &ptr);
        if (status == GPURT_ERROR_OUT_OF_MEMORY) throw rmm::out_of_memory(gpurt_last_error_message());
        if (status != GPURT_SUCCESS) throw rmm::bad_alloc(gpurt_last_error_message());
        return ptr;
    }

    /// Frees in `stream`'s order. A failure (a pointer gpurt does not hold) is logged
    /// by gpurt's log callback and otherwise ignored: deallocation cannot throw.
    /// @param stream the stream whose order the free follows
    /// @param ptr a block from allocate
    void deallocate(cuda::stream_ref stream, void* ptr, std::size_t /*bytes*/,
                    std::size_t /*alignment*/ = rmm::CUDA_ALLOCATION_ALIGNMENT) noexcept {
        (void)gpurt_free_native(ptr, stream.get());
    }

    /// As `allocate` on the legacy default stream, then waits for that stream, so the
    /// memory is ready for any stream or the host.
    /// @param bytes bytes wanted
    /// @param alignment a power of two up to 512
    /// @return the block's device address
    void* allocate_sync(std::size_t bytes, std::size_t alignment = rmm::CUDA_ALLOCATION_ALIGNMENT) {
        void* ptr = allocate(cuda::stream_ref{cudaStreamLegacy}, bytes, alignment);
        gpurt_stream_t legacy = nullptr;
        if (gpurt_stream_default(device_, &legacy) != GPURT_SUCCESS || gpurt_stream_synchronize(legacy) != GPURT_SUCCESS) {
            deallocate(cuda::stream_ref{cudaStreamLegacy}, ptr, bytes, alignment);
            throw rmm::bad_alloc(gpurt_last_error_message());
        }
        return ptr;
    }

    /// Frees in the legacy default stream's order.
    /// @param ptr a block from allocate_sync
    /// @param bytes its size (unused: gpurt knows it)
    /// @param alignment its alignment (unused)
    void deallocate_sync(void* ptr, std::size_t bytes,
                         std::size_t alignment = rmm::CUDA_ALLOCATION_ALIGNMENT) noexcept {
        deallocate(cuda::stream_ref{cudaStreamLegacy}, ptr, bytes, alignment);
    }

    /// @param other another resource @return whether both name the same device's pool
    bool operator==(const RmmResource& other) const noexcept { return device_ == other.device_; }
    /// @param other another resource @return whether they name different pools
    bool operator!=(const RmmResource& other) const noexcept { return !(*this == other); }

    /// Device memory, as RMM's device_async_resource_ref requires.
    friend void get_property(const RmmResource&, cuda::mr::device_accessible) noexcept {}

private:
    int device_;
};

static_assert(cuda::mr::resource_with<RmmResource, cuda::mr::device_accessible>,
              "gpurt::RmmResource must be an RMM device memory resource");

}  // namespace gpurt

#endif  // GPURT_RMM_HPP
