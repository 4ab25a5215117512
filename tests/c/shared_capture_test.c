/* Shared captures (gpurt_stream_begin_capture_shared): a graph whose gpurt allocations
 * come from a pool the stream uses anyway, in stream order, as ggml's and RMM's pools
 * serve captures. Misuse refused with nothing begun (NULL and wrong-kind handles, a
 * graph pool, an unknown mode); in a global-mode capture the pool grows (the mode is
 * relaxed around its mapping); a block freed during the capture is the stream's next
 * allocation after it (the memory is shared, none of the graph's own); while the graph
 * or an exec lives the pool keeps its memory mapped (empty_cache gives nothing back)
 * and refuses to be destroyed; with both gone it gives everything back. A conditional
 * node's body allocates from the same pool; the default pool serves a shared capture
 * too. Faults (stand-in driver): a begin the driver refuses leaves no capture and no
 * claim; a growth it refuses once is retried without unmapping kept memory. On a GPU:
 * the exec replays after eager work reused its memory and after empty_cache, and gives
 * the bytes it captured, fresh random values, exactly.
 *
 *   shared_capture_test */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIZE ((size_t)3 << 20)

static uint64_t pool_total(gpurt_mem_pool_t pool) {
    uint64_t total = 0;
    EXPECT(gpurt_mem_pool_usage(pool, NULL, NULL, &total, NULL), GPURT_SUCCESS);
    return total;
}

/* Every byte of `dev` (SIZE bytes) is `value` (a real GPU only). */
static void check_bytes(const unsigned char *dev, unsigned char value, gpurt_stream_t s, const char *what) {
    unsigned char *host = malloc(SIZE);
    size_t wrong = 0, i;
    EXPECT(gpurt_memcpy_async(host, dev, SIZE, s), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    for (i = 0; i < SIZE; i++) wrong += host[i] != value;
    CHECK(wrong == 0, "%s: %zu of %zu bytes are not %u (first %u)", what, wrong, SIZE, value, host[0]);
    free(host);
}

/* Replays `exec` on `s` into `out` (cleared first) and checks both blocks' bytes. */
static void replay_and_check(gpurt_graph_exec_t exec, unsigned char *out, unsigned char a, unsigned char b, gpurt_stream_t s,
                             int real, const char *when) {
    char what[160];
    EXPECT(gpurt_memset_async(out, 0, 1, 2 * SIZE, s), GPURT_SUCCESS);
    EXPECT(gpurt_graph_launch(exec, s), GPURT_SUCCESS);
    if (real) {
        snprintf(what, sizeof what, "a replay %s: the first block's bytes", when);
        check_bytes(out, a, s, what);
        snprintf(what, sizeof what, "a replay %s: the second block's (grown during the capture)", when);
        check_bytes(out + SIZE, b, s, what);
    }
}

/* On the stand-in driver: a shared capture the driver refuses to begin leaves nothing
 * behind (the stream not capturing, no capture counted: the pool sleeps; no claim:
 * empty_cache gives the pool's free memory back); a growth the driver refuses once
 * during a shared capture is retried after the out-of-memory release, which unmaps
 * none of the memory the capture keeps. */
static void check_failures(gpurt_stream_t s, gpurt_mem_pool_t pool) {
    void (*fail_nth)(const char *, long);
    long (*fail_hits)(void);
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), *p = NULL, *q = NULL;
    gpurt_graph_t graph = NULL;
    uint64_t kept;
    int capturing = -1;
    *(void **)(&fail_nth) = driver ? dlsym(driver, "stub_fail_nth") : NULL; /* POSIX: function pointers from dlsym */
    *(void **)(&fail_hits) = driver ? dlsym(driver, "stub_fail_hits") : NULL;
    if (fail_nth == NULL || fail_hits == NULL) return; /* a real driver: nothing to inject */
    EXPECT(gpurt_mem_pool_malloc(pool, SIZE, s, &p), GPURT_SUCCESS);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    CHECK(pool_total(pool) > 0, "the pool caches a free block");
    fail_nth("cuStreamBeginCapture_v2", 1);
    CHECK(gpurt_stream_begin_capture_shared(s, GPURT_CAPTURE_MODE_RELAXED, pool) != GPURT_SUCCESS, "the driver's refusal is reported");
    fail_nth(NULL, 0);
    EXPECT(gpurt_stream_is_capturing(s, &capturing), GPURT_SUCCESS);
    CHECK(capturing == 0, "a begin the driver refused leaves the stream not capturing");
    EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_DISCARD), GPURT_SUCCESS); /* refused while a capture counts */
    EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_empty_cache(pool), GPURT_SUCCESS);
    CHECK(pool_total(pool) == 0, "no claim was left: empty_cache gives the free block back (%llu bytes left)", (unsigned long long)pool_total(pool));

    EXPECT(gpurt_stream_begin_capture_shared(s, GPURT_CAPTURE_MODE_GLOBAL, pool), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(SIZE, s, &p), GPURT_SUCCESS);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    kept = pool_total(pool);
    fail_nth("cuMemCreate", 1);
    EXPECT(gpurt_malloc(2 * SIZE, s, &q), GPURT_SUCCESS); /* on another block than p's: the pool grows */
    CHECK(fail_hits() == 1, "the growth's first cuMemCreate was refused (%ld refusals)", fail_hits());
    fail_nth(NULL, 0);
    CHECK(pool_total(pool) > kept, "the retried growth mapped the new block (%llu bytes, %llu before)", (unsigned long long)pool_total(pool),
          (unsigned long long)kept);
    EXPECT(gpurt_free(q), GPURT_SUCCESS);
    kept = pool_total(pool);
    EXPECT(gpurt_stream_end_capture(s, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_empty_cache(pool), GPURT_SUCCESS);
    CHECK(pool_total(pool) == kept, "the graph keeps both blocks mapped");
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
}

int main(void) {
    int count = 0, real, capturing = -1;
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_stream_t s = NULL;
    gpurt_mem_pool_t pool = NULL, def = NULL;
    gpurt_graph_pool_t graph_pool = NULL;
    gpurt_graph_t graph = NULL;
    gpurt_graph_exec_t exec = NULL;
    unsigned long long h = 0;
    unsigned char *out = NULL, *warm = NULL, *t = NULL, *u = NULL, *again = NULL, *body = NULL;
    unsigned char a, b, c;
    uint64_t kept = 0, used = 0, body_used = 0;
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("shared_capture_test: skipped: no GPU (%s)\n", gpurt_last_error_message());
        return getenv("GPURT_REQUIRE_GPU") && strcmp(getenv("GPURT_REQUIRE_GPU"), "1") == 0 ? 1 : 0;
    }
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    real = strcmp(props.name, "Fake GPU") != 0;
    srand((unsigned)time(NULL));
    a = (unsigned char)(1 + rand() % 85);
    b = (unsigned char)(86 + rand() % 85);
    c = (unsigned char)(171 + rand() % 85);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_create(0, NULL, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_default(0, &def), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_create(0, &graph_pool), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(2 * SIZE, s, (void **)&out), GPURT_SUCCESS);

    /* Misuse: refused, nothing begun. */
    EXPECT(gpurt_stream_begin_capture_shared(NULL, GPURT_CAPTURE_MODE_RELAXED, pool), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_stream_begin_capture_shared(s, GPURT_CAPTURE_MODE_RELAXED, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_stream_begin_capture_shared(s, GPURT_CAPTURE_MODE_RELAXED, (gpurt_mem_pool_t)s), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_stream_begin_capture_shared(s, 7, pool), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_stream_begin_capture_shared(s, GPURT_CAPTURE_MODE_RELAXED, graph_pool), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_stream_is_capturing(s, &capturing), GPURT_SUCCESS);
    CHECK(capturing == 0, "a refused begin began nothing");

    /* The stream's eager work warms the pool: one block, freed. */
    EXPECT(gpurt_mem_pool_malloc(pool, SIZE, s, (void **)&warm), GPURT_SUCCESS);
    EXPECT(gpurt_free(warm), GPURT_SUCCESS);

    /* Global mode: the pool grows for u during the capture all the same. */
    EXPECT(gpurt_stream_begin_capture_shared(s, GPURT_CAPTURE_MODE_GLOBAL, pool), GPURT_SUCCESS);
    EXPECT(gpurt_stream_begin_capture_shared(s, GPURT_CAPTURE_MODE_GLOBAL, pool), GPURT_ERROR_STREAM_CAPTURE);
    EXPECT(gpurt_mem_pool_malloc(pool, SIZE, s, (void **)&t), GPURT_SUCCESS);
    CHECK(t == warm, "the capture takes the block the stream freed before it");
    EXPECT(gpurt_malloc(SIZE, s, (void **)&u), GPURT_SUCCESS); /* the capture's pool, not the default */
    CHECK(u != NULL && u != t, "a second block");
    EXPECT(gpurt_mem_pool_usage(pool, &used, NULL, NULL, NULL), GPURT_SUCCESS);
    CHECK(used >= 2 * SIZE, "gpurt_malloc during the capture came from the shared pool (%llu bytes used)", (unsigned long long)used);
    EXPECT(gpurt_memset_async(t, a, 1, SIZE, s), GPURT_SUCCESS);
    EXPECT(gpurt_memset_async(u, b, 1, SIZE, s), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(out, t, SIZE, s), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(out + SIZE, u, SIZE, s), GPURT_SUCCESS);
    EXPECT(gpurt_free(t), GPURT_SUCCESS);
    EXPECT(gpurt_free(u), GPURT_SUCCESS);
    EXPECT(gpurt_stream_end_capture(s, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_instantiate(graph, 0, NULL, &exec), GPURT_SUCCESS);

    /* Eager work after the capture shares the graph's memory. */
    kept = pool_total(pool);
    EXPECT(gpurt_mem_pool_malloc(pool, SIZE, s, (void **)&again), GPURT_SUCCESS);
    CHECK(again == t || again == u, "the stream's next allocation takes a block freed during the capture");
    CHECK(pool_total(pool) == kept, "and maps nothing new");
    EXPECT(gpurt_memset_async(again, c, 1, SIZE, s), GPURT_SUCCESS);
    EXPECT(gpurt_free(again), GPURT_SUCCESS);
    CHECK(kept >= 2 * SIZE, "the pool holds the graph's two blocks (%llu bytes)", (unsigned long long)kept);
    EXPECT(gpurt_mem_pool_empty_cache(pool), GPURT_SUCCESS);
    CHECK(pool_total(pool) == kept, "empty_cache keeps the memory the graph replays into");
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpurt_last_error_message(), "graph") != NULL, "the refusal names the graphs: %s", gpurt_last_error_message());

    replay_and_check(exec, out, a, b, s, real, "after eager work reused its memory");
    /* The exec holds the pool without its graph. */
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_empty_cache(pool), GPURT_SUCCESS);
    CHECK(pool_total(pool) == kept, "the exec keeps the memory mapped after its graph went");
    replay_and_check(exec, out, a, b, s, real, "after empty_cache, its graph destroyed");
    EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    EXPECT(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_empty_cache(pool), GPURT_SUCCESS);
    CHECK(pool_total(pool) == 0, "with the graph and its exec gone, empty_cache gives everything back (%llu bytes left)",
          (unsigned long long)pool_total(pool));

    /* A conditional node's body allocates from the shared pool too. */
    EXPECT(gpurt_stream_begin_capture_shared(s, GPURT_CAPTURE_MODE_RELAXED, pool), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_handle_create(s, 1, 0, &h), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_begin(s, h, GPURT_GRAPH_CONDITIONAL_IF, 1), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(SIZE, s, (void **)&body), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_usage(pool, &body_used, NULL, NULL, NULL), GPURT_SUCCESS);
    CHECK(body_used >= SIZE, "the body's allocation came from the shared pool (%llu bytes used)", (unsigned long long)body_used);
    EXPECT(gpurt_memset_async(body, a, 1, SIZE, s), GPURT_SUCCESS);
    EXPECT(gpurt_free(body), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_end(s), GPURT_SUCCESS);
    EXPECT(gpurt_stream_end_capture(s, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);

    /* The default pool serves a shared capture. */
    EXPECT(gpurt_stream_begin_capture_shared(s, GPURT_CAPTURE_MODE_RELAXED, def), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(4096, s, (void **)&body), GPURT_SUCCESS);
    EXPECT(gpurt_free(body), GPURT_SUCCESS);
    EXPECT(gpurt_stream_end_capture(s, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);

    check_failures(s, pool);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_destroy(graph_pool), GPURT_SUCCESS);
    EXPECT(gpurt_free(out), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(s), GPURT_SUCCESS);
    printf("shared_capture_test: %d checks, %d failures%s\n", checks, failures, real ? "" : " (stub driver: statuses and figures; bytes on a GPU)");
    return failures != 0;
}
