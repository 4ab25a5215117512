/* Sleep under a storm (issue #60): worker threads allocate and free on their own
 * streams from the device's default pool and two user pools, while a controller
 * sleeps and wakes the three (the default pool and pool A with offload, pool B with
 * discard), one at a time or together. Allocations refused while a pool sleeps are
 * expected; frees never fail. A block's bytes are written (fresh random data) and
 * checked only under its pool's read lock, which the controller holds for writing
 * across a sleep and a wake: using memory while its pool sleeps is the caller's race,
 * not what is tested. At the end: every offloaded byte came back, every pool's figures
 * agree with its blocks, and (on a GPU, through NVML) the device's used memory fell by
 * what the pools mapped when all three slept.
 *
 *   sleep_storm SECONDS THREADS   (the stub driver in CI; under compute-sanitizer on a GPU) */
#define _POSIX_C_SOURCE 200809L /* pthread rwlocks */
#include "check.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOLS 3
#define MAX_LIVE 48

typedef struct {
    gpurt_mem_pool_t handle;
    pthread_rwlock_t use; /* read: a worker copying; write: the controller across a sleep and wake */
    int closing;          /* set before the controller waits to write, so that readers let it in */
    int offload;          /* whether its sleeps keep the contents */
} Pool;

typedef struct {
    void *ptr;
    size_t size;
    uint64_t seed;
    int pool;
    int written;
} Block;

static Pool pools[POOLS];
static int real, stop;
static long refused, allocated, verified, cycles;
static pthread_mutex_t counts = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Writes (or checks) a block's pattern while its pool is awake; a block whose pool
 * sleeps is left as it is. */
static void touch(Block *b, gpurt_stream_t stream, int check) {
    unsigned char *host, *want;
    if (__atomic_load_n(&pools[b->pool].closing, __ATOMIC_ACQUIRE) || pthread_rwlock_tryrdlock(&pools[b->pool].use) != 0) return;
    host = malloc(b->size);
    if (!check) {
        fill_pattern(host, b->size, b->seed);
        EXPECT(gpurt_memcpy(b->ptr, host, b->size, stream), GPURT_SUCCESS);
        b->written = 1;
    } else if (b->written) {
        want = malloc(b->size);
        fill_pattern(want, b->size, b->seed);
        EXPECT(gpurt_memcpy(host, b->ptr, b->size, stream), GPURT_SUCCESS);
        CHECK(!real || memcmp(host, want, b->size) == 0, "a block of %zu bytes of pool %d changed", b->size, b->pool);
        free(want);
        pthread_mutex_lock(&counts);
        verified++;
        pthread_mutex_unlock(&counts);
    }
    free(host);
    pthread_rwlock_unlock(&pools[b->pool].use);
}

static void *worker(void *arg) {
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(uintptr_t)arg + 1;
    Block live[MAX_LIVE];
    int n = 0, i;
    gpurt_stream_t stream = NULL;
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        uint64_t r = next(&rng);
        if (n < MAX_LIVE && (r % 3 != 0 || n == 0)) {
            Block b = {NULL, (size_t)512 << (next(&rng) % 12), next(&rng), (int)(next(&rng) % POOLS), 0};
            gpurt_status_t s = b.pool == 0 ? gpurt_malloc(b.size, stream, &b.ptr) : gpurt_mem_pool_malloc(pools[b.pool].handle, b.size, stream, &b.ptr);
            if (s == GPURT_SUCCESS) {
                /* Pool B discards: its blocks are written, never checked. */
                touch(&b, stream, 0);
                if (b.pool == 2) b.written = 0;
                live[n++] = b;
                pthread_mutex_lock(&counts);
                allocated++;
                pthread_mutex_unlock(&counts);
            } else {
                CHECK(s == GPURT_ERROR_INVALID_ARGUMENT && strstr(gpurt_last_error_message(), "asleep") != NULL, "an allocation failed: %s", gpurt_last_error_message());
                pthread_mutex_lock(&counts);
                refused++;
                pthread_mutex_unlock(&counts);
            }
        } else {
            i = (int)(next(&rng) % (uint64_t)n);
            if (r % 2 == 0) touch(&live[i], stream, 1);
            EXPECT(gpurt_free(live[i].ptr), GPURT_SUCCESS);
            live[i] = live[--n];
        }
    }
    for (i = 0; i < n; i++) {
        touch(&live[i], stream, 1);
        EXPECT(gpurt_free(live[i].ptr), GPURT_SUCCESS);
    }
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    return NULL;
}

static int64_t reserved(int p) {
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    EXPECT(gpurt_mem_pool_stats(pools[p].handle, &stats), GPURT_SUCCESS);
    return stats.reserved_bytes.all.current;
}

static void sleep_pool(int p) {
    EXPECT(gpurt_mem_pool_sleep(pools[p].handle, pools[p].offload ? GPURT_SLEEP_OFFLOAD : GPURT_SLEEP_DISCARD), GPURT_SUCCESS);
}

/* With the workers stopped and every pool holding blocks: all three asleep give back
 * what they mapped, as NVML sees the device (on a GPU). */
static void nvml_agrees(gpurt_stream_t stream) {
    gpurt_telemetry_t awake = GPURT_TELEMETRY_INIT, asleep = GPURT_TELEMETRY_INIT;
    void *blocks[POOLS];
    int64_t mapped = 0, given;
    int p;
    for (p = 0; p < POOLS; p++) {
        EXPECT(gpurt_mem_pool_malloc(pools[p].handle, (size_t)(96 + 32 * p) << 20, stream, &blocks[p]), GPURT_SUCCESS);
        mapped += reserved(p);
    }
    if (gpurt_device_telemetry(0, &awake) != GPURT_SUCCESS) {
        printf("sleep_storm: the NVML check is skipped: %s\n", gpurt_last_error_message());
    } else {
        for (p = 0; p < POOLS; p++) sleep_pool(p);
        EXPECT(gpurt_device_telemetry(0, &asleep), GPURT_SUCCESS);
        given = (int64_t)awake.memory_used - (int64_t)asleep.memory_used;
        CHECK(!real || llabs(given - mapped) <= (16 << 20), "NVML saw %lld MiB given back, the pools mapped %lld MiB", (long long)(given >> 20), (long long)(mapped >> 20));
        printf("sleep_storm: all three pools asleep: NVML %lld MiB given back, the pools had mapped %lld MiB\n", (long long)(given >> 20), (long long)(mapped >> 20));
        for (p = 0; p < POOLS; p++) EXPECT(gpurt_mem_pool_wake(pools[p].handle), GPURT_SUCCESS);
    }
    for (p = 0; p < POOLS; p++) EXPECT(gpurt_free(blocks[p]), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 3, end;
    int threads = argc > 2 ? atoi(argv[2]) : 4, count = 0, p, t;
    uint64_t rng = 77;
    gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT;
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    pthread_t workers[64];
    gpurt_stream_t stream = NULL;
    struct timespec awake = {0, 2000000};
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("sleep_storm: skipped: no GPU (%s)\n", gpurt_last_error_message());
        return getenv("GPURT_REQUIRE_GPU") && strcmp(getenv("GPURT_REQUIRE_GPU"), "1") == 0 ? 1 : 0;
    }
    if (threads < 1 || threads > 64) threads = 4;
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    real = strcmp(props.name, "Fake GPU") != 0;
    EXPECT(gpurt_mem_pool_default(0, &pools[0].handle), GPURT_SUCCESS);
    options.config = "expandable_segments:True";
    for (p = 1; p < POOLS; p++) EXPECT(gpurt_mem_pool_create(0, &options, &pools[p].handle), GPURT_SUCCESS);
    for (p = 0; p < POOLS; p++) {
        pthread_rwlock_init(&pools[p].use, NULL);
        pools[p].offload = p != 2;
    }
    for (t = 0; t < threads; t++) pthread_create(&workers[t], NULL, worker, (void *)(uintptr_t)(t + 1));
    for (end = now() + seconds; now() < end; cycles++) {
        /* One pool, or all three, asleep for a moment. */
        int one = (int)(next(&rng) % (POOLS + 1));
        for (p = 0; p < POOLS; p++) {
            if (one < POOLS && p != one) continue;
            __atomic_store_n(&pools[p].closing, 1, __ATOMIC_RELEASE);
            pthread_rwlock_wrlock(&pools[p].use);
            sleep_pool(p);
        }
        for (p = 0; p < POOLS; p++) {
            if (one < POOLS && p != one) continue;
            EXPECT(gpurt_mem_pool_wake(pools[p].handle), GPURT_SUCCESS);
            pthread_rwlock_unlock(&pools[p].use);
            __atomic_store_n(&pools[p].closing, 0, __ATOMIC_RELEASE);
        }
        nanosleep(&awake, NULL); /* the workers' turn with every pool awake */
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (t = 0; t < threads; t++) pthread_join(workers[t], NULL);
    for (p = 0; p < POOLS; p++) {
        gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
        EXPECT(gpurt_mem_pool_stats(pools[p].handle, &stats), GPURT_SUCCESS);
        CHECK(stats.allocated_bytes.all.current == 0 && stats.asleep_bytes == 0 && stats.offloaded_bytes == 0,
              "pool %d after the storm: %lld allocated, %lld asleep", p, (long long)stats.allocated_bytes.all.current, (long long)stats.asleep_bytes);
    }
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    nvml_agrees(stream);
    for (p = 0; p < POOLS; p++) {
        gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
        EXPECT(gpurt_mem_pool_empty_cache(pools[p].handle), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_stats(pools[p].handle, &stats), GPURT_SUCCESS);
        CHECK(stats.reserved_bytes.all.current == 0 && stats.offload_host_bytes == 0, "pool %d keeps %lld bytes reserved, %lld of host memory after empty_cache", p,
              (long long)stats.reserved_bytes.all.current, (long long)stats.offload_host_bytes);
        if (p > 0) EXPECT(gpurt_mem_pool_destroy(pools[p].handle), GPURT_SUCCESS);
    }
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    printf("sleep_storm: %.0f s, %d threads: %ld sleep/wake cycles, %ld allocations, %ld refused while asleep, %ld blocks checked\n", seconds, threads, cycles, allocated, refused,
           verified);
    printf("sleep_storm: %d checks, %d failed (%s)\n", checks, failures, real ? props.name : "stub driver: no byte checks");
    return failures == 0 ? 0 : 1;
}
