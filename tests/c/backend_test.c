/* backend:cudaMallocAsync through the C ABI: every default-pool allocation from the
 * device's stream-ordered driver pool. The backend is chosen once per process, so
 * this test is a process of its own: it sets GPURT_ALLOC_CONF before its first call.
 *
 * Checks: the backend is named and cannot change; allocations on several streams,
 * record_stream and frees; the statistics the backend knows are exact and the rest is
 * marked unknown; a memory fraction; a pushed pool still routes; IPC export is
 * refused with the reason; bad input changes nothing. On a GPU, fresh random bytes
 * written on one stream and read on another are exact, and a captured graph's
 * allocation becomes a memory node that each replay fills.
 *
 * Needs a device (the stub driver in CI); without one it says so and exits 0,
 * unless GPURT_REQUIRE_GPU=1.
 */
#define _GNU_SOURCE
#include <gpurt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

static gpurt_memory_stats_t stats_now(void) {
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    EXPECT(gpurt_memory_stats(0, &stats), GPURT_SUCCESS);
    return stats;
}

/* Bytes written on `a` and read on `b` after an event orders them: exact. The block
 * is used on `b`, recorded, and freed: its reuse waits for `b`. */
static void check_bytes_across_streams(gpurt_stream_t a, gpurt_stream_t b, uint64_t seed) {
    const size_t n = (5 << 20) + 3;
    unsigned char *want = malloc(n), *got = malloc(n);
    void *dev = NULL;
    gpurt_event_t written = NULL;
    fill_pattern(want, n, seed);
    EXPECT(gpurt_malloc(n, a, &dev), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(dev, want, n, a), GPURT_SUCCESS);
    EXPECT(gpurt_event_create(0, 0, &written), GPURT_SUCCESS);
    EXPECT(gpurt_event_record(written, a), GPURT_SUCCESS);
    EXPECT(gpurt_stream_wait_event(b, written), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(got, dev, n, b), GPURT_SUCCESS);
    EXPECT(gpurt_record_stream(dev, b), GPURT_SUCCESS);
    EXPECT(gpurt_free(dev), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(b), GPURT_SUCCESS);
    CHECK(memcmp(want, got, n) == 0, "bytes read on another stream are the bytes written");
    EXPECT(gpurt_event_destroy(written), GPURT_SUCCESS);
    free(want);
    free(got);
}

int main(void) {
    int count = 0, real, i, capturing = -1;
    const char *name = NULL, *require = getenv("GPURT_REQUIRE_GPU");
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_memory_stats_t before, after;
    gpurt_stream_t a = NULL, b = NULL;
    gpurt_mem_pool_t pool = NULL;
    gpurt_ipc_mem_handle_t handle;
    void *p[8], *q = NULL, *routed = NULL;
    uint64_t used = 0, total = 0;

    setenv("GPURT_ALLOC_CONF", "backend:cudaMallocAsync", 1);
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("backend_test: skipped: no CUDA device (%s)\n", gpurt_last_error_message());
        return require && strcmp(require, "1") == 0 ? 1 : 0;
    }
    gpurt_device_get_properties(0, &props);
    real = strcmp(props.name, "Fake GPU") != 0;

    EXPECT(gpurt_allocator_backend(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_allocator_backend(&name), GPURT_SUCCESS);
    CHECK(name && strcmp(name, "cudaMallocAsync") == 0, "the backend is named: %s", name ? name : "(null)");
    EXPECT(gpurt_alloc_set_config("backend:native"), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpurt_last_error_message(), "chosen once") != NULL, "the message says why");
    EXPECT(gpurt_alloc_set_config("backend:cudaMallocAsync,garbage_collection_threshold:0.5"), GPURT_SUCCESS);
    EXPECT(gpurt_allocator_backend(&name), GPURT_SUCCESS);
    CHECK(strcmp(name, "cudaMallocAsync") == 0, "unchanged");

    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &a), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &b), GPURT_SUCCESS);
    before = stats_now();
    CHECK(before.unknown & GPURT_STATS_UNKNOWN_SEGMENT, "segments are unknown: %llx", (unsigned long long)before.unknown);
    CHECK(before.unknown & GPURT_STATS_UNKNOWN_POOL_PARTS, "the small/large parts are unknown");
    for (i = 0; i < 8; i++) EXPECT(gpurt_malloc((size_t)1000 << i, i % 2 ? a : b, &p[i]), GPURT_SUCCESS);
    after = stats_now();
    CHECK(after.allocation.all.current == before.allocation.all.current + 8, "8 live allocations");
    CHECK(after.allocated_bytes.all.current == before.allocated_bytes.all.current + 255000, "their bytes, exactly: %lld",
          (long long)(after.allocated_bytes.all.current - before.allocated_bytes.all.current));
    CHECK(after.requested_bytes.all.current == after.allocated_bytes.all.current, "requested = allocated");
    EXPECT(gpurt_record_stream(p[0], a), GPURT_SUCCESS);
    for (i = 0; i < 8; i++) EXPECT(gpurt_free(p[i]), GPURT_SUCCESS);
    EXPECT(gpurt_free(p[3]), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_record_stream(p[3], a), GPURT_ERROR_INVALID_ARGUMENT);
    after = stats_now();
    CHECK(after.allocation.all.current == before.allocation.all.current, "all freed");
    CHECK(after.allocation.all.peak >= before.allocation.all.current + 8, "the peak stays");
    CHECK(after.allocated_bytes.all.freed == before.allocated_bytes.all.freed + 255000, "freed bytes counted");

    /* Out of memory: too large, and past a memory fraction; nothing changes. */
    EXPECT(gpurt_malloc(SIZE_MAX, a, &q), GPURT_ERROR_OUT_OF_MEMORY);
    EXPECT(gpurt_set_per_process_memory_fraction(0.001, 0), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(props.total_memory / 100, a, &q), GPURT_ERROR_OUT_OF_MEMORY);
    EXPECT(gpurt_set_per_process_memory_fraction(1.0, 0), GPURT_SUCCESS);
    EXPECT(gpurt_set_per_process_memory_fraction(2.0, 0), GPURT_ERROR_INVALID_ARGUMENT);
    after = stats_now();
    CHECK(after.allocation.all.current == before.allocation.all.current, "no allocation from the refused requests");
    CHECK(after.num_ooms == before.num_ooms + 1, "the refusal past the fraction counts as out of memory (the too-large one changes nothing)");

    /* The default pool's handle serves from the driver pool; a pushed pool still routes. */
    EXPECT(gpurt_mem_pool_default(0, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(pool, 4096, a, &q), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_usage(pool, &used, NULL, &total, NULL), GPURT_SUCCESS);
    CHECK(used >= 4096, "the default pool's usage counts it: %llu", (unsigned long long)used);
    EXPECT(gpurt_ipc_mem_handle(q, &handle), GPURT_ERROR_NOT_SUPPORTED);
    CHECK(strstr(gpurt_last_error_message(), "gpurt_mem_pool_create") != NULL, "the message says what to do");
    EXPECT(gpurt_free(q), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_create(0, NULL, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_push(pool), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(4096, a, &routed), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_pop(), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_usage(pool, &used, NULL, NULL, NULL), GPURT_SUCCESS);
    CHECK(used == 4096, "the pushed pool served it: %llu", (unsigned long long)used);
    EXPECT(gpurt_ipc_mem_handle(routed, &handle), GPURT_SUCCESS);
    EXPECT(gpurt_free(routed), GPURT_SUCCESS);
    /* A shared capture would take the driver's memory nodes, not the pool's blocks: refused. */
    EXPECT(gpurt_stream_begin_capture_shared(a, GPURT_CAPTURE_MODE_RELAXED, pool), GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_stream_is_capturing(a, &capturing), GPURT_SUCCESS);
    CHECK(capturing == 0, "the refused shared capture began nothing");
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);

    if (real) {
        gpurt_graph_t graph = NULL;
        gpurt_graph_exec_t exec = NULL;
        unsigned char host[256];
        void *node = NULL, *out = NULL;
        check_bytes_across_streams(a, b, (uint64_t)time(NULL) | 1);
        check_bytes_across_streams(b, a, (uint64_t)time(NULL) * 31 | 1);
        /* A capture's allocation is a memory node: allocated, filled, copied out and
         * freed by each replay. */
        EXPECT(gpurt_malloc(256, a, &out), GPURT_SUCCESS);
        EXPECT(gpurt_stream_begin_capture(a, GPURT_CAPTURE_MODE_THREAD_LOCAL, NULL), GPURT_SUCCESS);
        EXPECT(gpurt_malloc(1 << 20, a, &node), GPURT_SUCCESS);
        EXPECT(gpurt_memset_async(node, 0x5a, 1, 256, a), GPURT_SUCCESS);
        EXPECT(gpurt_memcpy_async(out, node, 256, a), GPURT_SUCCESS);
        EXPECT(gpurt_free(node), GPURT_SUCCESS);
        EXPECT(gpurt_stream_end_capture(a, &graph), GPURT_SUCCESS);
        EXPECT(gpurt_graph_instantiate(graph, 0, NULL, &exec), GPURT_SUCCESS);
        for (i = 0; i < 3; i++) {
            EXPECT(gpurt_memset_async(out, 0, 1, 256, a), GPURT_SUCCESS);
            EXPECT(gpurt_graph_launch(exec, a), GPURT_SUCCESS);
            EXPECT(gpurt_memcpy(host, out, 256, a), GPURT_SUCCESS);
            CHECK(host[0] == 0x5a && host[255] == 0x5a, "replay %d filled the node's memory", i);
        }
        EXPECT(gpurt_free(out), GPURT_SUCCESS);
        EXPECT(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
        EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    }
    EXPECT(gpurt_stream_synchronize(a), GPURT_SUCCESS);
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    after = stats_now();
    CHECK(after.allocation.all.current == before.allocation.all.current, "nothing left allocated");
    EXPECT(gpurt_stream_destroy(a), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(b), GPURT_SUCCESS);
    printf("backend_test: %d checks, %d failed (%s)\n", checks, failures, real ? props.name : "stub driver: no byte checks");
    return failures ? 1 : 0;
}
