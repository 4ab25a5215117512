/* Green contexts: misuse refused with nothing made (counts of 0 or past the device,
 * splits that do not fit, NULL and wrong-kind handles, blocking streams, a destroy
 * while a stream lives); SM counts rounded up and splits disjoint; and a green
 * context's stream used as any other: the allocator, copies, a memset, events, a
 * captured graph replayed, fresh random bytes checked exact on a GPU. Every driver
 * object is given back (stub driver: its counts). The SM shares' throughput is
 * gpu/green_bench.c's.
 *
 *   green_test */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define BYTES ((size_t)8 << 20)

/* The stub driver's counts of what gpurt holds (NULL on a real driver). */
static long (*stub_green_contexts)(void);
static void (*stub_live)(long *, long *, long *, long *);

static long live_streams(void) {
    long device = 0, host = 0, streams = 0, events = 0;
    if (stub_live) stub_live(&device, &host, &streams, &events);
    return streams;
}

/* Copies fresh random bytes through device memory on `stream` with a memset and a
 * captured, replayed graph between, and checks every byte that comes back. */
static void round_trip(gpurt_stream_t stream, int real) {
    unsigned char *host = malloc(BYTES), *back = malloc(BYTES), *a = NULL, *b = NULL;
    gpurt_event_t start = NULL, end = NULL;
    gpurt_graph_t graph = NULL;
    gpurt_graph_exec_t exec = NULL;
    float ms = -1;
    size_t i, wrong = 0;
    fill_pattern(host, BYTES, (uint64_t)rand() << 16 | 1);
    EXPECT(gpurt_malloc(BYTES, stream, (void **)&a), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(BYTES, stream, (void **)&b), GPURT_SUCCESS);
    EXPECT(gpurt_event_create(0, 0, &start), GPURT_SUCCESS);
    EXPECT(gpurt_event_create(0, 0, &end), GPURT_SUCCESS);
    EXPECT(gpurt_event_record(start, stream), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(a, host, BYTES, stream), GPURT_SUCCESS);
    EXPECT(gpurt_memset_async(a, 0xA5, 1, 4096, stream), GPURT_SUCCESS);
    /* b = a, as a graph captured on the green stream and replayed twice. */
    EXPECT(gpurt_stream_begin_capture(stream, 0, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(b, a, BYTES, stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_end_capture(stream, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_instantiate(graph, 0, NULL, &exec), GPURT_SUCCESS);
    EXPECT(gpurt_graph_launch(exec, stream), GPURT_SUCCESS);
    EXPECT(gpurt_graph_launch(exec, stream), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(back, b, BYTES, stream), GPURT_SUCCESS);
    EXPECT(gpurt_event_record(end, stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_event_elapsed_time(start, end, &ms), GPURT_SUCCESS);
    CHECK(ms >= 0, "elapsed %f ms", ms);
    memset(host, 0xA5, 4096);
    for (i = 0; i < BYTES; i++) wrong += back[i] != host[i];
    CHECK(!real || wrong == 0, "%zu of %zu bytes differ after the green stream's round trip", wrong, BYTES);
    EXPECT(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    EXPECT(gpurt_event_destroy(start), GPURT_SUCCESS);
    EXPECT(gpurt_event_destroy(end), GPURT_SUCCESS);
    EXPECT(gpurt_free(a), GPURT_SUCCESS);
    EXPECT(gpurt_free(b), GPURT_SUCCESS);
    free(host);
    free(back);
}

int main(void) {
    int count = 0, real;
    unsigned total, n = 0, counts[3];
    long streams_before;
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_green_context_t ctx = NULL, split[3] = {NULL, NULL, NULL};
    gpurt_stream_t stream = NULL, blocking = NULL, other = NULL;
    void *lib;
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("green_test: skipped: no GPU (%s)\n", gpurt_last_error_message());
        return getenv("GPURT_REQUIRE_GPU") && strcmp(getenv("GPURT_REQUIRE_GPU"), "1") == 0 ? 1 : 0;
    }
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    real = strcmp(props.name, "Fake GPU") != 0;
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    /* POSIX: function pointers from dlsym */
    *(void **)(&stub_green_contexts) = lib ? dlsym(lib, "stub_green_contexts") : NULL;
    *(void **)(&stub_live) = lib ? dlsym(lib, "stub_live") : NULL;
    total = real ? (unsigned)props.multiprocessor_count : 132; /* the stub's device: 132 SMs */
    streams_before = live_streams();
    srand(42);

    /* Misuse: refused, nothing made. */
    EXPECT(gpurt_green_context_create(0, 0, &ctx), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_green_context_create(0, total + 1, &ctx), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_green_context_create(0, 16, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_green_context_create(99, 16, &ctx), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(ctx == NULL, "a refused create wrote a handle");
    EXPECT(gpurt_green_context_sm_count(NULL, &n), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_green_context_destroy(NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_green_context_stream_create(NULL, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_ERROR_INVALID_HANDLE);
    counts[0] = 0; counts[1] = 16;
    EXPECT(gpurt_green_context_split(0, counts, 2, split), GPURT_ERROR_INVALID_ARGUMENT); /* 0 only last */
    counts[0] = total - 8; counts[1] = 16;
    EXPECT(gpurt_green_context_split(0, counts, 2, split), GPURT_ERROR_INVALID_ARGUMENT); /* does not fit */
    EXPECT(gpurt_green_context_split(0, counts, 0, split), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_green_context_split(0, NULL, 2, split), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_green_context_split(0, counts, 65, split), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(split[0] == NULL && split[1] == NULL, "a refused split wrote handles");
    CHECK(!stub_green_contexts || stub_green_contexts() == 0, "%ld green contexts left by refused calls", stub_green_contexts ? stub_green_contexts() : 0);

    /* Counts are rounded up to the granularity (8 on Hopper); one past what fits gets the device. */
    EXPECT(gpurt_green_context_create(0, 20, &ctx), GPURT_SUCCESS);
    EXPECT(gpurt_green_context_sm_count(ctx, &n), GPURT_SUCCESS);
    CHECK(n >= 20 && n <= 32, "asked 20 SMs, got %u", n);
    EXPECT(gpurt_green_context_destroy(ctx), GPURT_SUCCESS);
    EXPECT(gpurt_green_context_sm_count(ctx, &n), GPURT_ERROR_INVALID_HANDLE); /* stale */
    EXPECT(gpurt_green_context_create(0, total, &ctx), GPURT_SUCCESS);
    EXPECT(gpurt_green_context_sm_count(ctx, &n), GPURT_SUCCESS);
    CHECK(n == total, "asked all %u SMs, got %u", total, n);

    /* A stream of it: non-blocking only; the context outlives its streams. */
    EXPECT(gpurt_green_context_stream_create(ctx, 0, 0, &blocking), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_green_context_stream_create(ctx, GPURT_STREAM_NON_BLOCKING, 99, &stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_green_context_stream_create(ctx, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    EXPECT(gpurt_green_context_sm_count((gpurt_green_context_t)stream, &n), GPURT_ERROR_INVALID_HANDLE); /* wrong kind */
    EXPECT(gpurt_green_context_destroy(ctx), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_green_context_sm_count(ctx, &n), GPURT_SUCCESS); /* the refusal changed nothing */
    round_trip(stream, real);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    /* A destroyed stream is kept for the next of its green context: same driver stream. */
    EXPECT(gpurt_green_context_stream_create(ctx, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &other), GPURT_SUCCESS);
    round_trip(stream, real);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    EXPECT(gpurt_green_context_destroy(ctx), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(other), GPURT_SUCCESS); /* a primary-context stream is untouched */
    EXPECT(gpurt_stream_destroy(other), GPURT_SUCCESS);

    /* A split: disjoint shares, the last one every SM left. */
    counts[0] = 16; counts[1] = 40; counts[2] = 0;
    EXPECT(gpurt_green_context_split(0, counts, 3, split), GPURT_SUCCESS);
    {
        unsigned a = 0, b = 0, c = 0;
        EXPECT(gpurt_green_context_sm_count(split[0], &a), GPURT_SUCCESS);
        EXPECT(gpurt_green_context_sm_count(split[1], &b), GPURT_SUCCESS);
        EXPECT(gpurt_green_context_sm_count(split[2], &c), GPURT_SUCCESS);
        CHECK(a == 16 && b == 40 && a + b + c == total, "split {16, 40, rest} of %u SMs: %u, %u, %u", total, a, b, c);
        printf("green_test: %u SMs; split {16, 40, rest}: %u, %u, %u\n", total, a, b, c);
    }
    EXPECT(gpurt_green_context_stream_create(split[1], GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    round_trip(stream, real);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    for (int i = 0; i < 3; i++) EXPECT(gpurt_green_context_destroy(split[i]), GPURT_SUCCESS);

    CHECK(!stub_green_contexts || stub_green_contexts() == 0, "%ld green contexts left", stub_green_contexts ? stub_green_contexts() : 0);
    CHECK(!stub_live || live_streams() <= streams_before + 1, "green streams left: %ld live, %ld before (one primary stream kept for reuse)",
          live_streams(), streams_before);
    printf("green_test: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
