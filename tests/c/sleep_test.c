/* Pools that sleep and wake through the C ABI: a pool of expandable segments and the
 * device's default pool offload their blocks' bytes (fresh random data) and get them
 * back at the same addresses, or discard them; while asleep allocations are refused
 * and frees work, and gpurt's copies, memsets, fills, elementwise kernels and GDS
 * reads of its blocks are refused;
 * the refusals (a block in a segment of its own, a graph pool, an unknown mode, a
 * second sleep, a wake of an awake pool, a block exported over IPC) change nothing. The stub
 * driver (CI) moves no bytes: there the statuses and figures are checked, and the
 * bytes on a GPU; and on the stub every driver call of a sleep and of a wake is made
 * to fail in turn: the pool stays wholly awake or wholly asleep, its figures and the
 * driver's memory agree, and the call succeeds when retried. An export racing a
 * sleep never leaves both done; a sleep or wake during a capture is refused. */
#define _POSIX_C_SOURCE 200809L /* pthread barriers */
#include "check.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS 4
static const size_t sizes[BLOCKS] = {4096, 3u << 20, 40u << 20, 1000};
static int real; /* a GPU, not the stub driver: bytes are compared */
static gpurt_stream_t copies; /* the stream the blocks' bytes are written and read on */

/* Fills blocks[from..n) with the pattern of `seed + i` from host memory. */
static void write_blocks(void *blocks[], size_t from, size_t n, uint64_t seed) {
    size_t i;
    for (i = from; i < n; i++) {
        unsigned char *host = malloc(sizes[i]);
        fill_pattern(host, sizes[i], seed + i);
        EXPECT(gpurt_memcpy(blocks[i], host, sizes[i], copies), GPURT_SUCCESS);
        free(host);
    }
}

/* Whether blocks[from..n) hold the pattern of `seed + i` (on a GPU; the stub moves no bytes). */
static void check_blocks(void *blocks[], size_t from, size_t n, uint64_t seed) {
    size_t i;
    for (i = from; i < n; i++) {
        unsigned char *host = malloc(sizes[i]), *expected = malloc(sizes[i]);
        fill_pattern(expected, sizes[i], seed + i);
        EXPECT(gpurt_memcpy(host, blocks[i], sizes[i], copies), GPURT_SUCCESS);
        CHECK(!real || memcmp(host, expected, sizes[i]) == 0, "block %zu of %zu bytes came back changed", i, sizes[i]);
        free(host);
        free(expected);
    }
}

static gpurt_memory_stats_t stats_of(gpurt_mem_pool_t pool) {
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    EXPECT(gpurt_mem_pool_stats(pool, &stats), GPURT_SUCCESS);
    return stats;
}

static uint64_t reserved(gpurt_mem_pool_t pool) { return (uint64_t)stats_of(pool).reserved_bytes.all.current; }

/* One sleep with offload and one with discard of `pool`, whose blocks come from `alloc`. */
static void sleep_and_wake(gpurt_mem_pool_t pool, gpurt_stream_t stream, int use_default) {
    void *blocks[BLOCKS], *p = NULL;
    int asleep = -1;
    size_t i;
    int64_t mapped, live;
    gpurt_memory_stats_t stats;
    for (i = 0; i < BLOCKS; i++)
        EXPECT(use_default ? gpurt_malloc(sizes[i], stream, &blocks[i]) : gpurt_mem_pool_malloc(pool, sizes[i], stream, &blocks[i]), GPURT_SUCCESS);
    write_blocks(blocks, 0, BLOCKS, 46);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    mapped = stats_of(pool).reserved_bytes.all.current;
    EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_is_asleep(pool, &asleep), GPURT_SUCCESS);
    CHECK(asleep == 1, "asleep %d", asleep);
    stats = stats_of(pool);
    for (i = 0, live = 0; i < BLOCKS; i++) live += (int64_t)((sizes[i] + 511) / 512 * 512);
    /* Only the live blocks' bytes are copied (blocks a few hundred KiB apart as one range). */
    CHECK(stats.asleep_bytes == mapped && stats.offloaded_bytes >= live && stats.offloaded_bytes < mapped, "asleep %lld and offloaded %lld bytes of %lld mapped, %lld live",
          (long long)stats.asleep_bytes, (long long)stats.offloaded_bytes, (long long)mapped, (long long)live);
    CHECK(stats.offload_host_bytes >= stats.offloaded_bytes, "%lld bytes of host memory for %lld offloaded", (long long)stats.offload_host_bytes, (long long)stats.offloaded_bytes);
    if (!use_default) EXPECT(gpurt_mem_pool_destroy(pool), GPURT_ERROR_INVALID_ARGUMENT); /* asleep: refused */
    CHECK(reserved(pool) == 0, "%llu bytes still reserved while asleep", (unsigned long long)reserved(pool));
    EXPECT(gpurt_mem_pool_malloc(pool, 4096, stream, &p), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpurt_last_error_message(), "asleep") != NULL, "the refusal says why");
    EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD), GPURT_ERROR_INVALID_ARGUMENT);
    /* gpurt's own writes and reads of its unmapped memory are refused, not faulted. */
    {
        unsigned char host[64] = {0};
        EXPECT(gpurt_memcpy(blocks[1], host, sizeof host, stream), GPURT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(gpurt_last_error_message(), "asleep") != NULL, "the copy's refusal says why");
        EXPECT(gpurt_memcpy(host, blocks[2], sizeof host, stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_memset_async(blocks[1], 0, 1, 64, stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_random_uniform(NULL, blocks[2], 16, GPURT_DTYPE_F32, stream), GPURT_ERROR_INVALID_ARGUMENT);
        {
            const char *names[] = {"a"};
            const void *inputs[] = {blocks[2]};
            gpurt_gds_file_t file = NULL;
            EXPECT(gpurt_elementwise("out = a", names, inputs, 1, GPURT_DTYPE_F32, 16, blocks[1], stream), GPURT_ERROR_INVALID_ARGUMENT);
            EXPECT(gpurt_gds_file_open("/dev/zero", O_RDONLY, &file), GPURT_SUCCESS);
            EXPECT(gpurt_gds_read(file, blocks[1], 4096, 0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
            CHECK(strstr(gpurt_last_error_message(), "asleep") != NULL, "the read's refusal says why");
            EXPECT(gpurt_gds_file_close(file), GPURT_SUCCESS);
        }
    }
    EXPECT(gpurt_free(blocks[0]), GPURT_SUCCESS); /* frees work while it sleeps */
    EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_is_asleep(pool, &asleep), GPURT_SUCCESS);
    CHECK(asleep == 0, "asleep %d after wake", asleep);
    CHECK(reserved(pool) > 0, "nothing reserved after wake");
    stats = stats_of(pool);
    CHECK(stats.asleep_bytes == 0 && stats.offloaded_bytes == 0, "bytes counted asleep after wake");
    check_blocks(blocks, 1, BLOCKS, 46);
    EXPECT(gpurt_mem_pool_wake(pool), GPURT_ERROR_INVALID_ARGUMENT);
    /* A block marked discard is not copied by an offload; the others come back whole. */
    EXPECT(gpurt_mem_discard_on_sleep(blocks[2], 1), GPURT_SUCCESS);
    EXPECT(gpurt_mem_discard_on_sleep((char *)blocks[2] + 512, 1), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_discard_on_sleep(blocks[0], 1), GPURT_ERROR_INVALID_ARGUMENT); /* freed */
    EXPECT(gpurt_mem_discard_on_sleep(NULL, 1), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD), GPURT_SUCCESS);
    stats = stats_of(pool);
    CHECK(stats.offloaded_bytes < live - (int64_t)sizes[0] - (int64_t)sizes[2] + (1 << 20), "offloaded %lld bytes with the 40 MiB block marked discard",
          (long long)stats.offloaded_bytes);
    EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
    check_blocks(blocks, 1, 2, 46);
    check_blocks(blocks, 3, BLOCKS, 46);
    EXPECT(gpurt_mem_discard_on_sleep(blocks[2], 0), GPURT_SUCCESS);
    /* Discard: the addresses stay and take new data. */
    EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_DISCARD), GPURT_SUCCESS);
    stats = stats_of(pool);
    CHECK(stats.asleep_bytes > 0 && stats.offloaded_bytes == 0, "discarded: %lld asleep, %lld offloaded", (long long)stats.asleep_bytes, (long long)stats.offloaded_bytes);
    EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
    write_blocks(blocks, 1, BLOCKS, 47);
    check_blocks(blocks, 1, BLOCKS, 47);
    /* A block promised read-only: the first offload copies it, later ones keep that copy
     * while the others change; a promise taken back, the block written and promised
     * again, is copied again. */
    EXPECT(gpurt_mem_read_only(blocks[2], 1), GPURT_SUCCESS);
    EXPECT(gpurt_mem_read_only((char *)blocks[2] + 512, 1), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_read_only(blocks[0], 1), GPURT_ERROR_INVALID_ARGUMENT); /* freed */
    EXPECT(gpurt_mem_read_only(NULL, 1), GPURT_ERROR_INVALID_ARGUMENT);
    for (i = 0; i < 4; i++) {
        if (i == 3) {
            EXPECT(gpurt_mem_read_only(blocks[2], 0), GPURT_SUCCESS);
            write_blocks(blocks, 2, 3, 60);
            EXPECT(gpurt_mem_read_only(blocks[2], 1), GPURT_SUCCESS);
        }
        write_blocks(blocks, 3, BLOCKS, 50 + i);
        EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
        check_blocks(blocks, 1, 2, 47);
        check_blocks(blocks, 2, 3, i == 3 ? 60 : 47);
        check_blocks(blocks, 3, BLOCKS, 50 + i);
    }
    EXPECT(gpurt_mem_pool_malloc(pool, 4096, stream, &p), GPURT_SUCCESS);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    for (i = 1; i < BLOCKS; i++)
        EXPECT(gpurt_free(blocks[i]), GPURT_SUCCESS);
}

/* An export and a sleep of its pool at once (issue #60): of the two, one is refused;
 * both succeeding would leave the pool asleep while another process maps its memory. */
typedef struct {
    pthread_barrier_t *start;
    gpurt_mem_pool_t pool;
    void *block;
    gpurt_status_t status;
} Racer;

static void *race_sleep(void *arg) {
    Racer *r = arg;
    pthread_barrier_wait(r->start);
    r->status = gpurt_mem_pool_sleep(r->pool, GPURT_SLEEP_DISCARD);
    return NULL;
}

static void *race_export(void *arg) {
    Racer *r = arg;
    gpurt_ipc_mem_handle_t handle;
    pthread_barrier_wait(r->start);
    r->status = gpurt_ipc_mem_handle(r->block, &handle);
    return NULL;
}

static void export_races_sleep(gpurt_mem_pool_t pool, gpurt_stream_t stream) {
    int round, slept = 0, exported = 0, asleep = -1;
    for (round = 0; round < 300; round++) {
        pthread_barrier_t start;
        pthread_t a, b;
        Racer sleeper = {&start, pool, NULL, GPURT_SUCCESS}, exporter = {&start, pool, NULL, GPURT_SUCCESS};
        EXPECT(gpurt_mem_pool_malloc(pool, 1 << 20, stream, &exporter.block), GPURT_SUCCESS);
        pthread_barrier_init(&start, NULL, 2);
        pthread_create(&a, NULL, race_sleep, &sleeper);
        pthread_create(&b, NULL, race_export, &exporter);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        pthread_barrier_destroy(&start);
        CHECK(sleeper.status != GPURT_SUCCESS || exporter.status != GPURT_SUCCESS, "round %d: the pool fell asleep and its block was exported", round);
        EXPECT(gpurt_mem_pool_is_asleep(pool, &asleep), GPURT_SUCCESS);
        CHECK(asleep == (sleeper.status == GPURT_SUCCESS), "round %d: asleep %d after a sleep that gave %d", round, asleep, (int)sleeper.status);
        slept += sleeper.status == GPURT_SUCCESS;
        exported += exporter.status == GPURT_SUCCESS;
        if (asleep) EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
        EXPECT(gpurt_free(exporter.block), GPURT_SUCCESS); /* no process opened it: the export ends */
        EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    }
    printf("sleep_test: export against sleep, 300 rounds: the sleep won %d, the export %d\n", slept, exported);
}

/* A sleep and a wake while gpurt captures a stream are refused by gpurt itself,
 * naming the capture (their waits for the device would invalidate it). */
static void refused_while_capturing(gpurt_mem_pool_t pool, gpurt_stream_t stream) {
    gpurt_stream_t capturing = NULL;
    gpurt_graph_t graph = NULL;
    int asleep = -1;
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &capturing), GPURT_SUCCESS);
    EXPECT(gpurt_stream_begin_capture(capturing, GPURT_CAPTURE_MODE_GLOBAL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD), GPURT_ERROR_STREAM_CAPTURE);
    CHECK(strstr(gpurt_last_error_message(), "capture") != NULL && strstr(gpurt_last_error_message(), "sleep") != NULL, "the refusal names the capture: %s", gpurt_last_error_message());
    EXPECT(gpurt_mem_pool_is_asleep(pool, &asleep), GPURT_SUCCESS);
    CHECK(asleep == 0, "a refused sleep left the pool asleep");
    EXPECT(gpurt_stream_end_capture(capturing, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD), GPURT_SUCCESS);
    EXPECT(gpurt_stream_begin_capture(capturing, GPURT_CAPTURE_MODE_GLOBAL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_wake(pool), GPURT_ERROR_STREAM_CAPTURE);
    EXPECT(gpurt_stream_end_capture(capturing, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(capturing), GPURT_SUCCESS);
    (void)stream;
}

/* A graph whose private pool sleeps: captured on `stream` into `pool`, it copies
 * `input` (a default-pool block) through a block of the graph pool into `output`. */
typedef struct {
    gpurt_graph_t graph;
    gpurt_graph_exec_t exec;
    void *input, *output;
} Replay;

#define REPLAY_BYTES ((size_t)3 << 20)

static Replay capture_replay(gpurt_graph_pool_t pool, gpurt_stream_t stream) {
    Replay r = {NULL, NULL, NULL, NULL};
    void *inside = NULL;
    unsigned char *host = malloc(REPLAY_BYTES);
    fill_pattern(host, REPLAY_BYTES, 61);
    EXPECT(gpurt_malloc(REPLAY_BYTES, stream, &r.input), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(REPLAY_BYTES, stream, &r.output), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy(r.input, host, REPLAY_BYTES, stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_begin_capture(stream, GPURT_CAPTURE_MODE_GLOBAL, pool), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(REPLAY_BYTES, stream, &inside), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(inside, r.input, REPLAY_BYTES, stream), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(r.output, inside, REPLAY_BYTES, stream), GPURT_SUCCESS);
    EXPECT(gpurt_free(inside), GPURT_SUCCESS); /* the graph keeps its memory */
    EXPECT(gpurt_stream_end_capture(stream, &r.graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_instantiate(r.graph, 0, NULL, &r.exec), GPURT_SUCCESS);
    free(host);
    return r;
}

/* Replays the graph into a cleared output and checks it holds the input's bytes. */
static void replay_matches(const Replay *r, gpurt_stream_t stream, const char *when) {
    unsigned char *got = calloc(1, REPLAY_BYTES), *want = malloc(REPLAY_BYTES);
    fill_pattern(want, REPLAY_BYTES, 61);
    EXPECT(gpurt_memcpy(r->output, got, REPLAY_BYTES, stream), GPURT_SUCCESS); /* zeros */
    EXPECT(gpurt_graph_launch(r->exec, stream), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy(got, r->output, REPLAY_BYTES, stream), GPURT_SUCCESS);
    CHECK(!real || memcmp(got, want, REPLAY_BYTES) == 0, "the graph's replay %s gave other bytes", when);
    free(got);
    free(want);
}

static void release_replay(Replay *r) {
    EXPECT(gpurt_graph_exec_destroy(r->exec), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(r->graph), GPURT_SUCCESS);
    EXPECT(gpurt_free(r->input), GPURT_SUCCESS);
    EXPECT(gpurt_free(r->output), GPURT_SUCCESS);
}

/* A graph pool sleeps on its own, and everything of the device with
 * gpurt_device_sleep: the graph replays identically after each wake; a pool the caller
 * slept first keeps its sleep through the device's wake; a failure half way (stub)
 * leaves every pool awake. */
static void graph_pools_and_the_device_sleep(gpurt_mem_pool_t user, gpurt_stream_t stream) {
    gpurt_graph_pool_t graph_pool = NULL;
    gpurt_mem_pool_t def = NULL;
    Replay r;
    void *kept = NULL, *user_block = NULL, *refused = NULL;
    int asleep = -1;
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    EXPECT(gpurt_graph_pool_create(0, &graph_pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_default(0, &def), GPURT_SUCCESS);
    r = capture_replay(graph_pool, stream);
    replay_matches(&r, stream, "before any sleep");
    EXPECT(gpurt_mem_pool_sleep((gpurt_mem_pool_t)graph_pool, GPURT_SLEEP_OFFLOAD), GPURT_SUCCESS);
    CHECK(reserved((gpurt_mem_pool_t)graph_pool) == 0, "a sleeping graph pool keeps %llu bytes", (unsigned long long)reserved((gpurt_mem_pool_t)graph_pool));
    EXPECT(gpurt_mem_pool_wake((gpurt_mem_pool_t)graph_pool), GPURT_SUCCESS);
    replay_matches(&r, stream, "after its graph pool slept");

    /* The device: the default pool (the graph's input and output), the user pool, the
     * graph pool; `user` slept by the caller first keeps its own sleep. */
    EXPECT(gpurt_mem_pool_malloc(user, 5 << 20, stream, &user_block), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(1 << 20, stream, &kept), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_device_is_asleep(0, &asleep), GPURT_SUCCESS);
    CHECK(asleep == 0, "the device asleep before its sleep");
    EXPECT(gpurt_mem_pool_sleep(user, GPURT_SLEEP_DISCARD), GPURT_SUCCESS);
    EXPECT(gpurt_device_sleep(0, GPURT_SLEEP_OFFLOAD), GPURT_SUCCESS);
    EXPECT(gpurt_device_is_asleep(0, &asleep), GPURT_SUCCESS);
    CHECK(asleep == 1, "the device not asleep after its sleep");
    EXPECT(gpurt_device_sleep(0, GPURT_SLEEP_OFFLOAD), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_stats(0, &stats), GPURT_SUCCESS);
    CHECK(stats.reserved_bytes.all.current == 0, "the device's pools keep %lld bytes while it sleeps", (long long)stats.reserved_bytes.all.current);
    EXPECT(gpurt_mem_pool_is_asleep(def, &asleep), GPURT_SUCCESS);
    CHECK(asleep == 1, "the default pool sleeps with its device");
    EXPECT(gpurt_mem_pool_is_asleep((gpurt_mem_pool_t)graph_pool, &asleep), GPURT_SUCCESS);
    CHECK(asleep == 1, "the graph pool sleeps with its device");
    EXPECT(gpurt_malloc(4096, stream, &refused), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_device_wake(0), GPURT_SUCCESS);
    replay_matches(&r, stream, "after the device slept");
    EXPECT(gpurt_device_wake(0), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_is_asleep(user, &asleep), GPURT_SUCCESS);
    CHECK(asleep == 1, "a pool the caller slept before stays asleep through the device's wake");
    EXPECT(gpurt_mem_pool_wake(user), GPURT_SUCCESS);
    EXPECT(gpurt_device_is_asleep(-7, &asleep), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_device_is_asleep(0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_device_sleep(0, 9), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_device_sleep(99, GPURT_SLEEP_DISCARD), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_free(kept), GPURT_SUCCESS);
    EXPECT(gpurt_free(user_block), GPURT_SUCCESS);
    release_replay(&r);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_destroy(graph_pool), GPURT_SUCCESS);
}

/* The stub driver's fault injection (tests/stub-driver): every call of each entry point
 * a sleep or a wake makes fails in turn. */
static void fault_sweep(gpurt_mem_pool_t pool, gpurt_stream_t stream) {
    static const char *points[] = {"cuCtxSynchronize", "cuMemHostRegister_v2", "cuMemcpyDtoHAsync_v2", "cuStreamSynchronize",
                                   "cuMemUnmap", "cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemcpyHtoDAsync_v2"};
    void (*fail_nth)(const char *, long);
    long (*fail_hits)(void);
    void (*live)(long *, long *, long *, long *);
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), *blocks[BLOCKS];
    long swept = 0, n, device = 0, host = 0, streams = 0, events = 0, others;
    size_t p, i;
    int mode, asleep = -1, in_wake;
    *(void **)(&fail_nth) = driver ? dlsym(driver, "stub_fail_nth") : NULL; /* POSIX: function pointers from dlsym */
    *(void **)(&fail_hits) = driver ? dlsym(driver, "stub_fail_hits") : NULL;
    *(void **)(&live) = driver ? dlsym(driver, "stub_live") : NULL;
    if (fail_nth == NULL || fail_hits == NULL || live == NULL) {
        printf("sleep_test: the fault sweep is skipped: the driver is not tests/stub-driver\n");
        return;
    }
    for (i = 0; i < BLOCKS; i++) EXPECT(gpurt_mem_pool_malloc(pool, sizes[i], stream, &blocks[i]), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    live(&device, &host, &streams, &events);
    others = device - (long)reserved(pool); /* the device memory of the other pools */
    for (mode = GPURT_SLEEP_OFFLOAD; mode <= GPURT_SLEEP_DISCARD; mode++)
        for (in_wake = 0; in_wake < 2; in_wake++)
            for (p = 0; p < sizeof points / sizeof points[0]; p++)
                for (n = 1;; n++) {
                    uint64_t mapped = reserved(pool);
                    gpurt_status_t s;
                    long hit;
                    if (in_wake) EXPECT(gpurt_mem_pool_sleep(pool, mode), GPURT_SUCCESS);
                    fail_nth(points[p], n);
                    s = in_wake ? gpurt_mem_pool_wake(pool) : gpurt_mem_pool_sleep(pool, mode);
                    hit = fail_hits();
                    fail_nth(NULL, 0);
                    EXPECT(gpurt_mem_pool_is_asleep(pool, &asleep), GPURT_SUCCESS);
                    if (hit == 0) { /* fewer than n such calls: nothing failed */
                        CHECK(s == GPURT_SUCCESS, "%s without a fault", in_wake ? "wake" : "sleep");
                        if (!in_wake) EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
                        break;
                    }
                    swept++;
                    CHECK(s != GPURT_SUCCESS && gpurt_last_error_message()[0] != 0, "call %ld of %s failed, and the %s said so", n, points[p], in_wake ? "wake" : "sleep");
                    CHECK(asleep == in_wake, "call %ld of %s failing left the pool %s", n, points[p], asleep ? "asleep" : "awake");
                    CHECK(reserved(pool) == (in_wake ? 0 : mapped), "call %ld of %s failing: %llu bytes reserved", n, points[p], (unsigned long long)reserved(pool));
                    live(&device, &host, &streams, &events);
                    CHECK((uint64_t)(device - others) == reserved(pool), "call %ld of %s failing: the driver holds %ld bytes of the pool, which counts %llu", n, points[p], device - others, (unsigned long long)reserved(pool));
                    EXPECT(in_wake ? gpurt_mem_pool_wake(pool) : gpurt_mem_pool_sleep(pool, mode), GPURT_SUCCESS); /* the retry */
                    if (!in_wake) EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
                }
    for (i = 0; i < BLOCKS; i++) EXPECT(gpurt_free(blocks[i]), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_empty_cache(pool), GPURT_SUCCESS);
    CHECK(reserved(pool) == 0, "%llu bytes left reserved", (unsigned long long)reserved(pool));
    CHECK(swept >= 8, "only %ld failure points swept", swept);
    printf("sleep_test: %ld failure points of sleep and wake swept\n", swept);
}

/* A device sleep whose every driver call of each kind fails in turn (stub): the
 * device and each of its pools stay awake, the pools' memory mapped, and the retry
 * succeeds. */
static void device_fault_sweep(gpurt_mem_pool_t pool, gpurt_stream_t stream) {
    static const char *points[] = {"cuCtxSynchronize", "cuMemHostRegister_v2", "cuMemcpyDtoHAsync_v2", "cuMemUnmap"};
    void (*fail_nth)(const char *, long);
    long (*fail_hits)(void);
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), *mine = NULL, *theirs = NULL;
    gpurt_mem_pool_t def = NULL;
    long swept = 0, n;
    size_t p;
    int asleep = -1;
    *(void **)(&fail_nth) = driver ? dlsym(driver, "stub_fail_nth") : NULL;
    *(void **)(&fail_hits) = driver ? dlsym(driver, "stub_fail_hits") : NULL;
    if (fail_nth == NULL || fail_hits == NULL) return;
    EXPECT(gpurt_mem_pool_default(0, &def), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(3 << 20, stream, &mine), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(pool, 7 << 20, stream, &theirs), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    for (p = 0; p < sizeof points / sizeof points[0]; p++)
        for (n = 1;; n++) {
            uint64_t before = reserved(def) + reserved(pool);
            gpurt_status_t s;
            long hit;
            fail_nth(points[p], n);
            s = gpurt_device_sleep(0, GPURT_SLEEP_OFFLOAD);
            hit = fail_hits();
            fail_nth(NULL, 0);
            if (hit == 0) {
                CHECK(s == GPURT_SUCCESS, "a device sleep without a fault");
                EXPECT(gpurt_device_wake(0), GPURT_SUCCESS);
                break;
            }
            swept++;
            CHECK(s != GPURT_SUCCESS && strstr(gpurt_last_error_message(), "device 0's sleep failed") != NULL, "call %ld of %s failing fails the device sleep: %s", n, points[p], gpurt_last_error_message());
            EXPECT(gpurt_device_is_asleep(0, &asleep), GPURT_SUCCESS);
            CHECK(asleep == 0, "call %ld of %s failing left the device asleep", n, points[p]);
            EXPECT(gpurt_mem_pool_is_asleep(def, &asleep), GPURT_SUCCESS);
            CHECK(asleep == 0, "call %ld of %s failing left the default pool asleep", n, points[p]);
            EXPECT(gpurt_mem_pool_is_asleep(pool, &asleep), GPURT_SUCCESS);
            CHECK(asleep == 0, "call %ld of %s failing left the user pool asleep", n, points[p]);
            CHECK(reserved(def) + reserved(pool) == before, "call %ld of %s failing: %llu bytes mapped of %llu", n, points[p], (unsigned long long)(reserved(def) + reserved(pool)), (unsigned long long)before);
            EXPECT(gpurt_device_sleep(0, GPURT_SLEEP_OFFLOAD), GPURT_SUCCESS); /* the retry */
            EXPECT(gpurt_device_wake(0), GPURT_SUCCESS);
        }
    EXPECT(gpurt_free(mine), GPURT_SUCCESS);
    EXPECT(gpurt_free(theirs), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    CHECK(swept >= 4, "only %ld failure points of the device sleep swept", swept);
    printf("sleep_test: %ld failure points of the device sleep swept\n", swept);
}

int main(void) {
    gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT;
    gpurt_mem_pool_t pool = NULL, plain = NULL, def = NULL;
    gpurt_graph_pool_t graph_pool = NULL;
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_stream_t stream = NULL;
    void *p = NULL;
    int count = 0, asleep = -1;
    char address[32];
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("sleep_test: skipped: no GPU (%s)\n", gpurt_last_error_message());
        return getenv("GPURT_REQUIRE_GPU") && strcmp(getenv("GPURT_REQUIRE_GPU"), "1") == 0 ? 1 : 0;
    }
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    real = strcmp(props.name, "Fake GPU") != 0;
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    copies = stream;

    /* A pool of expandable segments. */
    options.config = "expandable_segments:True";
    EXPECT(gpurt_mem_pool_create(0, &options, &pool), GPURT_SUCCESS);
    sleep_and_wake(pool, stream, 0);

    /* Misuse changes nothing. */
    EXPECT(gpurt_mem_pool_sleep(pool, 7), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_sleep(NULL, GPURT_SLEEP_OFFLOAD), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_mem_pool_sleep((gpurt_mem_pool_t)stream, GPURT_SLEEP_OFFLOAD), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_mem_pool_wake(NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_mem_pool_is_asleep(pool, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_is_asleep(NULL, &asleep), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_mem_pool_is_asleep(pool, &asleep), GPURT_SUCCESS);
    CHECK(asleep == 0, "asleep %d after refusals", asleep);

    /* A block other processes may map keeps the pool awake; a sleeping block is not exported. */
    {
        gpurt_ipc_mem_handle_t handle;
        void *exported = NULL, *asleep_block = NULL;
        EXPECT(gpurt_mem_pool_malloc(pool, 2 << 20, stream, &exported), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_malloc(pool, 1 << 20, stream, &asleep_block), GPURT_SUCCESS);
        EXPECT(gpurt_ipc_mem_handle(exported, &handle), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD), GPURT_ERROR_NOT_SUPPORTED);
        snprintf(address, sizeof address, "%#llx", (unsigned long long)(uintptr_t)exported);
        CHECK(strstr(gpurt_last_error_message(), address) != NULL, "the refusal names the exported block %s", address);
        EXPECT(gpurt_free(exported), GPURT_SUCCESS); /* no process opened it: the export ends */
        EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD), GPURT_SUCCESS);
        EXPECT(gpurt_ipc_mem_handle(asleep_block, &handle), GPURT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(gpurt_last_error_message(), "asleep") != NULL, "the export's refusal says why");
        EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
        EXPECT(gpurt_free(asleep_block), GPURT_SUCCESS);
        EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    }

    /* Host memory made ahead: counted, used by the next sleep, refused while asleep. */
    {
        gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
        void *blocks[2] = {NULL, NULL};
        size_t made = 0, again = 1;
        EXPECT(gpurt_mem_pool_sleep_prepare(NULL, &made), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_mem_pool_empty_cache(pool), GPURT_SUCCESS); /* no host memory kept from earlier sleeps */
        EXPECT(gpurt_mem_pool_malloc(pool, 8 << 20, stream, &blocks[0]), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_malloc(pool, 8 << 20, stream, &blocks[1]), GPURT_SUCCESS);
        write_blocks(blocks, 0, 2, 77);
        EXPECT(gpurt_mem_pool_sleep_prepare(pool, &made), GPURT_SUCCESS);
        CHECK(made >= (16u << 20), "prepared %zu bytes for 16 MiB live", made);
        EXPECT(gpurt_mem_pool_sleep_prepare(pool, &again), GPURT_SUCCESS);
        CHECK(again == 0, "a second preparation made %zu bytes", again);
        EXPECT(gpurt_mem_pool_stats(pool, &stats), GPURT_SUCCESS);
        CHECK(stats.offload_host_bytes == (int64_t)made, "offload_host_bytes %lld, prepared %zu", (long long)stats.offload_host_bytes, made);
        EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_OFFLOAD), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_sleep_prepare(pool, NULL), GPURT_ERROR_INVALID_ARGUMENT); /* asleep */
        EXPECT(gpurt_mem_pool_stats(pool, &stats), GPURT_SUCCESS);
        CHECK(stats.offload_host_bytes == (int64_t)made, "the sleep made host memory of its own: %lld, prepared %zu", (long long)stats.offload_host_bytes, made);
        EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
        check_blocks(blocks, 0, 2, 77);
        EXPECT(gpurt_device_sleep_prepare(0, NULL), GPURT_SUCCESS);
        EXPECT(gpurt_device_sleep_prepare(99, NULL), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_free(blocks[0]), GPURT_SUCCESS);
        EXPECT(gpurt_free(blocks[1]), GPURT_SUCCESS);
        EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    }

    /* Whole segments cannot keep their addresses: refused while a block lives, naming it. */
    options.config = "expandable_segments:False";
    EXPECT(gpurt_mem_pool_create(0, &options, &plain), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(plain, 1 << 20, stream, &p), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_sleep(plain, GPURT_SLEEP_DISCARD), GPURT_ERROR_NOT_SUPPORTED);
    snprintf(address, sizeof address, "%#llx", (unsigned long long)(uintptr_t)p);
    CHECK(strstr(gpurt_last_error_message(), address) != NULL, "the refusal names the block %s", address);
    EXPECT(gpurt_mem_pool_is_asleep(plain, &asleep), GPURT_SUCCESS);
    CHECK(asleep == 0, "a refused sleep left it asleep");
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_sleep(plain, GPURT_SLEEP_DISCARD), GPURT_SUCCESS); /* nothing left to keep */
    EXPECT(gpurt_mem_pool_wake(plain), GPURT_SUCCESS);

    /* A graph pool with no graph sleeps and wakes. */
    EXPECT(gpurt_graph_pool_create(0, &graph_pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_sleep((gpurt_mem_pool_t)graph_pool, GPURT_SLEEP_OFFLOAD), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_wake((gpurt_mem_pool_t)graph_pool), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_destroy(graph_pool), GPURT_SUCCESS);

    /* The device's default pool, under the process's expandable segments. */
    EXPECT(gpurt_alloc_set_config("expandable_segments:True"), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_default(0, &def), GPURT_SUCCESS);
    sleep_and_wake(def, stream, 1);

    graph_pools_and_the_device_sleep(pool, stream);
    export_races_sleep(pool, stream);
    refused_while_capturing(pool, stream);
    if (!real) fault_sweep(pool, stream);
    if (!real) device_fault_sweep(pool, stream);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(plain), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    printf("sleep_test: %d checks, %d failed (%s)\n", checks, failures, real ? props.name : "stub driver: no byte checks");
    return failures == 0 ? 0 : 1;
}
