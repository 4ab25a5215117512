/* Conditional and event nodes in captures. Conditional nodes: misuse refused (outside
 * a capture, unknown types, too many bodies, next and end without a body, ending the
 * capture inside a body); a body
 * captured on the same stream handle (its native stream is the body's meanwhile, and
 * an allocation there comes from the capture's pool); nested nodes. On a GPU: a WHILE
 * loop that runs until a device counter reaches a limit written after capture, replayed
 * with several limits; an IF with an else whose value a kernel of the caller's sets
 * with cudaGraphSetConditional; a SWITCH; fresh random data checked exact. Event nodes
 * (GPURT_EVENT_EXTERNAL): a graph's record node that a stream outside it waits for, and
 * a graph's wait node for a record made outside it; on a GPU, the data each side sees.
 * A graph instantiated for device launch replays from the host.
 *
 *   graph_nodes_test */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define N (1 << 16)

static const char *source =
    "extern \"C\" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);\n"
    "extern \"C\" __global__ void below(const unsigned *counter, const unsigned *limit, unsigned *flag) {\n"
    "    *flag = *counter < *limit;\n"
    "}\n"
    "extern \"C\" __global__ void step(unsigned *counter, const unsigned *limit, unsigned *flag, int *out, const int *in, int n) {\n"
    "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] += in[i];\n"
    "    if (blockIdx.x == 0 && threadIdx.x == 0) { unsigned c = *counter + 1; *counter = c; *flag = c < *limit; }\n"
    "}\n"
    "extern \"C\" __global__ void add(int *out, int n, int v) {\n"
    "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] += v;\n"
    "}\n"
    "extern \"C\" __global__ void set_directly(unsigned long long handle, const unsigned *value) {\n"
    "    cudaGraphSetConditional(handle, *value);\n"
    "}\n";

static gpurt_kernel_t k_below, k_step, k_add, k_set;

static void launch(gpurt_kernel_t k, unsigned grid, gpurt_stream_t s, void **args) {
    EXPECT(gpurt_launch_kernel(k, grid, 1, 1, grid == 1 ? 1 : 256, 1, 1, 0, s, args), GPURT_SUCCESS);
}

static void add_on(gpurt_stream_t s, int *out, int v) {
    int n = N;
    void *args[] = {&out, &n, &v};
    launch(k_add, 64, s, args);
}

static gpurt_graph_exec_t instantiate(gpurt_stream_t s) {
    gpurt_graph_t graph = NULL;
    gpurt_graph_exec_t exec = NULL;
    EXPECT(gpurt_stream_end_capture(s, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_instantiate(graph, 0, NULL, &exec), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    return exec;
}

/* Replays `exec` with `*value_dev` = value on `out` zeroed; out must become expect * in (or + add). */
static void replay_and_check(gpurt_graph_exec_t exec, gpurt_stream_t s, unsigned *value_dev, unsigned value, int *out, const int *in_host,
                             int times, int plus, const char *what) {
    int *back = malloc(N * sizeof(int));
    size_t wrong = 0;
    EXPECT(gpurt_memset_async(out, 0, 4, N, s), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(value_dev, &value, sizeof value, s), GPURT_SUCCESS);
    EXPECT(gpurt_graph_launch(exec, s), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(back, out, N * sizeof(int), s), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    for (int i = 0; i < N; i++) wrong += back[i] != times * in_host[i] + plus;
    CHECK(wrong == 0, "%s, value %u: %zu of %d elements are not %d * in + %d (first: %d for in %d)", what, value, wrong, N, times, plus, back[0], in_host[0]);
    free(back);
}

int main(void) {
    int count = 0, real, i;
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_stream_t s = NULL, other = NULL;
    unsigned long long h = 0, inner = 0;
    void *native = NULL, *body_native = NULL, *scratch = NULL;
    unsigned *counter = NULL, *limit = NULL, *flag = NULL, *value = NULL;
    int *out = NULL, *in = NULL, *in_host = malloc(N * sizeof(int));
    gpurt_graph_exec_t exec = NULL;
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("graph_nodes_test: skipped: no GPU (%s)\n", gpurt_last_error_message());
        return getenv("GPURT_REQUIRE_GPU") && strcmp(getenv("GPURT_REQUIRE_GPU"), "1") == 0 ? 1 : 0;
    }
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    real = strcmp(props.name, "Fake GPU") != 0;
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &other), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(sizeof(unsigned), s, (void **)&counter), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(sizeof(unsigned), s, (void **)&limit), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(sizeof(unsigned), s, (void **)&flag), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(sizeof(unsigned), s, (void **)&value), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(N * sizeof(int), s, (void **)&out), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(N * sizeof(int), s, (void **)&in), GPURT_SUCCESS);
    srand(7);
    for (i = 0; i < N; i++) in_host[i] = rand() % 2001 - 1000;
    EXPECT(gpurt_memcpy_async(in, in_host, N * sizeof(int), s), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);

    /* Misuse outside a capture: refused. */
    EXPECT(gpurt_graph_conditional_handle_create(s, 0, 0, &h), GPURT_ERROR_STREAM_CAPTURE);
    EXPECT(gpurt_graph_conditional_begin(s, 1, GPURT_GRAPH_CONDITIONAL_WHILE, 1), GPURT_ERROR_STREAM_CAPTURE);
    EXPECT(gpurt_graph_conditional_set(s, 1, flag), GPURT_ERROR_STREAM_CAPTURE);
    EXPECT(gpurt_graph_conditional_next(s), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_conditional_end(s), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_conditional_end(NULL), GPURT_ERROR_INVALID_HANDLE);

    if (real) {
        EXPECT(gpurt_rtc_get_kernel(source, "below", NULL, 0, &k_below), GPURT_SUCCESS);
        EXPECT(gpurt_rtc_get_kernel(source, "step", NULL, 0, &k_step), GPURT_SUCCESS);
        EXPECT(gpurt_rtc_get_kernel(source, "add", NULL, 0, &k_add), GPURT_SUCCESS);
        EXPECT(gpurt_rtc_get_kernel(source, "set_directly", NULL, 0, &k_set), GPURT_SUCCESS);
    }

    /* A WHILE loop: the body runs until the counter reaches the limit. */
    EXPECT(gpurt_stream_native(s, &native), GPURT_SUCCESS);
    EXPECT(gpurt_stream_begin_capture(s, GPURT_CAPTURE_MODE_GLOBAL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_handle_create(s, 0, 7, &h), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_conditional_handle_create(s, 0, 0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_conditional_handle_create(s, 0, GPURT_GRAPH_CONDITIONAL_ASSIGN_DEFAULT, &h), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_begin(s, h, 3, 1), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_conditional_begin(s, h, GPURT_GRAPH_CONDITIONAL_WHILE, 2), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_conditional_begin(s, h, GPURT_GRAPH_CONDITIONAL_IF, 3), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_conditional_begin(s, h, GPURT_GRAPH_CONDITIONAL_SWITCH, 0), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_conditional_set(s, h, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    if (real) {
        void *args[] = {&counter, &limit, &flag};
        launch(k_below, 1, s, args);
    }
    EXPECT(gpurt_graph_conditional_set(s, h, flag), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_begin(s, h, GPURT_GRAPH_CONDITIONAL_WHILE, 1), GPURT_SUCCESS);
    EXPECT(gpurt_stream_native(s, &body_native), GPURT_SUCCESS);
    CHECK(body_native != native, "the handle names the body's stream while it is captured");
    EXPECT(gpurt_malloc(4096, s, &scratch), GPURT_SUCCESS); /* from the capture's pool */
    EXPECT(gpurt_free(scratch), GPURT_SUCCESS);
    if (real) {
        int n = N;
        void *args[] = {&counter, &limit, &flag, &out, &in, &n};
        launch(k_step, 64, s, args);
    }
    EXPECT(gpurt_graph_conditional_set(s, h, flag), GPURT_SUCCESS);
    {
        gpurt_graph_t none = NULL;
        EXPECT(gpurt_stream_end_capture(s, &none), GPURT_ERROR_STREAM_CAPTURE); /* inside a body: end it first */
    }
    EXPECT(gpurt_graph_conditional_next(s), GPURT_ERROR_INVALID_ARGUMENT);  /* a WHILE has one body */
    EXPECT(gpurt_graph_conditional_end(other), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_conditional_end(s), GPURT_SUCCESS);
    EXPECT(gpurt_stream_native(s, &body_native), GPURT_SUCCESS);
    CHECK(body_native == native, "the handle names its own stream again after the node");
    exec = instantiate(s);
    if (real) {
        const unsigned limits[] = {5, 17, 0, 1, 3};
        for (i = 0; i < 5; i++) {
            unsigned got = 99;
            EXPECT(gpurt_memset_async(counter, 0, 4, 1, s), GPURT_SUCCESS);
            replay_and_check(exec, s, limit, limits[i], out, in_host, (int)limits[i], 0, "WHILE");
            EXPECT(gpurt_memcpy_async(&got, counter, sizeof got, s), GPURT_SUCCESS);
            EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
            CHECK(got == limits[i], "WHILE ran %u times for a limit of %u", got, limits[i]);
        }
    }
    EXPECT(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);

    /* An IF with an else, set by the caller's own kernel, inside which a nested IF. */
    EXPECT(gpurt_stream_begin_capture(s, GPURT_CAPTURE_MODE_GLOBAL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_handle_create(s, 0, 0, &h), GPURT_SUCCESS);
    if (real) {
        void *args[] = {&h, &value};
        launch(k_set, 1, s, args);
    }
    EXPECT(gpurt_graph_conditional_begin(s, h, GPURT_GRAPH_CONDITIONAL_IF, 2), GPURT_SUCCESS);
    if (real) add_on(s, out, 1);
    EXPECT(gpurt_graph_conditional_handle_create(s, 1, GPURT_GRAPH_CONDITIONAL_ASSIGN_DEFAULT, &inner), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_begin(s, inner, GPURT_GRAPH_CONDITIONAL_IF, 1), GPURT_SUCCESS); /* default 1: runs */
    if (real) add_on(s, out, 1000);
    EXPECT(gpurt_graph_conditional_next(s), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_conditional_end(s), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_next(s), GPURT_SUCCESS); /* the outer else */
    if (real) add_on(s, out, 100);
    EXPECT(gpurt_graph_conditional_end(s), GPURT_SUCCESS);
    exec = instantiate(s);
    if (real) {
        replay_and_check(exec, s, value, 1, out, in_host, 0, 1001, "IF (then, nested IF)");
        replay_and_check(exec, s, value, 0, out, in_host, 0, 100, "IF (else)");
        replay_and_check(exec, s, value, 9, out, in_host, 0, 1001, "IF (then)");
    }
    EXPECT(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);

    /* A SWITCH of three bodies, set by gpurt's kernel; a value past them runs none. */
    EXPECT(gpurt_stream_begin_capture(s, GPURT_CAPTURE_MODE_GLOBAL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_handle_create(s, 0, 0, &h), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_set(s, h, value), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_begin(s, h, GPURT_GRAPH_CONDITIONAL_SWITCH, 3), GPURT_SUCCESS);
    for (i = 0; i < 3; i++) {
        if (i > 0) EXPECT(gpurt_graph_conditional_next(s), GPURT_SUCCESS);
        if (real) add_on(s, out, i == 0 ? 1 : i == 1 ? 10 : 100);
    }
    EXPECT(gpurt_graph_conditional_next(s), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_conditional_end(s), GPURT_SUCCESS);
    exec = instantiate(s);
    if (real) {
        replay_and_check(exec, s, value, 2, out, in_host, 0, 100, "SWITCH");
        replay_and_check(exec, s, value, 0, out, in_host, 0, 1, "SWITCH");
        replay_and_check(exec, s, value, 7, out, in_host, 0, 0, "SWITCH (no body)");
    }
    EXPECT(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
    EXPECT(gpurt_graph_conditional_end(s), GPURT_ERROR_INVALID_ARGUMENT);

    /* Event nodes: a graph signals a stream outside it, and waits for one. */
    {
        gpurt_event_t ext = NULL, ext2 = NULL, plain = NULL;
        long records0 = 0, waits0 = 0, records1 = 0, waits1 = 0;
        void (*external_events)(long *, long *) = NULL;
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        *(void **)(&external_events) = lib ? dlsym(lib, "stub_external_events") : NULL; /* POSIX: function pointers from dlsym */
        EXPECT(gpurt_event_create(0, 0x10, &plain), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_event_create(0, GPURT_EVENT_EXTERNAL | GPURT_EVENT_DISABLE_TIMING, &ext), GPURT_SUCCESS);
        EXPECT(gpurt_event_create(0, GPURT_EVENT_EXTERNAL | GPURT_EVENT_DISABLE_TIMING, &ext2), GPURT_SUCCESS);
        EXPECT(gpurt_event_create(0, GPURT_EVENT_DISABLE_TIMING, &plain), GPURT_SUCCESS);
        if (external_events) external_events(&records0, &waits0);
        /* Graph 1: 50 slow steps, a record node, then more. */
        EXPECT(gpurt_stream_begin_capture(s, GPURT_CAPTURE_MODE_GLOBAL, NULL), GPURT_SUCCESS);
        for (i = 0; real && i < 50; i++) add_on(s, out, 1);
        EXPECT(gpurt_event_record(ext, s), GPURT_SUCCESS);
        if (real) add_on(s, out, 1000);
        exec = instantiate(s);
        /* Graph 2: a wait node, then one step. */
        EXPECT(gpurt_stream_begin_capture(s, GPURT_CAPTURE_MODE_GLOBAL, NULL), GPURT_SUCCESS);
        EXPECT(gpurt_stream_wait_event(s, ext2), GPURT_SUCCESS);
        if (real) add_on(s, out, 1);
        {
            gpurt_graph_exec_t waits = instantiate(s);
            if (external_events) {
                external_events(&records1, &waits1);
                CHECK(records1 == records0 + 1 && waits1 == waits0 + 1, "external records %ld -> %ld, waits %ld -> %ld", records0, records1, waits0,
                      waits1);
                /* Outside a capture an external event is recorded and waited for as any other. */
                EXPECT(gpurt_event_record(ext2, other), GPURT_SUCCESS);
                EXPECT(gpurt_stream_wait_event(other, ext), GPURT_SUCCESS);
                external_events(&records0, &waits0);
                CHECK(records0 == records1 && waits0 == waits1, "outside a capture, external records %ld -> %ld, waits %ld -> %ld", records1,
                      records0, waits1, waits0);
            }
            if (real) {
                int *back = malloc(N * sizeof(int));
                size_t wrong = 0;
                EXPECT(gpurt_memset_async(out, 0, 4, N, s), GPURT_SUCCESS);
                EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
                EXPECT(gpurt_graph_launch(exec, s), GPURT_SUCCESS);
                EXPECT(gpurt_stream_wait_event(other, ext), GPURT_SUCCESS); /* the replay's record node */
                EXPECT(gpurt_memcpy_async(back, out, N * sizeof(int), other), GPURT_SUCCESS);
                EXPECT(gpurt_stream_synchronize(other), GPURT_SUCCESS);
                for (i = 0; i < N; i++) wrong += back[i] != 50 && back[i] != 1050;
                CHECK(wrong == 0, "a stream waiting for the graph's record node saw %zu elements before it (first %d)", wrong, back[0]);
                EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
                /* Graph 2 waits for a record made on another stream after 50 slow steps. */
                EXPECT(gpurt_memset_async(out, 0, 4, N, other), GPURT_SUCCESS);
                for (i = 0; i < 50; i++) add_on(other, out, 1);
                EXPECT(gpurt_event_record(ext2, other), GPURT_SUCCESS);
                EXPECT(gpurt_graph_launch(waits, s), GPURT_SUCCESS);
                EXPECT(gpurt_memcpy_async(back, out, N * sizeof(int), s), GPURT_SUCCESS);
                EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
                wrong = 0;
                for (i = 0; i < N; i++) wrong += back[i] != 51;
                CHECK(wrong == 0, "the graph's wait node let %zu elements through early (first %d)", wrong, back[0]);
                EXPECT(gpurt_stream_synchronize(other), GPURT_SUCCESS);
                free(back);
            }
            EXPECT(gpurt_graph_exec_destroy(waits), GPURT_SUCCESS);
        }
        EXPECT(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
        EXPECT(gpurt_event_destroy(ext), GPURT_SUCCESS);
        EXPECT(gpurt_event_destroy(ext2), GPURT_SUCCESS);
        EXPECT(gpurt_event_destroy(plain), GPURT_SUCCESS);
    }

    /* A graph instantiated for device launch (kernel nodes only) replays from the host. */
    if (real) {
        gpurt_graph_t graph = NULL;
        gpurt_graph_exec_t exec = NULL;
        EXPECT(gpurt_memset_async(out, 0, 4, N, s), GPURT_SUCCESS);
        EXPECT(gpurt_stream_begin_capture(s, GPURT_CAPTURE_MODE_GLOBAL, NULL), GPURT_SUCCESS);
        add_on(s, out, 3);
        add_on(s, out, 4);
        EXPECT(gpurt_stream_end_capture(s, &graph), GPURT_SUCCESS);
        EXPECT(gpurt_graph_instantiate(graph, GPURT_GRAPH_INSTANTIATE_DEVICE_LAUNCH | GPURT_GRAPH_INSTANTIATE_UPLOAD, s, &exec), GPURT_SUCCESS);
        EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
        EXPECT(gpurt_graph_launch(exec, s), GPURT_SUCCESS);
        EXPECT(gpurt_graph_launch(exec, s), GPURT_SUCCESS);
        int *back = malloc(N * sizeof(int));
        size_t wrong = 0;
        EXPECT(gpurt_memcpy_async(back, out, N * sizeof(int), s), GPURT_SUCCESS);
        EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
        for (i = 0; i < N; i++) wrong += back[i] != 14;
        CHECK(wrong == 0, "a device-launch graph replayed twice: %zu elements are not 14 (first %d)", wrong, back[0]);
        free(back);
        EXPECT(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
    }

    EXPECT(gpurt_free(counter), GPURT_SUCCESS);
    EXPECT(gpurt_free(limit), GPURT_SUCCESS);
    EXPECT(gpurt_free(flag), GPURT_SUCCESS);
    EXPECT(gpurt_free(value), GPURT_SUCCESS);
    EXPECT(gpurt_free(out), GPURT_SUCCESS);
    EXPECT(gpurt_free(in), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(s), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(other), GPURT_SUCCESS);
    free(in_host);
    printf("graph_nodes_test: %d checks, %d failures%s\n", checks, failures, real ? "" : " (stub driver: statuses only)");
    return failures != 0;
}
