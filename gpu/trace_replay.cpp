// Replays recorded allocation traces (record_traces.py) through gpurt's pools
// (default and expandable segments), the driver's stream-ordered pool, PyTorch's
// caching allocator and RMM's pool, in one process, each from an empty cache.
//
//   trace_replay REPS TRACE...
//   trace_replay REPS --then TRACE...   every ordered pair A+B of the traces: B replayed
//                                       into the pool A left, A's leftovers freed and
//                                       nothing released between (a server's second model)
//
// Per trace and allocator: ns per operation of the first replay into a fresh pool
// ("cold", the median of REPS fresh pools, 5 x REPS for traces under 10 000
// operations) and of a replay into a pool that has seen the trace once ("warm", the
// same), the allocators taken in turns in each round, and fragmentation: the pool's peak
// reserved bytes over the trace's peak live bytes. PyTorch's allocator and RMM are
// compiled in when their headers are there (WITH_TORCH, WITH_RMM).
//
// First it measures what a growth step costs the driver (by size, batched, from
// several threads at once), and for each trace it prints the floor of any pool
// that keeps fragmentation within the anchors' whatever the peak turns out to be:
// the fewest steps an ideal pool (perfect packing, each step as large as that bound
// allows) takes, at the cheapest step's cost, plus gpurt's warm time per operation.
#include <gpurt.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#ifdef WITH_TORCH
#include <c10/cuda/CUDACachingAllocator.h>
#endif
#ifdef WITH_RMM
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

void check(bool ok, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "trace_replay: %s failed\n", what);
        std::exit(1);
    }
}

void check_gpurt(gpurt_status_t status, const char *what) {
    if (status != GPURT_SUCCESS) {
        std::fprintf(stderr, "trace_replay: %s: %s\n", what, gpurt_last_error_message());
        std::exit(1);
    }
}

struct Op {
    uint32_t id;
    uint32_t stream;  // UINT32_MAX: a free
    uint64_t size;
};

struct Trace {
    std::string name;
    std::vector<Op> ops;
    uint32_t ids = 0, streams = 0;
    uint64_t peak_live = 0;
};

Trace load(const std::string &path) {
    std::ifstream in(path);
    check(bool(in), "opening a trace");
    Trace t;
    std::vector<uint64_t> sizes;
    uint64_t live = 0;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        char kind = 0;
        fields >> kind;
        if (kind == '#') {
            fields >> t.name;
        } else if (kind == 'a') {
            Op op{};
            fields >> op.id >> op.size >> op.stream;
            t.ids = std::max(t.ids, op.id + 1);
            t.streams = std::max(t.streams, op.stream + 1);
            sizes.resize(t.ids);
            sizes[op.id] = op.size;
            live += op.size;
            t.peak_live = std::max(t.peak_live, live);
            t.ops.push_back(op);
        } else if (kind == 'f') {
            Op op{};
            fields >> op.id;
            op.stream = UINT32_MAX;
            live -= sizes.at(op.id);
            t.ops.push_back(op);
        }
    }
    return t;
}

// One allocator under test: a fresh pool per cold replay.
struct Allocator {
    virtual ~Allocator() = default;
    virtual void *alloc(uint64_t size, uint32_t stream) = 0;
    virtual void free(void *ptr, uint64_t size, uint32_t stream) = 0;
    virtual uint64_t peak_reserved() = 0;
    /// Segments or mappings taken from the driver so far, where the allocator says.
    virtual int64_t growth_steps() { return -1; }
};

struct Streams {
    std::vector<gpurt_stream_t> gpurt;
    std::vector<cudaStream_t> native;
    explicit Streams(uint32_t n) {
        for (uint32_t i = 0; i < n; i++) {
            gpurt_stream_t s;
            check_gpurt(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s), "gpurt_stream_create");
            void *raw;
            check_gpurt(gpurt_stream_native(s, &raw), "gpurt_stream_native");
            gpurt.push_back(s);
            native.push_back(static_cast<cudaStream_t>(raw));
        }
    }
};

struct GpurtPool : Allocator {
    gpurt_mem_pool_t pool;
    Streams &streams;
    GpurtPool(Streams &s, const char *config) : streams(s) {
        gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT;
        check_gpurt(gpurt_mem_pool_options_init(&options), "gpurt_mem_pool_options_init");
        options.config = config;
        check_gpurt(gpurt_mem_pool_create(0, &options, &pool), "gpurt_mem_pool_create");
    }
    ~GpurtPool() override { check_gpurt(gpurt_mem_pool_destroy(pool), "gpurt_mem_pool_destroy"); }
    void *alloc(uint64_t size, uint32_t stream) override {
        void *p;
        check_gpurt(gpurt_mem_pool_malloc(pool, size, streams.gpurt[stream], &p), "gpurt_mem_pool_malloc");
        return p;
    }
    void free(void *ptr, uint64_t, uint32_t) override { check_gpurt(gpurt_free(ptr), "gpurt_free"); }
    gpurt_memory_stats_t stats() {
        gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
        check_gpurt(gpurt_mem_pool_stats(pool, &stats), "gpurt_mem_pool_stats");
        return stats;
    }
    uint64_t peak_reserved() override { return uint64_t(stats().reserved_bytes.all.peak); }
    int64_t growth_steps() override { return stats().num_device_alloc; }
};

struct DriverPool : Allocator {
    cudaMemPool_t pool;
    Streams &streams;
    explicit DriverPool(Streams &s) : streams(s) {
        cudaMemPoolProps props{};
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = 0;
        check(cudaMemPoolCreate(&pool, &props) == cudaSuccess, "cudaMemPoolCreate");
        uint64_t keep = UINT64_MAX;  // a cache, as PyTorch's cudaMallocAsync backend sets it
        check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess, "release threshold");
    }
    ~DriverPool() override { cudaMemPoolDestroy(pool); }
    void *alloc(uint64_t size, uint32_t stream) override {
        void *p;
        check(cudaMallocFromPoolAsync(&p, size, pool, streams.native[stream]) == cudaSuccess, "cudaMallocFromPoolAsync");
        return p;
    }
    void free(void *ptr, uint64_t, uint32_t stream) override {
        check(cudaFreeAsync(ptr, streams.native[stream]) == cudaSuccess, "cudaFreeAsync");
    }
    uint64_t peak_reserved() override {
        uint64_t high = 0;
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high);
        return high;
    }
};

#ifdef WITH_TORCH
namespace torch_alloc = c10::cuda::CUDACachingAllocator;
struct TorchCache : Allocator {
    Streams &streams;
    explicit TorchCache(Streams &s) : streams(s) {
        torch_alloc::emptyCache();
        torch_alloc::resetPeakStats(0);
    }
    ~TorchCache() override { torch_alloc::emptyCache(); }
    void *alloc(uint64_t size, uint32_t stream) override {
        return torch_alloc::raw_alloc_with_stream(size, streams.native[stream]);
    }
    void free(void *ptr, uint64_t, uint32_t) override { torch_alloc::raw_delete(ptr); }
    uint64_t peak_reserved() override {
        auto stats = torch_alloc::getDeviceStats(0);
        return uint64_t(stats.reserved_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)].peak);
    }
};
#endif

#ifdef WITH_RMM
struct RmmPool : Allocator {
    rmm::mr::pool_memory_resource pool{rmm::mr::cuda_memory_resource{}, 0};
    Streams &streams;
    explicit RmmPool(Streams &s) : streams(s) {}
    void *alloc(uint64_t size, uint32_t stream) override {
        return pool.allocate(cuda::stream_ref{streams.native[stream]}, size, 256);
    }
    void free(void *ptr, uint64_t size, uint32_t stream) override {
        pool.deallocate(cuda::stream_ref{streams.native[stream]}, ptr, size, 256);
    }
    uint64_t peak_reserved() override { return pool.pool_size(); }  // an RMM pool never shrinks
};
#endif

// What a replay keeps per allocation id: RMM's free takes the size back.
struct Live {
    void *ptr;
    uint64_t size;
    uint32_t stream;
};

// Seconds for one replay of the whole trace.
double replay(Allocator &a, const Trace &t, Streams &streams, std::vector<Live> &live) {
    auto start = std::chrono::steady_clock::now();
    for (const Op &op : t.ops) {
        if (op.stream != UINT32_MAX) {
            live[op.id] = Live{a.alloc(op.size, op.stream), op.size, op.stream};
        } else {
            const Live &l = live[op.id];
            a.free(l.ptr, l.size, l.stream);
        }
    }
    for (cudaStream_t s : streams.native) cudaStreamSynchronize(s);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct Row {
    std::string name;
    double cold_ns, warm_ns, fragmentation;
    int64_t steps;  // of the cold replay; -1: not known
};

// Which allocations the trace leaves live at its end.
std::vector<bool> held_at_end(const Trace &t) {
    std::vector<bool> held(t.ids, false);
    for (const Op &op : t.ops) held[op.id] = op.stream != UINT32_MAX;
    return held;
}

// Frees what the trace leaves live, so that the next pool starts from nothing.
void free_rest(Allocator &a, const Trace &t, std::vector<Live> &live) {
    std::vector<bool> held = held_at_end(t);
    for (uint32_t id = 0; id < t.ids; id++)
        if (held[id]) a.free(live[id].ptr, live[id].size, live[id].stream);
}

// `second` after `first` in one pool: first's leftovers freed, nothing released between.
Trace then(const Trace &first, const Trace &second) {
    Trace t = first;
    t.name = first.name + "+" + second.name;
    std::vector<bool> held = held_at_end(first);
    for (uint32_t id = 0; id < first.ids; id++)
        if (held[id]) t.ops.push_back(Op{id, UINT32_MAX, 0});
    for (Op op : second.ops) {
        op.id += first.ids;
        t.ops.push_back(op);
    }
    t.ids = first.ids + second.ids;
    t.streams = std::max(first.streams, second.streams);
    t.peak_live = std::max(first.peak_live, second.peak_live);
    return t;
}

// A trace of a few thousand operations replays cold in 1-7 ms, where one hiccup of the
// host moves a median of 5 by 10-40 % (H100, 2026-11-27): such traces take
// SHORT_ROUNDS times the rounds.
constexpr size_t SHORT_TRACE = 10000;
constexpr int SHORT_ROUNDS = 5;

// One allocator of a trace's replays: its name and how a fresh pool of it is made.
struct Contestant {
    std::string name;
    std::function<std::unique_ptr<Allocator>()> make;
};

// Each contestant's row for trace `t`: REPS rounds, each replaying the trace into a
// fresh pool of every contestant in turn (cold, then warm into the same pool), the
// order rotated every round, so that a slow spell of the host falls on all of them
// alike rather than on one contestant's block of rounds.
std::vector<Row> measure(const std::vector<Contestant> &contestants, const Trace &t, Streams &streams, int reps) {
    size_t n = contestants.size();
    std::vector<Live> live(t.ids);
    std::vector<std::vector<double>> cold(n), warm(n);
    std::vector<Row> rows;
    for (const Contestant &c : contestants) rows.push_back(Row{c.name, 0, 0, 0, -1});
    std::vector<bool> failed(n, false);
    for (int r = 0; r < reps; r++) {
        for (size_t k = 0; k < n; k++) {
            size_t i = (k + size_t(r)) % n;
            if (failed[i]) continue;
            try {
                auto a = contestants[i].make();
                cold[i].push_back(replay(*a, t, streams, live));
                rows[i].steps = a->growth_steps();
                free_rest(*a, t, live);
                warm[i].push_back(replay(*a, t, streams, live));
                free_rest(*a, t, live);
                rows[i].fragmentation = double(a->peak_reserved()) / double(t.peak_live);
                if (r == 0) {
                    size_t free_bytes = 0, total = 0;
                    cudaMemGetInfo(&free_bytes, &total);
                    std::printf("  (%s on %s: peak reserved %.1f MiB; device free %.1f MiB)\n", rows[i].name.c_str(),
                                t.name.c_str(), a->peak_reserved() / 1048576.0, free_bytes / 1048576.0);
                }
            } catch (const std::exception &e) {  // RMM's and PyTorch's out of memory
                std::printf("%-16s %-22s failed: %s\n", t.name.c_str(), rows[i].name.c_str(), e.what());
                failed[i] = true;
            }
            for (cudaStream_t s : streams.native) cudaStreamSynchronize(s);
        }
    }
    double ops = double(t.ops.size());
    for (size_t i = 0; i < n; i++) {
        if (failed[i]) {
            rows[i] = Row{rows[i].name, 1e30, 1e30, 1e30, -1};
        } else {
            rows[i].cold_ns = median(cold[i]) * 1e9 / ops;
            rows[i].warm_ns = median(warm[i]) * 1e9 / ops;
        }
    }
    return rows;
}

// Times in us of the driver calls of growth steps: each step's create, map and
// access, or one access set over all of a run's mappings (`whole`).
struct Timings {
    std::vector<double> create, map, set, whole;
};

// Growth as a pool does it, on a reservation of the device's size.
struct Growth {
    CUcontext ctx;
    CUmemAllocationProp prop{};
    CUmemAccessDesc access{};
    CUdeviceptr base = 0;
    size_t reserved = 0;
    Growth() {
        check(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS, "cuCtxGetCurrent");
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        size_t granularity = 0, free_bytes = 0;
        check(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS,
              "cuMemGetAllocationGranularity");
        check(cuMemGetInfo(&free_bytes, &reserved) == CUDA_SUCCESS, "cuMemGetInfo");
        reserved = (reserved + granularity - 1) / granularity * granularity;
        check(cuMemAddressReserve(&base, reserved, 0, 0, 0) == CUDA_SUCCESS, "cuMemAddressReserve");
    }
    ~Growth() { cuMemAddressFree(base, reserved); }
    // `steps` steps of `size` from `at`, each call timed into `times` where given;
    // access per step, or once over all of them. Everything is unmapped after.
    void grow(CUdeviceptr at, size_t size, int steps, bool access_each, Timings *times = nullptr) {
        std::vector<CUmemGenericAllocationHandle> handles(steps);
        for (int i = 0; i < steps; i++) {
            auto t0 = std::chrono::steady_clock::now();
            check(cuMemCreate(&handles[i], size, &prop, 0) == CUDA_SUCCESS, "cuMemCreate");
            auto t1 = std::chrono::steady_clock::now();
            check(cuMemMap(at + i * size, size, 0, handles[i], 0) == CUDA_SUCCESS, "cuMemMap");
            auto t2 = std::chrono::steady_clock::now();
            if (access_each) check(cuMemSetAccess(at + i * size, size, &access, 1) == CUDA_SUCCESS, "cuMemSetAccess");
            auto t3 = std::chrono::steady_clock::now();
            if (times && access_each) {
                times->create.push_back(us(t0, t1));
                times->map.push_back(us(t1, t2));
                times->set.push_back(us(t2, t3));
            }
        }
        if (!access_each) {
            auto t0 = std::chrono::steady_clock::now();
            check(cuMemSetAccess(at, size * steps, &access, 1) == CUDA_SUCCESS, "cuMemSetAccess (all)");
            if (times) times->whole.push_back(us(t0, std::chrono::steady_clock::now()));
        }
        for (int i = 0; i < steps; i++) {
            cuMemUnmap(at + i * size, size);
            cuMemRelease(handles[i]);
        }
    }
    static double us(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
        return std::chrono::duration<double, std::micro>(b - a).count();
    }
};

// What growing costs the driver: a step by size (a segment from cuMemAlloc, or memory
// created, mapped and made accessible in reserved addresses), access set once over
// many mappings, and steps taken by several threads at once. Returns the cheapest
// step (us).
double growth_costs() {
    Growth g;
    std::printf("Driver cost of growing (us, medians; steps of one size laid end to end on a %.1f GiB reservation)\n",
                g.reserved / double(1 << 30));
    std::printf("%10s %12s %12s %10s %15s %10s\n", "size MiB", "cuMemAlloc", "cuMemCreate", "cuMemMap",
                "cuMemSetAccess", "step");
    g.grow(g.base, 2 << 20, 4, true);  // the driver's first-use costs
    double cheapest = 1e30;
    for (size_t mib : {2, 8, 32, 128, 512}) {
        size_t size = mib << 20;
        int steps = mib >= 512 ? 8 : 16;
        Timings t;
        std::vector<double> alloc, step;
        for (int rep = 0; rep < 3; rep++) g.grow(g.base, size, steps, true, &t);
        for (int i = 0; i < 9; i++) {
            CUdeviceptr p;
            auto t = std::chrono::steady_clock::now();
            check(cuMemAlloc(&p, size) == CUDA_SUCCESS, "cuMemAlloc");
            alloc.push_back(Growth::us(t, std::chrono::steady_clock::now()));
            cuMemFree(p);
        }
        for (size_t i = 0; i < t.create.size(); i++) step.push_back(t.create[i] + t.map[i] + t.set[i]);
        cheapest = std::min(cheapest, median(step));
        std::printf("%10zu %12.1f %12.1f %10.1f %15.1f %10.1f\n", mib, median(alloc), median(t.create), median(t.map),
                    median(t.set), median(step));
    }
    Timings batched;
    for (int rep = 0; rep < 3; rep++) g.grow(g.base, 8 << 20, 16, false, &batched);
    std::printf("cuMemSetAccess once over 16 new mappings of 8 MiB: %.1f us (%.1f a mapping)\n", median(batched.whole),
                median(batched.whole) / 16);
    double one = 0;
    for (int threads : {1, 2, 4, 8}) {
        std::vector<double> walls;
        for (int rep = 0; rep < 3; rep++) {
            auto t0 = std::chrono::steady_clock::now();
            std::vector<std::thread> pool;
            for (int t = 0; t < threads; t++)
                pool.emplace_back([&g, t] {
                    check(cuCtxSetCurrent(g.ctx) == CUDA_SUCCESS, "cuCtxSetCurrent");
                    g.grow(g.base + size_t(t) * (256 << 20), 8 << 20, 16, true);
                });
            for (auto &th : pool) th.join();
            walls.push_back(Growth::us(t0, std::chrono::steady_clock::now()));
        }
        double rate = 16 * threads / median(walls);
        if (threads == 1) one = rate;
        std::printf("%d thread(s) growing disjoint ranges at once, 16 steps of 8 MiB each: %.2f steps/ms (%.2fx one "
                    "thread's)\n", threads, rate * 1000, rate / one);
    }
    std::printf("\n");
    return cheapest;
}

// The fewest growth steps of an ideal pool that packs perfectly and, whenever the
// live bytes outgrow what it holds, grows to `bound` times them (2 MiB multiples):
// the most a step may take if the trace could peak right after it.
int ideal_steps(const Trace &t, double bound) {
    std::vector<uint64_t> sizes(t.ids);
    uint64_t live = 0, held = 0;
    int steps = 0;
    for (const Op &op : t.ops) {
        if (op.stream == UINT32_MAX) {
            live -= sizes[op.id];
            continue;
        }
        sizes[op.id] = op.size;
        live += op.size;
        if (live > held) {
            held = uint64_t(std::ceil(bound * double(live) / double(2 << 20))) * (2 << 20);
            steps++;
        }
    }
    return steps;
}

}  // namespace

int main(int argc, char **argv) {
    check(argc >= 3, "usage: trace_replay REPS [--then] TRACE...");
    int reps = std::atoi(argv[1]);
    bool pairs = std::string(argv[2]) == "--then";
    std::vector<Trace> traces;
    for (int i = pairs ? 3 : 2; i < argc; i++) traces.push_back(load(argv[i]));
    if (pairs) {
        std::vector<Trace> ordered;
        for (const Trace &a : traces)
            for (const Trace &b : traces)
                if (&a != &b) ordered.push_back(then(a, b));
        traces = std::move(ordered);
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    check(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice");
    cudaFree(nullptr);
#ifdef WITH_TORCH
    int devices = 0;
    cudaGetDeviceCount(&devices);
    torch_alloc::init(devices);
#endif
    double cheapest_step_us = growth_costs();
    std::printf("Allocation traces replayed from an empty cache (ns per operation, median of %d fresh pools of "
                "each allocator taken in turns, %d for traces under %zu operations; fragmentation = peak "
                "reserved / peak live)\n\n",
                reps, SHORT_ROUNDS * reps, SHORT_TRACE);
    std::printf("%-16s %-22s %10s %10s %8s %6s\n", "trace", "allocator", "cold ns", "warm ns", "frag", "steps");
    int misses = 0;
    for (const Trace &t : traces) {
        Streams streams(t.streams);
        std::vector<Contestant> contestants{
            {"gpurt", [&] { return std::make_unique<GpurtPool>(streams, "expandable_segments:False"); }},
            {"gpurt expandable", [&] { return std::make_unique<GpurtPool>(streams, "expandable_segments:True"); }},
            {"driver pool", [&] { return std::make_unique<DriverPool>(streams); }},
#ifdef WITH_TORCH
            {"pytorch", [&] { return std::make_unique<TorchCache>(streams); }},
#endif
#ifdef WITH_RMM
            {"rmm pool", [&] { return std::make_unique<RmmPool>(streams); }},
#endif
        };
        size_t anchors = 2;  // the first two contestants are gpurt's; the rest are its anchors
        std::vector<Row> rows = measure(contestants, t, streams, t.ops.size() < SHORT_TRACE ? SHORT_ROUNDS * reps : reps);
        double fastest = 1e30, tightest = 1e30;
        for (size_t r = anchors; r < rows.size(); r++) {
            fastest = std::min(fastest, rows[r].cold_ns);
            tightest = std::min(tightest, rows[r].fragmentation);
        }
        // rows[1]: gpurt with expandable segments, whose warm time is the least work
        // a cold replay does besides growing.
        int steps = ideal_steps(t, tightest);
        double ops = double(t.ops.size()), floor_ns = rows[1].warm_ns + steps * cheapest_step_us * 1e3 / ops;
        std::printf("%-16s %zu ops, peak live %.1f MiB\n", t.name.c_str(), t.ops.size(), t.peak_live / 1048576.0);
        for (size_t r = 0; r < rows.size(); r++) {
            const Row &row = rows[r];
            std::printf("%-16s %-22s %10.1f %10.1f %8.3f %6s", "", row.name.c_str(), row.cold_ns, row.warm_ns,
                        row.fragmentation, row.steps < 0 ? "-" : std::to_string(row.steps).c_str());
            if (r < anchors) {
                // Issue #44's targets; the floor (an earlier issue's target, withdrawn:
                // no growth policy meets it and the anchors' peaks together) is shown.
                bool fast = row.cold_ns <= fastest, tight = row.fragmentation <= tightest;
                std::printf("   cold %.2fx the fastest anchor (target <= 1.0): %s; %.2fx the floor; "
                            "fragmentation vs %.3f: %s",
                            row.cold_ns / fastest, fast ? "PASS" : "MISS", row.cold_ns / floor_ns, tightest,
                            tight ? "PASS" : "MISS");
                misses += !fast + !tight;
            }
            std::printf("\n");
        }
        std::printf("%-16s floor of a pool within fragmentation %.3f whatever the peak: %d steps x %.1f us + warm "
                    "%.1f ns = %.1f ns/op cold\n",
                    "", tightest, steps, cheapest_step_us, rows[1].warm_ns, floor_ns);
        for (gpurt_stream_t s : streams.gpurt) gpurt_stream_destroy(s);
    }
    std::printf("\ntrace replay: %d target misses\n", misses);
    return 0;
}
