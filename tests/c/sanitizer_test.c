/* The stream sanitizer through the C ABI: each happens-before rule (an unordered
 * write/write and read/write is a report; an event wait, a stream wait, a stream,
 * event or device synchronize, a host function that ran, record_stream before a
 * free each order), accesses captured into a graph and replayed, gpurt's own copies
 * and memsets declared for the caller, misuse, and no false report from eight
 * threads that order their work properly. Reports are counted from the log callback
 * (level 1, the word "race") and from gpurt_sanitizer_report_count.
 *
 * On a GPU, a real race too: a kernel on stream A spins, then writes fresh values;
 * a copy on stream B, unordered, reads the old ones (the data is wrong) and the
 * sanitizer reports it; ordered by an event, the data is exact and nothing is
 * reported.
 *
 * Needs a device (the stub driver is one); without one it says so and exits 0,
 * unless GPURT_REQUIRE_GPU=1.
 */
#define _GNU_SOURCE
#include <gpurt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static long races_logged = 0;

static void on_log(int level, const char *message, void *user) {
    (void)user;
    if (level == 1 && strstr(message, "race") != NULL) __atomic_add_fetch(&races_logged, 1, __ATOMIC_RELAXED);
}

static uint64_t reports(void) {
    uint64_t n = 0;
    EXPECT(gpurt_sanitizer_report_count(&n), GPURT_SUCCESS);
    return n;
}

/* Runs `body`, after the device is idle (so that nothing before it races with it),
 * and checks that it made exactly `expected` reports, logged and counted. */
#define EXPECT_REPORTS(expected, what, body)                                                            \
    do {                                                                                               \
        uint64_t before_;                                                                              \
        EXPECT(gpurt_device_synchronize(0), GPURT_SUCCESS);                                            \
        before_ = reports();                                                                  \
        long logged_ = __atomic_load_n(&races_logged, __ATOMIC_RELAXED);                               \
        body;                                                                                          \
        CHECK(reports() - before_ == (uint64_t)(expected), "%s: %llu reports, expected %d", what,     \
              (unsigned long long)(reports() - before_), (int)(expected));                             \
        CHECK(__atomic_load_n(&races_logged, __ATOMIC_RELAXED) - logged_ == (long)(expected),          \
              "%s: logged", what);                                                                     \
    } while (0)

#define W GPURT_ACCESS_WRITE
#define R GPURT_ACCESS_READ

static gpurt_stream_t a, b;

/* A fresh buffer: a new allocation starts with no recorded accesses. */
static void *fresh(size_t bytes) {
    void *p = NULL;
    EXPECT(gpurt_malloc(bytes, a, &p), GPURT_SUCCESS);
    return p;
}

static int host_function_ran = 0;
static void mark_ran(void *flag) { __atomic_store_n((int *)flag, 1, __ATOMIC_RELEASE); }

static void rules(void) {
    gpurt_event_t event = NULL;
    void *p, *native_b = NULL;
    EXPECT(gpurt_event_create(0, GPURT_EVENT_DISABLE_TIMING, &event), GPURT_SUCCESS);

    p = fresh(4096);
    EXPECT_REPORTS(1, "write/write", {
        EXPECT(gpurt_sanitizer_access(p, 4096, W, a, "producer"), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access(p, 4096, W, b, "other writer"), GPURT_SUCCESS);
    });
    EXPECT_REPORTS(1, "read/write", {
        EXPECT(gpurt_sanitizer_access(p, 16, W, a, "producer"), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access((char *)p + 8, 16, R, b, "consumer"), GPURT_SUCCESS);
    });
    EXPECT_REPORTS(0, "disjoint bytes and read/read", {
        EXPECT(gpurt_sanitizer_access((char *)p + 1024, 16, W, a, "producer"), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access((char *)p + 2048, 16, W, b, "other"), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access((char *)p + 8, 16, R, a, "reader"), GPURT_SUCCESS);
    });
    EXPECT_REPORTS(0, "ordered by an event", {
        EXPECT(gpurt_sanitizer_access(p, 64, W, a, "producer"), GPURT_SUCCESS);
        EXPECT(gpurt_event_record(event, a), GPURT_SUCCESS);
        EXPECT(gpurt_stream_wait_event(b, event), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access(p, 64, R, b, "consumer"), GPURT_SUCCESS);
    });
    EXPECT_REPORTS(1, "an event recorded before the write orders nothing of it", {
        EXPECT(gpurt_event_record(event, b), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access(p, 64, W, b, "late writer"), GPURT_SUCCESS);
        EXPECT(gpurt_stream_wait_event(a, event), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access(p, 64, R, a, "reader"), GPURT_SUCCESS);
    });
    EXPECT_REPORTS(0, "ordered by a stream wait", {
        EXPECT(gpurt_sanitizer_access(p, 64, W, a, "producer"), GPURT_SUCCESS);
        EXPECT(gpurt_stream_wait_stream(b, a), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access(p, 64, W, b, "consumer"), GPURT_SUCCESS);
    });
    EXPECT_REPORTS(0, "ordered by stream, event and device synchronize", {
        EXPECT(gpurt_sanitizer_access(p, 64, W, a, "producer"), GPURT_SUCCESS);
        EXPECT(gpurt_stream_synchronize(a), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access(p, 64, W, b, "after a stream sync"), GPURT_SUCCESS);
        EXPECT(gpurt_event_record(event, b), GPURT_SUCCESS);
        EXPECT(gpurt_event_synchronize(event), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access(p, 64, W, a, "after an event sync"), GPURT_SUCCESS);
        EXPECT(gpurt_device_synchronize(0), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access(p, 64, W, b, "after a device sync"), GPURT_SUCCESS);
    });
    EXPECT_REPORTS(0, "ordered by a host function that ran", {
        EXPECT(gpurt_sanitizer_access(p, 64, W, a, "producer"), GPURT_SUCCESS);
        EXPECT(gpurt_stream_launch_host_func(a, mark_ran, &host_function_ran), GPURT_SUCCESS);
        while (!__atomic_load_n(&host_function_ran, __ATOMIC_ACQUIRE)) {
        }
        EXPECT(gpurt_sanitizer_access(p, 64, W, b, "after the host function"), GPURT_SUCCESS);
    });

    /* Frees: on A; a use on B must be recorded or ordered before. */
    EXPECT_REPORTS(1, "free without record_stream", {
        EXPECT(gpurt_sanitizer_access(p, 4096, R, b, "late reader"), GPURT_SUCCESS);
        EXPECT(gpurt_free(p), GPURT_SUCCESS);
    });
    p = fresh(4096);
    EXPECT_REPORTS(0, "free after record_stream, and free_native on the user's stream", {
        EXPECT(gpurt_sanitizer_access(p, 4096, R, b, "reader"), GPURT_SUCCESS);
        EXPECT(gpurt_record_stream(p, b), GPURT_SUCCESS);
        EXPECT(gpurt_free(p), GPURT_SUCCESS);
        p = fresh(4096);
        EXPECT(gpurt_sanitizer_access(p, 4096, W, b, "writer"), GPURT_SUCCESS);
        EXPECT(gpurt_stream_native(b, &native_b), GPURT_SUCCESS);
        EXPECT(gpurt_free_native(p, native_b), GPURT_SUCCESS);
    });
    p = fresh(4096);
    EXPECT_REPORTS(0, "free ordered after the use by an event", {
        EXPECT(gpurt_sanitizer_access(p, 4096, W, b, "writer"), GPURT_SUCCESS);
        EXPECT(gpurt_event_record(event, b), GPURT_SUCCESS);
        EXPECT(gpurt_stream_wait_event(a, event), GPURT_SUCCESS);
        EXPECT(gpurt_free(p), GPURT_SUCCESS);
    });

    /* gpurt's copies and memsets declare their own accesses. */
    {
        void *src = fresh(256), *dst = fresh(256);
        EXPECT_REPORTS(1, "a memset on A and a copy from it on B", {
            EXPECT(gpurt_memset_async(src, 0x5a, 1, 256, a), GPURT_SUCCESS);
            EXPECT(gpurt_memcpy_async(dst, src, 256, b), GPURT_SUCCESS);
        });
        EXPECT_REPORTS(0, "the same, ordered", {
            EXPECT(gpurt_memset_async(src, 0x5a, 1, 256, a), GPURT_SUCCESS);
            EXPECT(gpurt_stream_wait_stream(b, a), GPURT_SUCCESS);
            EXPECT(gpurt_memcpy_async(dst, src, 256, b), GPURT_SUCCESS);
            EXPECT(gpurt_stream_synchronize(b), GPURT_SUCCESS);
            EXPECT(gpurt_free(src), GPURT_SUCCESS);
            EXPECT(gpurt_free(dst), GPURT_SUCCESS);
        });
    }

    /* A graph's declared accesses count at each replay, on the launch stream. */
    {
        gpurt_graph_t graph = NULL;
        gpurt_graph_exec_t exec = NULL;
        void *q = fresh(1024);
        EXPECT_REPORTS(0, "capture", {
            EXPECT(gpurt_stream_begin_capture(a, 0, NULL), GPURT_SUCCESS);
            EXPECT(gpurt_sanitizer_access(q, 1024, W, a, "captured writer"), GPURT_SUCCESS);
            EXPECT(gpurt_stream_end_capture(a, &graph), GPURT_SUCCESS);
            EXPECT(gpurt_graph_instantiate(graph, 0, NULL, &exec), GPURT_SUCCESS);
        });
        EXPECT_REPORTS(0, "replays on one stream", {
            EXPECT(gpurt_graph_launch(exec, a), GPURT_SUCCESS);
            EXPECT(gpurt_graph_launch(exec, a), GPURT_SUCCESS);
        });
        EXPECT_REPORTS(1, "a replay on A, then one on B, unordered", {
            EXPECT(gpurt_graph_launch(exec, a), GPURT_SUCCESS);
            EXPECT(gpurt_graph_launch(exec, b), GPURT_SUCCESS);
        });
        EXPECT(gpurt_device_synchronize(0), GPURT_SUCCESS);
        EXPECT(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
        EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
        EXPECT(gpurt_free(q), GPURT_SUCCESS);
    }
    EXPECT(gpurt_event_destroy(event), GPURT_SUCCESS);
}

static void misuse(void) {
    int on = -1;
    EXPECT(gpurt_sanitizer_access((void *)0x1000, 8, 0, a, "t"), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_sanitizer_access((void *)0x1000, 8, 4, a, "t"), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpurt_last_error_message(), "GPURT_ACCESS_READ") != NULL, "the message names the flags");
    EXPECT(gpurt_sanitizer_access((void *)0x1000, 8, R, (gpurt_stream_t)(uintptr_t)0x12345, "t"), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_sanitizer_access((void *)-16, 64, R, a, "t"), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_sanitizer_report_count(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_sanitizer_is_enabled(&on), GPURT_SUCCESS);
    CHECK(on == 1, "on");
    EXPECT(gpurt_sanitizer_access((void *)0x1000, 8, R | W, a, NULL), GPURT_SUCCESS);
}

/* Eight threads, each with its own streams and buffers, ordered properly: no report. */
static void *ordered_worker(void *arg) {
    gpurt_stream_t mine = NULL, theirs = NULL;
    gpurt_event_t done = NULL;
    int i;
    (void)arg;
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &mine), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &theirs), GPURT_SUCCESS);
    EXPECT(gpurt_event_create(0, GPURT_EVENT_DISABLE_TIMING, &done), GPURT_SUCCESS);
    for (i = 0; i < 200; i++) {
        void *p = NULL;
        size_t bytes = 64 + (size_t)(i % 7) * 512;
        EXPECT(gpurt_malloc(bytes, mine, &p), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access(p, bytes, W, mine, "produce"), GPURT_SUCCESS);
        EXPECT(gpurt_event_record(done, mine), GPURT_SUCCESS);
        EXPECT(gpurt_stream_wait_event(theirs, done), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access(p, bytes, R, theirs, "consume"), GPURT_SUCCESS);
        if (i % 2) {
            EXPECT(gpurt_record_stream(p, theirs), GPURT_SUCCESS);
        } else {
            EXPECT(gpurt_stream_wait_stream(mine, theirs), GPURT_SUCCESS);
        }
        EXPECT(gpurt_free(p), GPURT_SUCCESS);
    }
    EXPECT(gpurt_stream_synchronize(mine), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(theirs), GPURT_SUCCESS);
    EXPECT(gpurt_event_destroy(done), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(mine), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(theirs), GPURT_SUCCESS);
    return NULL;
}

static const char *source =
    "extern \"C\" __global__ void late_fill(unsigned int *out, unsigned int n, unsigned int seed,\n"
    "                                       unsigned long long cycles) {\n"
    "    unsigned long long start = clock64();\n"
    "    while (clock64() - start < cycles) {}\n"
    "    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {\n"
    "        unsigned int x = (i + 1) * 2654435761u ^ seed;\n"
    "        out[i] = x ^ (x >> 15);\n"
    "    }\n"
    "}\n";

static unsigned int expected_value(unsigned int i, unsigned int seed) {
    unsigned int x = (i + 1) * 2654435761u ^ seed;
    return x ^ (x >> 15);
}

/* A real race on the GPU: returns the number of wrong words B's copy read. */
static unsigned int race_on_gpu(gpurt_kernel_t kernel, int ordered, unsigned int seed) {
    enum { N = 1 << 20 };
    unsigned int *dev = NULL, *host = malloc(N * sizeof *host), n = N, wrong = 0, i;
    unsigned long long cycles = 200000000ull; /* ~0.1 s: B's copy runs long before the kernel writes */
    void *args[4];
    gpurt_event_t written = NULL;
    fill_pattern((unsigned char *)host, N * sizeof *host, seed ^ 0x9e3779b9u);
    EXPECT(gpurt_malloc(N * sizeof *dev, a, (void **)&dev), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy(dev, host, N * sizeof *dev, a), GPURT_SUCCESS); /* old, random contents */
    args[0] = &dev;
    args[1] = &n;
    args[2] = &seed;
    args[3] = &cycles;
    EXPECT(gpurt_launch_kernel(kernel, 132, 1, 1, 256, 1, 1, 0, a, args), GPURT_SUCCESS);
    EXPECT(gpurt_sanitizer_access(dev, N * sizeof *dev, W, a, "late_fill"), GPURT_SUCCESS);
    if (ordered) {
        EXPECT(gpurt_event_create(0, GPURT_EVENT_DISABLE_TIMING, &written), GPURT_SUCCESS);
        EXPECT(gpurt_event_record(written, a), GPURT_SUCCESS);
        EXPECT(gpurt_stream_wait_event(b, written), GPURT_SUCCESS);
    }
    EXPECT(gpurt_memcpy(host, dev, N * sizeof *dev, b), GPURT_SUCCESS);
    for (i = 0; i < N; i++) wrong += host[i] != expected_value(i, seed);
    EXPECT(gpurt_stream_synchronize(a), GPURT_SUCCESS);
    EXPECT(gpurt_record_stream(dev, b), GPURT_SUCCESS);
    EXPECT(gpurt_free(dev), GPURT_SUCCESS);
    if (written) EXPECT(gpurt_event_destroy(written), GPURT_SUCCESS);
    free(host);
    return wrong;
}

int main(void) {
    const char *require = getenv("GPURT_REQUIRE_GPU");
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    int count = 0, i, real;
    pthread_t threads[8];
    uint64_t before;

    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("sanitizer_test: skipped: no CUDA device (%s)\n", gpurt_last_error_message());
        return require && strcmp(require, "1") == 0 ? 1 : 0;
    }
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    real = strcmp(props.name, "Fake GPU") != 0;
    EXPECT(gpurt_set_log_callback(on_log, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &a), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &b), GPURT_SUCCESS);

    /* Off: declarations cost a branch and report nothing; the flag is still checked. */
    EXPECT(gpurt_sanitizer_enable(0), GPURT_SUCCESS);
    EXPECT_REPORTS(0, "off", {
        EXPECT(gpurt_sanitizer_access((void *)0x1000, 8, W, a, "x"), GPURT_SUCCESS);
        EXPECT(gpurt_sanitizer_access((void *)0x1000, 8, W, b, "y"), GPURT_SUCCESS);
    });
    EXPECT(gpurt_sanitizer_access((void *)0x1000, 8, 9, a, "x"), GPURT_ERROR_INVALID_ARGUMENT);

    EXPECT(gpurt_sanitizer_enable(1), GPURT_SUCCESS);
    rules();
    misuse();

    before = reports();
    for (i = 0; i < 8; i++) CHECK(pthread_create(&threads[i], NULL, ordered_worker, NULL) == 0, "thread %d", i);
    for (i = 0; i < 8; i++) pthread_join(threads[i], NULL);
    CHECK(reports() == before, "8 threads ordered properly: %llu false reports", (unsigned long long)(reports() - before));

    if (real) {
        gpurt_kernel_t kernel = NULL;
        unsigned int seed = (unsigned int)(uintptr_t)&kernel ^ 0x5bd1e995u, wrong;
        EXPECT(gpurt_set_device(0), GPURT_SUCCESS);
        EXPECT(gpurt_rtc_get_kernel(source, "late_fill", NULL, 0, &kernel), GPURT_SUCCESS);
        EXPECT_REPORTS(1, "a real race", { wrong = race_on_gpu(kernel, 0, seed); });
        CHECK(wrong > 0, "the unordered copy read the old data (%u wrong words)", wrong);
        printf("sanitizer_test: the unordered copy read %u of %u words wrong; reported\n", wrong, 1u << 20);
        EXPECT_REPORTS(0, "the same, ordered by an event", { wrong = race_on_gpu(kernel, 1, seed + 1); });
        CHECK(wrong == 0, "ordered: %u wrong words", wrong);
        {
            /* gpurt's elementwise helper declares its input and output. */
            static float host[1024];
            void *x = NULL, *y = NULL;
            const char *names[1] = {"x"};
            const void *inputs[1];
            EXPECT(gpurt_malloc(sizeof host, a, &x), GPURT_SUCCESS);
            EXPECT(gpurt_malloc(sizeof host, a, &y), GPURT_SUCCESS);
            EXPECT(gpurt_memset_async(x, 0x3f800000u, 4, 1024, a), GPURT_SUCCESS);
            inputs[0] = x;
            EXPECT_REPORTS(1, "an elementwise output read on another stream, unordered", {
                EXPECT(gpurt_elementwise("y = x * 2", names, inputs, 1, GPURT_DTYPE_F32, 1024, y, a), GPURT_SUCCESS);
                EXPECT(gpurt_memcpy(host, y, sizeof host, b), GPURT_SUCCESS);
            });
            EXPECT_REPORTS(0, "the same, ordered", {
                EXPECT(gpurt_elementwise("y = x * 2", names, inputs, 1, GPURT_DTYPE_F32, 1024, y, a), GPURT_SUCCESS);
                EXPECT(gpurt_stream_wait_stream(b, a), GPURT_SUCCESS);
                EXPECT(gpurt_memcpy(host, y, sizeof host, b), GPURT_SUCCESS);
            });
            CHECK(host[0] == 2.0f && host[1023] == 2.0f, "2 * 1.0 = %g", (double)host[1023]);
            EXPECT(gpurt_free(x), GPURT_SUCCESS);
            EXPECT(gpurt_record_stream(y, b), GPURT_SUCCESS);
            EXPECT(gpurt_free(y), GPURT_SUCCESS);
        }
    } else {
        printf("sanitizer_test: the real-kernel race skipped: the stub driver runs no kernels\n");
    }

    EXPECT(gpurt_sanitizer_enable(0), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(a), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(b), GPURT_SUCCESS);
    EXPECT(gpurt_set_log_callback(NULL, NULL), GPURT_SUCCESS);
    printf("sanitizer_test: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
