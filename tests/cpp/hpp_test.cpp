// gpurt.hpp exercised through every type. Without a device, every call that needs
// one must throw gpurt::Error with the C layer's status and message; with one (the
// stub driver in CI, a GPU on the GPU machine) the full paths run, and on a real GPU
// the data is checked exactly. Built as C++17 and C++20, warning-free, with g++ and
// clang++; with -DGPURT_CPP_NO_EXCEPTIONS -fno-exceptions see no_exceptions_test.cpp.
#include <gpurt.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "check.hpp"

// `body` must throw gpurt::Error with `status` and a message naming `function`.
template <class F>
static void expect_error(gpurt_status_t status, const char *function, F body) {
    ++checks;
    try {
        body();
        ++failures;
        std::printf("FAIL: no error, expected %s from %s\n", gpurt_status_string(status), function);
    } catch (const gpurt::Error &e) {
        if (e.status() != status || std::strstr(e.what(), function) == nullptr) {
            ++failures;
            std::printf("FAIL: %s (%s), expected %s from %s\n", e.what(), e.status_string(), gpurt_status_string(status), function);
        }
    }
}

static_assert(!std::is_copy_constructible_v<gpurt::Stream> && std::is_nothrow_move_constructible_v<gpurt::Stream>);
static_assert(!std::is_copy_assignable_v<gpurt::Event> && std::is_nothrow_move_assignable_v<gpurt::Event>);
static_assert(!std::is_copy_constructible_v<gpurt::DeviceBuffer<float>>);
static_assert(!std::is_copy_constructible_v<gpurt::PinnedBuffer<int>>);
static_assert(!std::is_copy_constructible_v<gpurt::Graph> && !std::is_copy_constructible_v<gpurt::GraphExec>);
static_assert(!std::is_copy_constructible_v<gpurt::Module> && !std::is_copy_constructible_v<gpurt::PinnedPool>);
static_assert(std::is_base_of_v<std::runtime_error, gpurt::Error>);

static void without_device(gpurt_status_t why) {
    std::printf("hpp_test: no device (%s): every call that needs one throws\n", gpurt_status_string(why));
    CHECK(gpurt::Device::count() == 0);
    expect_error(why, "gpurt_stream_create", [] { gpurt::Stream s; });
    expect_error(why, "gpurt_stream_create", [] { gpurt::Stream s(0); });
    expect_error(why, "gpurt_event_create", [] { gpurt::Event e; });
    expect_error(why, "gpurt_malloc_device", [] { gpurt::DeviceBuffer<float> b(16); });
    expect_error(why, "gpurt_pinned_pool_default", [] { gpurt::PinnedBuffer<int> b(16); });
    expect_error(why, "gpurt_device_get_properties", [] { (void)gpurt::Device(0).properties(); });
    expect_error(why, "gpurt_device_synchronize", [] { gpurt::Device(0).synchronize(); });
    expect_error(why, "gpurt_set_device", [] { gpurt::DeviceGuard g(gpurt::Device(0)); });
    expect_error(why, "gpurt_graph_pool_create", [] { (void)gpurt::GraphPool::create(0); });
    expect_error(why, "gpurt_pinned_pool_create", [] { (void)gpurt::PinnedPool::create(); });
    expect_error(why, "gpurt_empty_cache", [] { gpurt::empty_cache(); });
    expect_error(why, "gpurt_share_join", [] { gpurt::share_join(0, "hpp-test"); });
    expect_error(GPURT_ERROR_INVALID_HANDLE, "gpurt_share_pool_offer", [] { gpurt::share_pool_offer(nullptr, GPURT_SHARE_OFFER_NEVER); });
    expect_error(why, "gpurt_mem_pool_create", [] { (void)gpurt::MemPool::create(0); });
    expect_error(why, "gpurt_current_blas_handle", [] { (void)gpurt::blas::current_handle(); });
    // Empty owners destroy nothing; moved-from owners are empty.
    gpurt::Stream empty(nullptr);
    gpurt::Stream moved(std::move(empty));
    CHECK(!empty && !moved);
}

static void with_device(bool real_gpu) {
    std::printf("hpp_test: %d device(s)%s\n", static_cast<int>(gpurt::Device::count()), real_gpu ? "" : " (stub driver: no data checks)");
    gpurt::Device dev(0);
    gpurt::DeviceGuard guard(dev);
    CHECK(gpurt::Device::current().ordinal() == 0);
    gpurt_device_properties_t props = dev.properties();
    CHECK(props.multiprocessor_count > 0);
    gpurt::MemoryInfo info = dev.memory_info();
    CHECK(info.total > 0 && info.free <= info.total);
    CHECK(!dev.can_access_peer(dev) || true);

    gpurt::Stream s;
    gpurt::Stream other(0);
    gpurt::Stream pooled = gpurt::Stream::from_pool(0, true);
    CHECK(s && other && pooled && s.get() != other.get());
    CHECK(s.device().ordinal() == 0 && s.native() != nullptr);

    // Math-library handles: the thread's one cuBLAS handle on any stream; where
    // cuBLAS is missing (CI's stand-in driver), not supported, naming the call.
    int cublas_version = 0;
    if (gpurt_math_library_version(GPURT_MATH_CUBLAS, &cublas_version) == GPURT_SUCCESS) {
        void *h = gpurt::blas::handle(s);
        CHECK(h != nullptr && gpurt::blas::handle(other) == h && gpurt::blas::current_handle() == h);
        gpurt::blas::LtHandle lt = gpurt::blas::lt_handle(s);
        CHECK(lt.handle != nullptr && lt.handle != h && lt.workspace != nullptr && lt.workspace_size == (1u << 20));
        gpurt::blas::set_allow_tf32(true);
        CHECK(gpurt::blas::allow_tf32() && gpurt::blas::handle(s) == h);
        gpurt::blas::set_allow_tf32(false);
        gpurt::blas::clear_workspaces();
        gpurt::blas::release_handles();
        CHECK(gpurt::blas::handle(s) != nullptr);  // a new one, after the release
        int v = 0;
        if (gpurt_math_library_version(GPURT_MATH_CUSOLVER, &v) == GPURT_SUCCESS) CHECK(gpurt::solver::handle(s) != nullptr);
        if (gpurt_math_library_version(GPURT_MATH_CUSPARSE, &v) == GPURT_SUCCESS) CHECK(gpurt::sparse::handle(s) != nullptr);
        if (gpurt_math_library_version(GPURT_MATH_CUDNN, &v) == GPURT_SUCCESS) CHECK(gpurt::dnn::handle(s) != nullptr);
    } else {
        expect_error(GPURT_ERROR_NOT_SUPPORTED, "gpurt_blas_handle", [&] { (void)gpurt::blas::handle(s); });
        expect_error(GPURT_ERROR_NOT_SUPPORTED, "gpurt_blaslt_handle", [&] { (void)gpurt::blas::lt_handle(s); });
        expect_error(GPURT_ERROR_NOT_SUPPORTED, "gpurt_dnn_handle", [&] { (void)gpurt::dnn::handle(s); });
    }
    CHECK(!gpurt::blas::allow_tf32());
    expect_error(GPURT_ERROR_INVALID_HANDLE, "gpurt_blas_handle", [] { (void)gpurt::blas::handle(gpurt::Stream(nullptr)); });
    CHECK(!s.is_capturing());

    // Data through a device buffer, exact on a real GPU.
    std::mt19937 rng(std::random_device{}());
    std::vector<std::uint32_t> host(100003);
    for (auto &v : host) v = static_cast<std::uint32_t>(rng());
    gpurt::DeviceBuffer<std::uint32_t> buf(host.size(), s);
    CHECK(buf.size() == host.size() && buf.size_bytes() == host.size() * 4 && buf.data() != nullptr);
    buf.copy_from(host, s);
    gpurt::Event start, done;
    start.record(s);
    done.record(s);
    std::vector<std::uint32_t> back = buf.to_vector(s);
    if (real_gpu) CHECK(back == host);
    done.synchronize();
    CHECK(done.query());
    CHECK(done.elapsed_since(start) >= 0.0f);
    other.wait(done);
    other.wait(s);
    buf.record_stream(other);
    expect_error(GPURT_ERROR_INVALID_ARGUMENT, "copy_from", [&] { buf.copy_from(host.data(), host.size() + 1, s); });
    expect_error(GPURT_ERROR_OUT_OF_MEMORY, "gpurt_malloc", [&] { gpurt::DeviceBuffer<double> huge(SIZE_MAX / 4, s); });

    // Moving a buffer moves ownership; the moved-from one is empty.
    gpurt::DeviceBuffer<std::uint32_t> moved_buf(std::move(buf));
    CHECK(buf.empty() && buf.data() == nullptr && moved_buf.size() == host.size());

    {
        gpurt::StreamGuard scope(other);
        gpurt::DeviceBuffer<float> on_current(1000);  // this thread's current stream: `other`
        CHECK(gpurt::Stream::current(0).get() == other.get());
    }
    CHECK(gpurt::Stream::current(0).get() != other.get());

    // Pinned memory.
    gpurt::PinnedBuffer<int> pinned(4096);
    for (std::size_t i = 0; i < pinned.size(); i++) pinned[i] = static_cast<int>(i);
    CHECK(pinned.end() - pinned.begin() == 4096);
    gpurt::PinnedPool pool = gpurt::PinnedPool::create(GPURT_PINNED_PORTABLE);
    {
        gpurt::PinnedBuffer<char> from_pool = gpurt::PinnedBuffer<char>::create(100, pool.get());
        CHECK(from_pool.data() != nullptr);
        CHECK(pool.stats().allocations.current == 1);
        from_pool.record_stream(s);
    }
    s.synchronize();
    CHECK(pool.stats().allocations.current == 0);

    // A pool of its own, used through a guard, then by its handle; it refuses to go
    // while it holds memory.
    {
        gpurt::MemPool mem_pool = gpurt::MemPool::create(0, "max_split_size_mb:64", 256u << 20);
        {
            gpurt::MemPoolGuard routed(mem_pool);
            CHECK(routed.active());
            gpurt::DeviceBuffer<int> in_pool(1000, s);
            CHECK(mem_pool.stats().allocation.all.current == 1);
            CHECK(mem_pool.usage().used_bytes == 4096);
            expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_mem_pool_destroy", [&] { gpurt::detail::finish(gpurt_mem_pool_destroy(mem_pool.get())); });
        }
        CHECK(mem_pool.stats().allocation.all.current == 0);
        gpurt::DeviceBuffer<int> outside(10, s);
        CHECK(mem_pool.stats().allocation.all.current == 0);
        s.synchronize();
        mem_pool.empty_cache();
        CHECK(mem_pool.usage().total_bytes == 0);
        CHECK(gpurt::MemPool::default_pool(0) != nullptr);
    }

    // A pool asleep for a scope: its memory back to the driver, its buffer's address kept.
    {
        gpurt::MemPool sleepy = gpurt::MemPool::create(0, "expandable_segments:True");
        gpurt::MemPoolGuard routed(sleepy);
        gpurt::DeviceBuffer<int> kept(1 << 20, s);
        void *address = kept.data();
        s.synchronize();
        {
            gpurt::MemPoolSleep asleep(sleepy, GPURT_SLEEP_DISCARD);
            CHECK(asleep.active() && sleepy.is_asleep());
            CHECK(sleepy.stats().reserved_bytes.all.current == 0);
            expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_mem_pool_sleep", [&] { sleepy.sleep(); });
            expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_mem_pool_touch", [&] { sleepy.touch(); }); // the owner's sleep
        }
        sleepy.touch();
        CHECK(!sleepy.is_asleep() && kept.data() == address);
        CHECK(sleepy.stats().reserved_bytes.all.current > 0);
        expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_mem_pool_wake", [&] { sleepy.wake(); });
    }

    // Random numbers: a generator's state round-trips; a bad fill is refused.
    {
        gpurt::manual_seed(7, 0);
        gpurt::Generator gen = gpurt::Generator::create(0, 11);
        CHECK(gen.state().seed == 11 && gen.state().offset == 0);
        gen.set_state(gpurt_rng_state_t{3, 40});
        CHECK(gen.state().offset == 40);
        expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_random_uniform", [&] {
            gpurt::detail::finish(gpurt_random_uniform(gen.get(), nullptr, 4, GPURT_DTYPE_F32, s.get()));
        });
        static_assert(!std::is_copy_constructible_v<gpurt::Generator>);
    }

    // GDS: a file's bytes to device memory and back; the sanitizer sees an unordered pair.
    {
        char path[64];
        std::snprintf(path, sizeof path, "/tmp/gpurt_hpp_gds_%d", static_cast<int>(getpid()));
        gpurt::DeviceBuffer<unsigned char> buffer(5000, s);
        std::vector<unsigned char> bytes(5000), back(5000);
        for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
        s.synchronize();
        {
            gpurt::GdsFile file = gpurt::GdsFile::open(path, O_RDWR | O_CREAT | O_TRUNC);
            gpurt::detail::finish(gpurt_memcpy(buffer.data(), bytes.data(), bytes.size(), s.get()));
            CHECK(file.write(buffer.data(), 5000, 0) == 5000);
            CHECK(file.read(buffer.data(), 8000, 0) == 5000); // the file ends at 5000
            file.read_async(buffer.data(), 100, 10, s);
            gpurt::detail::finish(gpurt_memcpy(back.data(), buffer.data(), back.size(), s.get()));
            CHECK(!real_gpu || std::memcmp(back.data(), bytes.data() + 10, 100) == 0);
            gpurt_gds_mode_t mode = gpurt::gds_mode();
            CHECK(mode == GPURT_GDS_MODE_GDS || mode == GPURT_GDS_MODE_COMPAT || mode == GPURT_GDS_MODE_STAGED);
        }
        std::remove(path);
        expect_error(GPURT_ERROR_IO, "gpurt_gds_file_open", [&] { (void)gpurt::GdsFile::open("/nonexistent/x", O_RDONLY); });

        gpurt::Stream other = gpurt::Stream::create(0, GPURT_STREAM_NON_BLOCKING);
        std::uint64_t before = gpurt::sanitizer::report_count();
        gpurt_set_log_callback([](int, const char *, void *) {}, nullptr); // the report is expected
        gpurt::sanitizer::enable();
        gpurt::sanitizer::access(buffer.data(), 64, GPURT_ACCESS_WRITE, s, "writer");
        gpurt::sanitizer::access(buffer.data(), 64, GPURT_ACCESS_READ, other, "reader");
        gpurt::sanitizer::enable(false);
        gpurt_set_log_callback(nullptr, nullptr);
        CHECK(gpurt::sanitizer::report_count() == before + 1);
        s.synchronize();
    }

    // Memory history, snapshots and NVTX through their scope guards.
    {
        gpurt::memory::record_history(true, 100, GPURT_HISTORY_CLEAR);
        {
            gpurt::nvtx::Range range("hpp_test");
            CHECK(range.depth() == GPURT_NVTX_NO_TRACKING);
            gpurt::memory::Annotation tag("hpp block");
            gpurt::DeviceBuffer<int> tagged(1000, s);
            gpurt::nvtx::mark("allocated");
        }
        gpurt::memory::record_history(false);
        const char *path = "/tmp/gpurt_hpp_snapshot.json";
        gpurt::memory::snapshot(path, GPURT_SNAPSHOT_JSON, 0);
        std::FILE *f = std::fopen(path, "r");
        CHECK(f != nullptr);
        if (f) {
            std::string text(1 << 20, '\0');
            text.resize(std::fread(&text[0], 1, text.size(), f));
            std::fclose(f);
            CHECK(text.find("\"user_metadata\":\"hpp block\"") != std::string::npos);
        }
        std::remove(path);
        expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_memory_snapshot", [&] { gpurt::memory::snapshot(path, (gpurt_snapshot_format_t)7); });
    }

    // IPC: a handle of a live block; this process cannot open its own.
    {
        gpurt::DeviceBuffer<int> shared(1000, s);
        gpurt_ipc_mem_handle_t handle = gpurt::ipc_mem_handle(shared.data());
        CHECK(std::memcmp(handle.bytes, "gpurtIPC", 8) == 0);
        expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_ipc_open_mem_handle", [&] { (void)gpurt::IpcMemory::open(handle); });
        gpurt::ipc_collect();
        CHECK(std::strcmp(gpurt::allocator_backend(), "native") == 0);
        static_assert(!std::is_copy_constructible_v<gpurt::IpcMemory>);
    }

    // A captured graph whose allocation comes from a shared graph pool.
    gpurt::GraphPool gpool = gpurt::GraphPool::create(0);
    gpurt::Graph::begin_capture(s, GPURT_CAPTURE_MODE_THREAD_LOCAL, gpool.get());
    CHECK(s.is_capturing());
    gpurt::DeviceBuffer<std::uint8_t> scratch(4096, s);
    gpurt_memset_async(scratch.data(), 7, 1, 4096, s.get());
    gpurt::Graph graph = gpurt::Graph::end_capture(s);
    gpurt::GraphExec exec = graph.instantiate();
    exec.launch(s);
    exec.launch(s);
    s.synchronize();
    expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_stream_end_capture", [&] { (void)gpurt::Graph::end_capture(s); });
    // The pool bound to this thread, as a framework's own captures would take it.
    gpool.bind_thread();
    gpurt_graph_pool_t bound = nullptr;
    gpurt::detail::finish(gpurt_graph_pool_bound_thread(&bound));
    CHECK(bound == gpool.get());
    gpurt::GraphPool::unbind_thread();
    gpurt::detail::finish(gpurt_graph_pool_bound_thread(&bound));
    CHECK(bound == nullptr);

    // A shared capture: the graph's temporary is the block the stream's next allocation gets.
    {
        gpurt::MemPool shared = gpurt::MemPool::create(0);
        gpurt::Graph::begin_capture_shared(s, shared.get(), GPURT_CAPTURE_MODE_RELAXED);
        void *temporary = nullptr;
        gpurt::detail::finish(gpurt_mem_pool_malloc(shared.get(), 4096, s.get(), &temporary));
        gpurt::detail::finish(gpurt_free(temporary));
        gpurt::Graph captured = gpurt::Graph::end_capture(s);
        void *after = nullptr;
        gpurt::detail::finish(gpurt_mem_pool_malloc(shared.get(), 4096, s.get(), &after));
        CHECK(after == temporary);
        gpurt::detail::finish(gpurt_free(after));
        expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_stream_begin_capture_shared",
                     [&] { gpurt::Graph::begin_capture_shared(s, gpool.get()); });
    }

    // Kernels: NVRTC where it is (a real GPU), a PTX module otherwise.
    static const char ptx[] = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry noop()\n{\n\tret;\n}\n";
    gpurt::Module module = gpurt::Module::load_data(ptx, sizeof ptx - 1);
    gpurt::Kernel noop = module.kernel("noop");
    noop.launch(1, 32, s, nullptr);
    CHECK(noop.attribute(GPURT_KERNEL_MAX_THREADS_PER_BLOCK) > 0);
    expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_module_get_kernel", [&] { (void)module.kernel("missing"); });
    int rtc_major = 0, rtc_minor = 0;
    if (real_gpu && gpurt_rtc_version(&rtc_major, &rtc_minor) == GPURT_SUCCESS) {
        gpurt::Kernel add = gpurt::Kernel::compile(
            "extern \"C\" __global__ void add(unsigned *x, unsigned k, unsigned n)"
            "{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += k; }",
            "add");
        std::uint32_t n = static_cast<std::uint32_t>(host.size()), k = 12345;
        add.launch_with((n + 255) / 256, 256, s, moved_buf.data(), k, n);
        std::vector<std::uint32_t> added = moved_buf.to_vector(s);
        bool exact = true;
        for (std::size_t i = 0; i < host.size(); i++) exact = exact && added[i] == host[i] + k;
        CHECK(exact);
    }
    s.synchronize();

    // Statistics and the summary.
    gpurt_memory_stats_t st = dev.memory_stats();
    CHECK(st.allocated_bytes.all.current > 0);
    std::string summary = dev.memory_summary();
    CHECK(summary.find("Allocated memory") != std::string::npos);
    dev.reset_peak_memory_stats();
    gpurt_memory_report_t report = dev.memory_report();
    CHECK(report.default_pool_live > 0 && report.default_pool_live <= static_cast<std::uint64_t>(st.allocated_bytes.all.current) && report.device_total > 0);

#if defined(GPURT_HPP_HAS_PMR)
    gpurt::DeviceMemoryResource resource(s);
    {
        std::pmr::vector<float> on_device(&resource);
        on_device.reserve(1 << 16);  // device memory: reserved, never touched by the host
        CHECK(on_device.capacity() >= (1u << 16));
        void *p = resource.allocate(1000, 256);
        CHECK(p != nullptr);
        resource.deallocate(p, 1000, 256);
        expect_error(GPURT_ERROR_INVALID_ARGUMENT, "512 bytes", [&] { (void)resource.allocate(64, 4096); });
        gpurt::DeviceMemoryResource same(s), different(other);
        CHECK(resource.is_equal(same) && !resource.is_equal(different));
    }
#endif
    // torch.cuda.comm's helpers, device 0 twice.
    {
        std::vector<float> values(1001);
        for (std::size_t i = 0; i < values.size(); i++) values[i] = static_cast<float>(rng()) / 65536.0f;
        gpurt::DeviceBuffer<float> src(values.size());
        src.copy_from(values, gpurt::Stream::current(0));
        std::vector<gpurt::DeviceBuffer<float>> copies = gpurt::comm::broadcast(src, 0, {0, 0});
        CHECK(copies.size() == 2 && copies[0].size() == values.size() && copies[0].data() != copies[1].data());
        std::vector<gpurt::DeviceBuffer<float>> parts = gpurt::comm::scatter(src, 0, {0, 0, 0}, {1, 0, 1000});
        CHECK(parts.size() == 3 && parts[0].size() == 1 && parts[1].empty() && parts[2].size() == 1000);
        gpurt::DeviceBuffer<float> whole = gpurt::comm::gather<float>({&parts[0], &parts[1], &parts[2]}, {0, 0, 0}, 0);
        CHECK(whole.size() == values.size());
        if (real_gpu) {
            CHECK(copies[1].to_vector(gpurt::Stream::current(0)) == values && whole.to_vector(gpurt::Stream::current(0)) == values);
            gpurt::DeviceBuffer<float> sum = gpurt::comm::reduce_add<float>({&copies[0], &copies[1]}, {0, 0}, 0);
            std::vector<float> got = sum.to_vector(gpurt::Stream::current(0));
            bool exact = true;
            for (std::size_t i = 0; i < values.size(); i++) exact = exact && got[i] == values[i] + values[i];
            CHECK(exact);
        }
        expect_error(GPURT_ERROR_INVALID_ARGUMENT, "add up", [&] { (void)gpurt::comm::scatter(src, 0, {0, 0}, {1, 1}); });
    }
    {
        // Green contexts: RAII in the right order (streams first), a split's shares disjoint.
        expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_green_context_create", [&] { (void)gpurt::GreenContext::create(0, 0); });
        std::vector<gpurt::GreenContext> shares = gpurt::GreenContext::split({16, 0}, 0);
        CHECK(shares.size() == 2 && shares[0].sm_count() == 16 && shares[1].sm_count() >= 16);
        gpurt::Stream green = shares[0].stream();
        std::vector<float> values(4096);
        for (std::size_t i = 0; i < values.size(); i++) values[i] = float(std::rand() % 1000) / 7.0f;
        gpurt::DeviceBuffer<float> on_green(values.size(), green);
        on_green.copy_from(values, green);
        CHECK(!real_gpu || on_green.to_vector(green) == values);
        expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_green_context_destroy", [&] { gpurt::detail::finish(gpurt_green_context_destroy(shares[0].get())); });
    }
    {
        // A conditional node: its body captured on the same stream, ended by RAII.
        gpurt::Stream cs = gpurt::Stream::create(0, GPURT_STREAM_NON_BLOCKING);
        expect_error(GPURT_ERROR_STREAM_CAPTURE, "gpurt_graph_conditional_handle_create", [&] { (void)gpurt::conditional_handle(cs); });
        gpurt::detail::finish(gpurt_stream_begin_capture(cs.get(), GPURT_CAPTURE_MODE_GLOBAL, nullptr));
        unsigned long long handle = gpurt::conditional_handle(cs, 1, GPURT_GRAPH_CONDITIONAL_ASSIGN_DEFAULT);
        void *outer = cs.native();
        {
            gpurt::ConditionalNode node = gpurt::ConditionalNode::begin(cs, handle, GPURT_GRAPH_CONDITIONAL_IF, 2);
            CHECK(cs.native() != outer);
            node.next();
            expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_graph_conditional_next", [&] { node.next(); });
        }
        CHECK(cs.native() == outer);
        gpurt_graph_t g = nullptr;
        gpurt::detail::finish(gpurt_stream_end_capture(cs.get(), &g));
        gpurt::Graph graph(g);
    }
    {
        // A vbuffer grows at its address; unmapping cuts no mapping.
        gpurt::VBuffer vb = gpurt::VBuffer::create(16u << 20, 0);
        std::size_t g = vb.granularity();
        void *base = vb.data();
        vb.map(0, g);
        vb.map(g, 2 * g);
        CHECK(vb.data() == base && vb.mapped_bytes() == 3 * g);
        gpurt::Stream vs = gpurt::Stream::create(0, GPURT_STREAM_NON_BLOCKING);
        expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_vbuffer_unmap", [&] { vb.unmap(g, g, vs); });
        vb.unmap(g, 2 * g, vs);
        CHECK(vb.mapped_bytes() == g);
    }
    gpurt::empty_cache();
    dev.synchronize();
    // Not in a share group: leaving is refused, naming the call.
    expect_error(GPURT_ERROR_INVALID_ARGUMENT, "gpurt_share_leave", [] { gpurt::share_leave(0); });
}

int main() {
    int count = 0;
    gpurt_status_t init = gpurt_init();
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0 || init != GPURT_SUCCESS) {
        without_device(init == GPURT_SUCCESS ? GPURT_ERROR_NO_DEVICE : init);
    } else {
        gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
        gpurt_device_get_properties(0, &props);
        try {
            with_device(std::strcmp(props.name, "Fake GPU") != 0);
        } catch (const gpurt::Error &e) {
            ++failures;
            std::printf("FAIL: unexpected gpurt::Error: %s\n", e.what());
        }
    }
    return report("hpp_test");
}
