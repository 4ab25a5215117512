/* Sleep and wake against the raw driver, in one run (issue #44's targets):
 *   - offload: gpurt_mem_pool_sleep(GPURT_SLEEP_OFFLOAD) of a pool holding BYTES,
 *     the first sleep (which takes its pinned memory), a first sleep whose memory
 *     gpurt_mem_pool_sleep_prepare made ahead, and repeated ones, against a raw
 *     cuMemcpyDtoH of the same bytes into pinned memory made beforehand;
 *   - restore: gpurt_mem_pool_wake after an offload, against a raw cuMemcpyHtoD, and
 *     against a raw wake: the memory made and mapped afresh, then the copy into it
 *     (also made of 1 GiB, 256 MiB and 64 MiB physical allocations, a copy each, and one
 *     allocation copied into in pieces of those sizes; the pieces also copied each as
 *     soon as it is mapped), and both wakes again after the device idled a while
 *     (PAUSES_MS: how long the driver takes with memory freed just before);
 *   - wake of a discarded pool, against the floor: the same physical memory made and
 *     mapped with raw calls (cuMemCreate, cuMemMap, cuMemSetAccess of one mapping, as
 *     the pool's one block of BYTES is one mapping), loops of raw sleeps and wakes in
 *     turns with loops of the pool's;
 * medians of REPS (of 2 x REPS x REPS for the discarded wake and its floor, each of the
 * driver's two modes on its own: `modes`), and the pool's bytes checked exact after
 * every offload's wake (fresh random data). Every figure is GB/s or ms; the ratios are what the targets
 * read (offload and restore >= 0.9 of raw, discarded wake <= 1.2 x the floor).
 * usage: sleep_bench [GIB] [REPS] */
#include <cuda.h>
#include <gpurt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A discarded wake's cuMemCreate of memory just freed takes one of two times, by the
 * driver's choice and not the caller's: about 0.5 ms, or far longer (3-36 ms on the
 * H100); every order of the raw calls tried lands in either, the same calls in
 * different modes from one process to the next (docs/performance.md). A median over
 * both compares the modes' mix, so each mode is compared on its own: `v` sorted, the
 * samples under `cut` counted and the medians of the two modes given (0: none). */
static int modes(double *v, int n, double cut, double *fast_ms, double *slow_ms) {
    int fast = 0;
    qsort(v, (size_t)n, sizeof *v, cmp);
    while (fast < n && v[fast] < cut) fast++;
    *fast_ms = fast ? median(v, fast) : 0;
    *slow_ms = fast < n ? median(v + fast, n - fast) : 0;
    return fast;
}

static void print_mode(const char *mode, int raw_n, double raw_ms, int pool_n, double pool_ms, int n) {
    printf("  wake (discarded), %s: raw %d of %d, median %.2f ms; gpurt %d of %d, %.2f ms", mode, raw_n, n, raw_ms, pool_n, n, pool_ms);
    if (raw_n && pool_n) printf(": %.3f x the floor (target <= 1.2)\n", pool_ms / raw_ms);
    else printf(": not compared (no samples of one side in this mode)\n");
}

/* Idle times before a paused wake: a server sleeps for seconds at least, where the
 * loops below wake at once after the memory was freed. The raw wake pauses the last. */
enum { PAUSES = 3 };
static const unsigned PAUSES_MS[PAUSES] = {50, 200, 500};

static void pause_ms(unsigned ms) {
    struct timespec pause = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

#define CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { printf("FAIL %s: %d\n", #call, (int)r_); exit(1); } } while (0)
#define GP(call) do { gpurt_status_t s_ = (call); if (s_ != GPURT_SUCCESS) { printf("FAIL %s: %s\n", #call, gpurt_last_error_message()); exit(1); } } while (0)

/* A raw wake of `bytes` at `va`, in ms: the physical memory made and mapped in
 * allocations of `chunk` bytes and made accessible, then with `restore_from` its bytes
 * copied in from there, a copy of `copy_chunk` bytes at a time queued on the legacy
 * stream and waited for once; unmapped after (a raw sleep that discards).
 * `pipelined`: each allocation's copy queued as soon as it is mapped, so that the next
 * one is made while it runs. `idle_ms`: idle that long first (the driver's handling of
 * the memory freed before). */
static double raw_wake_ms(CUdeviceptr va, size_t bytes, size_t chunk, size_t copy_chunk, int pipelined, unsigned idle_ms,
                          const CUmemAllocationProp *prop, const CUmemAccessDesc *access, const char *restore_from) {
    CUmemGenericAllocationHandle handle;
    double t0, ms;
    size_t at, c;
    pause_ms(idle_ms);
    t0 = now_ms();
    for (at = 0; at < bytes; at += chunk) {
        CU(cuMemCreate(&handle, chunk, prop, 0));
        CU(cuMemMap(va + at, chunk, 0, handle, 0));
        CU(cuMemRelease(handle));
        if (pipelined) {
            CU(cuMemSetAccess(va + at, chunk, access, 1));
            for (c = at; restore_from && c < at + chunk; c += copy_chunk) CU(cuMemcpyHtoDAsync(va + c, restore_from + c, copy_chunk, 0));
        }
    }
    if (!pipelined) {
        CU(cuMemSetAccess(va, bytes, access, 1));
        for (at = 0; restore_from && at < bytes; at += copy_chunk) CU(cuMemcpyHtoDAsync(va + at, restore_from + at, copy_chunk, 0));
    }
    CU(cuStreamSynchronize(0));
    ms = now_ms() - t0;
    CU(cuCtxSynchronize()); /* a raw sleep waits for the device before it unmaps, as the pool's does */
    for (at = 0; at < bytes; at += chunk) CU(cuMemUnmap(va + at, chunk));
    return ms;
}

int main(int argc, char **argv) {
    size_t gib = argc > 1 ? strtoul(argv[1], NULL, 10) : 8, bytes = gib << 30;
    int reps = argc > 2 ? atoi(argv[2]) : 5, i, failures = 0;
    /* The discarded wake and its floor take more samples (2 x REPS rounds of REPS). */
    int discard_reps = 2 * reps * reps;
    double *t = calloc((size_t)discard_reps, sizeof *t);
    double raw_d2h, raw_h2d, raw_fresh_h2d, raw_paused_h2d, paused_wake_ms[PAUSES], floor_ms, first_sleep, first_wake, sleep_ms, wake_ms, discard_wake_ms;
    unsigned char *pattern = malloc(bytes), *back = malloc(bytes);
    gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT;
    gpurt_mem_pool_t pool = NULL;
    gpurt_stream_t stream = NULL;
    CUdeviceptr raw = 0;
    void *host = NULL, *block = NULL;
    CUcontext ctx;
    CUdevice dev;
    size_t k;
    enum { CHUNK_SIZES = 3 };
    static const unsigned chunk_mib[CHUNK_SIZES] = {1024, 256, 64};
    double chunked_ms[CHUNK_SIZES], pipelined_ms[CHUNK_SIZES], copies_ms[CHUNK_SIZES];
    int c;
    unsigned long long seed = 0x9e3779b97f4a7c15ull ^ (unsigned long long)time(NULL);
    for (k = 0; k < bytes; k++) { seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17; pattern[k] = (unsigned char)seed; }

    GP(gpurt_init());
    GP(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));

    /* Raw copies: device memory and pinned host memory made beforehand. */
    CU(cuMemAlloc(&raw, bytes));
    CU(cuMemHostAlloc(&host, bytes, 0));
    CU(cuMemcpyHtoD(raw, pattern, bytes));
    for (i = 0; i < reps; i++) { double t0 = now_ms(); CU(cuMemcpyDtoH(host, raw, bytes)); t[i] = now_ms() - t0; }
    raw_d2h = median(t, reps);
    for (i = 0; i < reps; i++) { double t0 = now_ms(); CU(cuMemcpyHtoD(raw, host, bytes)); t[i] = now_ms() - t0; }
    raw_h2d = median(t, reps);
    CU(cuMemFree(raw));

    /* Raw wakes: physical memory made, mapped at a reserved range, made accessible. */
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
    CUdeviceptr va = 0;
    {
        size_t granularity = 0;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; /* as gpurt's, shareable */
        CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        CU(cuMemAddressReserve(&va, bytes, 0, 0, 0));
        memset(&access, 0, sizeof access);
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        /* A raw wake with its restore: the same, then the bytes copied in from pinned memory. */
        for (i = 0; i < reps; i++) t[i] = raw_wake_ms(va, bytes, bytes, bytes, 0, 0, &prop, &access, (const char *)host);
        raw_fresh_h2d = median(t, reps);
        for (i = 0; i < reps; i++) t[i] = raw_wake_ms(va, bytes, bytes, bytes, 0, PAUSES_MS[PAUSES - 1], &prop, &access, (const char *)host);
        raw_paused_h2d = median(t, reps);
        /* The same made of smaller physical allocations, a copy each, and one allocation
         * copied into in the same pieces: whether the copy into fresh memory (the
         * restore's gap to a copy into warm memory) is quicker where the driver readies
         * several allocations, each before the whole, or merely where the copy is cut. */
        for (c = 0; c < CHUNK_SIZES; c++) {
            size_t chunk = (size_t)chunk_mib[c] << 20;
            chunked_ms[c] = pipelined_ms[c] = copies_ms[c] = 0;
            if (chunk % granularity != 0 || bytes % chunk != 0) continue;
            for (i = 0; i < reps; i++) t[i] = raw_wake_ms(va, bytes, chunk, chunk, 0, 0, &prop, &access, (const char *)host);
            chunked_ms[c] = median(t, reps);
            for (i = 0; i < reps; i++) t[i] = raw_wake_ms(va, bytes, chunk, chunk, 1, 0, &prop, &access, (const char *)host);
            pipelined_ms[c] = median(t, reps);
            for (i = 0; i < reps; i++) t[i] = raw_wake_ms(va, bytes, bytes, chunk, 0, 0, &prop, &access, (const char *)host);
            copies_ms[c] = median(t, reps);
        }
    }
    CU(cuMemFreeHost(host));

    /* gpurt: a pool of expandable segments holding one block of `bytes` (one mapping). */
    options.config = "expandable_segments:True";
    GP(gpurt_mem_pool_create(0, &options, &pool));
    GP(gpurt_mem_pool_malloc(pool, bytes, stream, &block));
    GP(gpurt_memcpy(block, pattern, bytes, stream));
    {
        double t0 = now_ms();
        GP(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD));
        first_sleep = now_ms() - t0;
        t0 = now_ms();
        GP(gpurt_mem_pool_wake(pool));
        first_wake = now_ms() - t0;
    }
    double *w = calloc((size_t)reps, sizeof *w), *discard = calloc((size_t)discard_reps, sizeof *discard);
    for (i = 0; i < reps; i++) {
        double t0 = now_ms();
        GP(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD));
        t[i] = now_ms() - t0;
        t0 = now_ms();
        GP(gpurt_mem_pool_wake(pool));
        w[i] = now_ms() - t0;
        GP(gpurt_memcpy(back, block, bytes, stream));
        if (memcmp(back, pattern, bytes) != 0) { printf("FAIL: the pool's bytes changed across sleep %d\n", i); failures++; }
    }
    sleep_ms = median(t, reps);
    wake_ms = median(w, reps);
    for (c = 0; c < PAUSES; c++) {
        for (i = 0; i < reps; i++) {
            double t0;
            GP(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD));
            pause_ms(PAUSES_MS[c]);
            t0 = now_ms();
            GP(gpurt_mem_pool_wake(pool));
            t[i] = now_ms() - t0;
        }
        paused_wake_ms[c] = median(t, reps);
    }
    GP(gpurt_memcpy(back, block, bytes, stream));
    if (memcmp(back, pattern, bytes) != 0) { printf("FAIL: the pool's bytes changed across the paused sleeps\n"); failures++; }
    GP(gpurt_mem_pool_empty_cache(pool)); /* the offload's pinned memory back */
    /* A first sleep prepared ahead (gpurt_mem_pool_sleep_prepare), against a later one. */
    double prepare_ms, prepared_sleep_ms;
    size_t prepared = 0;
    {
        double t0 = now_ms();
        GP(gpurt_mem_pool_sleep_prepare(pool, &prepared));
        prepare_ms = now_ms() - t0;
        t0 = now_ms();
        GP(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD));
        prepared_sleep_ms = now_ms() - t0;
        GP(gpurt_mem_pool_wake(pool));
        GP(gpurt_memcpy(back, block, bytes, stream));
        if (memcmp(back, pattern, bytes) != 0) { printf("FAIL: the pool's bytes changed across the prepared sleep\n"); failures++; }
        GP(gpurt_mem_pool_empty_cache(pool));
    }
    /* A discarded wake against its floor, each a loop of sleeps and wakes (raw: the
     * mapping unmapped and freed, then made, mapped and made accessible), the two
     * loops in turns, 2 x REPS rounds of REPS: a create's cost depends on what the driver
     * did just before (alone, each wake follows its own sleep). */
    for (c = 0; c < 2 * reps; c++) {
        for (i = c * reps; i < (c + 1) * reps; i++) t[i] = raw_wake_ms(va, bytes, bytes, bytes, 0, 0, &prop, &access, NULL);
        for (i = c * reps; i < (c + 1) * reps; i++) {
            double t0;
            GP(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_DISCARD));
            t0 = now_ms();
            GP(gpurt_mem_pool_wake(pool));
            discard[i] = now_ms() - t0;
        }
    }
    floor_ms = median(t, discard_reps); /* sorted: the fastest sample first */
    discard_wake_ms = median(discard, discard_reps);
    double cut = (t[0] < discard[0] ? t[0] : discard[0]) * 2, raw_fast_ms, raw_slow_ms, pool_fast_ms, pool_slow_ms;
    int raw_fast = modes(t, discard_reps, cut, &raw_fast_ms, &raw_slow_ms), pool_fast = modes(discard, discard_reps, cut, &pool_fast_ms, &pool_slow_ms);
    CU(cuMemAddressFree(va, bytes));
    GP(gpurt_free(block));
    GP(gpurt_stream_synchronize(stream));
    GP(gpurt_mem_pool_destroy(pool));

    printf("sleep_bench: %zu GiB, medians of %d\n", gib, reps);
    printf("  raw D2H into pinned     %8.1f ms  %6.1f GB/s\n", raw_d2h, bytes / raw_d2h / 1e6);
    printf("  raw H2D from pinned     %8.1f ms  %6.1f GB/s\n", raw_h2d, bytes / raw_h2d / 1e6);
    printf("  first sleep (offload)   %8.1f ms  %6.1f GB/s (takes its pinned memory)\n", first_sleep, bytes / first_sleep / 1e6);
    printf("  first wake (restore)    %8.1f ms  %6.1f GB/s\n", first_wake, bytes / first_wake / 1e6);
    printf("  prepare (host memory)   %8.1f ms  for %zu bytes, ahead of the sleep (gpurt_mem_pool_sleep_prepare)\n", prepare_ms, prepared);
    printf("  first sleep, prepared   %8.1f ms  %6.1f GB/s  %.2f x a later sleep (target <= 2; unprepared: %.2f x)\n", prepared_sleep_ms,
           bytes / prepared_sleep_ms / 1e6, prepared_sleep_ms / sleep_ms, first_sleep / sleep_ms);
    printf("  sleep (offload)         %8.1f ms  %6.1f GB/s  %.3f of raw D2H (target >= 0.9)\n", sleep_ms, bytes / sleep_ms / 1e6, raw_d2h / sleep_ms);
    printf("  wake (restore)          %8.1f ms  %6.1f GB/s  %.3f of raw H2D (target >= 0.9)\n", wake_ms, bytes / wake_ms / 1e6, raw_h2d / wake_ms);
    for (c = 0; c < PAUSES; c++)
        printf("  wake after %4u ms asleep %6.1f ms  %6.1f GB/s  %.3f of raw H2D\n", PAUSES_MS[c], paused_wake_ms[c], bytes / paused_wake_ms[c] / 1e6,
               raw_h2d / paused_wake_ms[c]);
    printf("  raw wake with restore   %8.1f ms  %6.1f GB/s  %.3f of raw H2D (create+map+access, then H2D into the fresh mapping); the wake is %.3f of it\n",
           raw_fresh_h2d, bytes / raw_fresh_h2d / 1e6, raw_h2d / raw_fresh_h2d, raw_fresh_h2d / wake_ms);
    printf("  the same after %4u ms idle %5.1f ms  %6.1f GB/s  %.3f of raw H2D\n", PAUSES_MS[PAUSES - 1], raw_paused_h2d, bytes / raw_paused_h2d / 1e6, raw_h2d / raw_paused_h2d);
    for (c = 0; c < CHUNK_SIZES; c++)
        if (chunked_ms[c] > 0)
            printf("  the same, %4u MiB pieces %7.1f ms  %.3f of raw H2D; each copied once mapped %.1f ms, %.3f; one allocation, copies of that size %.1f ms, %.3f\n",
                   chunk_mib[c], chunked_ms[c], raw_h2d / chunked_ms[c], pipelined_ms[c], raw_h2d / pipelined_ms[c], copies_ms[c], raw_h2d / copies_ms[c]);
    printf("  raw create+map+access   %8.2f ms (median of both modes)\n", floor_ms);
    printf("  wake (discarded)        %8.2f ms (median of both modes)\n", discard_wake_ms);
    print_mode("samples under 2 x the fastest", raw_fast, raw_fast_ms, pool_fast, pool_fast_ms, discard_reps);
    print_mode("the slower samples", discard_reps - raw_fast, raw_slow_ms, discard_reps - pool_fast, pool_slow_ms, discard_reps);
    printf("sleep_bench: %d failures\n", failures);
    return failures ? 1 : 0;
}
