/* TunableOp through the C ABI: two candidates of clearly different speed (on a GPU
 * a kernel that spins and one that does not; on the stub driver, which times every
 * run alike, the first candidate wins ties). Eight threads run one new signature at
 * once: it is tuned once, the choice is written to the results file, and a second
 * process (this program again, "second") uses it without timing anything. A
 * validator's rejection, and the misuse of each call, are checked too.
 *
 * Needs a device; without one it says so and exits 0, unless GPURT_REQUIRE_GPU=1.
 */
#define _GNU_SOURCE
#include <gpurt.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

extern char **environ;

static int real = 0;
static long calls[2];
static gpurt_kernel_t kernels[2];

static const char *source =
    "extern \"C\" __global__ void spin(unsigned long long cycles, int *out) {\n"
    "    unsigned long long start = clock64();\n"
    "    while (clock64() - start < cycles) {}\n"
    "    if (threadIdx.x == 0) *out = 1;\n"
    "}\n";

/* Candidate `which`: a spin of 2 000 000 cycles (slow) or 1 000 (fast). */
static int candidate(int which, gpurt_stream_t stream) {
    __atomic_add_fetch(&calls[which], 1, __ATOMIC_RELAXED);
    if (!real) return GPURT_SUCCESS;
    {
        static int *out = NULL;
        unsigned long long cycles = which == 0 ? 2000000ull : 1000ull;
        void *args[2];
        if (out == NULL && gpurt_malloc_device(0, 4, (void **)&out) != GPURT_SUCCESS) return GPURT_ERROR_OUT_OF_MEMORY;
        args[0] = &cycles;
        args[1] = &out;
        return gpurt_launch_kernel(kernels[which], 1, 1, 1, 32, 1, 1, 0, stream, args);
    }
}

static int slow(void *args, gpurt_stream_t stream, void *context) {
    (void)args;
    (void)context;
    return candidate(0, stream);
}

static int fast(void *args, gpurt_stream_t stream, void *context) {
    (void)args;
    (void)context;
    return candidate(1, stream);
}

/* Rejects the fast candidate. */
static int reject_fast(void *args, int which, void *context) {
    (void)args;
    (void)context;
    return which == 0;
}

static gpurt_tunable_op_t make_op(void) {
    gpurt_tunable_op_t op = NULL;
    EXPECT(gpurt_tunable_op_create("spin", &op), GPURT_SUCCESS);
    EXPECT(gpurt_tunable_op_add_callback(op, "slow", slow, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_tunable_op_add_callback(op, "fast", fast, NULL), GPURT_SUCCESS);
    return op;
}

static gpurt_tunable_op_t shared_op;

static void *run_once(void *unused) {
    gpurt_stream_t stream = NULL;
    (void)unused;
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    EXPECT(gpurt_tunable_op_run(shared_op, "n=1024", NULL, stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    return NULL;
}

static const char *expected_choice(void) {
    return real ? "fast" : "slow";
}

/* The second process: the recorded choice runs, nothing is timed. */
static int second(void) {
    gpurt_tunable_op_t op = make_op();
    gpurt_stream_t stream = NULL;
    char name[32] = "?";
    uint64_t tunings = 99;
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    EXPECT(gpurt_tunable_op_run(op, "n=1024", NULL, stream), GPURT_SUCCESS);
    EXPECT(gpurt_tunable_op_choice(op, 0, "n=1024", name, sizeof name, &tunings), GPURT_SUCCESS);
    CHECK(tunings == 0, "the recorded choice is used without tuning: %llu", (unsigned long long)tunings);
    CHECK(strcmp(name, expected_choice()) == 0, "the recorded choice: %s", name);
    CHECK(calls[strcmp(expected_choice(), "fast") == 0] == 1 && calls[strcmp(expected_choice(), "fast") != 0] == 0,
          "only the chosen candidate ran, once: %ld %ld", calls[0], calls[1]);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    EXPECT(gpurt_tunable_op_destroy(op), GPURT_SUCCESS);
    printf("tunable_test (second process): %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    int count = 0, i, status = 0;
    pthread_t threads[8];
    char name[32] = "", file[256], path[256], line[512];
    uint64_t tunings = 0;
    gpurt_tunable_op_t op = NULL, empty = NULL;
    gpurt_stream_t stream = NULL;
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    const char *require = getenv("GPURT_REQUIRE_GPU");
    FILE *results;
    pid_t child;
    char *child_argv[] = {"tunable_test", "second", NULL};

    if (argc == 1) { /* the first process names the results file; the second inherits it */
        snprintf(file, sizeof file, "%s/gpurt_tunable_test_%d_%%d.csv", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
        setenv("GPURT_TUNABLEOP_FILENAME", file, 1);
        setenv("GPURT_TUNABLEOP_MAX_TUNING_ITERATIONS", "5", 1);
    }
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("tunable_test: skipped: no CUDA device (%s)\n", gpurt_last_error_message());
        return require && strcmp(require, "1") == 0 ? 1 : 0;
    }
    gpurt_device_get_properties(0, &props);
    real = strcmp(props.name, "Fake GPU") != 0;
    if (real) {
        EXPECT(gpurt_set_device(0), GPURT_SUCCESS);
        EXPECT(gpurt_rtc_get_kernel(source, "spin", NULL, 0, &kernels[0]), GPURT_SUCCESS);
        kernels[1] = kernels[0];
    }
    if (argc > 1 && strcmp(argv[1], "second") == 0) return second();
    snprintf(path, sizeof path, getenv("GPURT_TUNABLEOP_FILENAME"), 0);
    remove(path);

    /* Misuse. */
    EXPECT(gpurt_tunable_op_create(NULL, &op), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_tunable_op_create("a,b", &op), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_tunable_op_create("empty", &empty), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    EXPECT(gpurt_tunable_op_run(empty, "n=1", NULL, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_tunable_op_add_callback(empty, "x", NULL, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_tunable_op_add_callback(empty, "x", slow, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_tunable_op_add_callback(empty, "x", fast, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_tunable_op_run(empty, "bad,signature", NULL, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_tunable_op_run(empty, "n=1", NULL, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_tunable_op_run((gpurt_tunable_op_t)stream, "n=1", NULL, stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_tunable_op_destroy(empty), GPURT_SUCCESS);
    EXPECT(gpurt_tunable_op_run(empty, "n=1", NULL, stream), GPURT_ERROR_INVALID_HANDLE);
    calls[0] = calls[1] = 0;

    /* Eight threads, one new signature: one tuning. */
    shared_op = make_op();
    for (i = 0; i < 8; i++) pthread_create(&threads[i], NULL, run_once, NULL);
    for (i = 0; i < 8; i++) pthread_join(threads[i], NULL);
    EXPECT(gpurt_tunable_op_choice(shared_op, 0, "n=1024", name, sizeof name, &tunings), GPURT_SUCCESS);
    CHECK(tunings == 1, "concurrent first runs tune once: %llu", (unsigned long long)tunings);
    CHECK(strcmp(name, expected_choice()) == 0, "the faster candidate is chosen: %s", name);
    CHECK(calls[0] > 1 && calls[1] > 1, "both were timed: %ld %ld", calls[0], calls[1]);
    results = fopen(path, "r");
    CHECK(results != NULL, "the results file %s is written", path);
    if (results) {
        int validators = 0, rows = 0;
        while (fgets(line, sizeof line, results)) {
            validators += strncmp(line, "Validator,", 10) == 0;
            rows += strncmp(line, "spin,n=1024,", 12) == 0 && strstr(line, expected_choice()) != NULL;
        }
        fclose(results);
        CHECK(validators >= 4 && rows == 1, "validator lines and the choice: %d %d", validators, rows);
    }

    /* A validator that rejects the fast candidate: the slow one is chosen. */
    EXPECT(gpurt_tunable_op_set_validator(shared_op, reject_fast, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_tunable_op_run(shared_op, "n=2048", NULL, stream), GPURT_SUCCESS);
    EXPECT(gpurt_tunable_op_choice(shared_op, 0, "n=2048", name, sizeof name, NULL), GPURT_SUCCESS);
    CHECK(strcmp(name, "slow") == 0, "a rejected candidate is never chosen: %s", name);
    EXPECT(gpurt_tunable_op_choice(shared_op, 0, "n=4096", name, sizeof name, NULL), GPURT_SUCCESS);
    CHECK(name[0] == '\0', "an untuned signature has no choice");

    /* What tuning a signature costs, against a run of the chosen candidate. */
    {
        struct timespec a, b, c;
        EXPECT(gpurt_tunable_op_set_validator(shared_op, NULL, NULL), GPURT_SUCCESS);
        clock_gettime(CLOCK_MONOTONIC, &a);
        EXPECT(gpurt_tunable_op_run(shared_op, "n=8192", NULL, stream), GPURT_SUCCESS);
        EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
        clock_gettime(CLOCK_MONOTONIC, &b);
        EXPECT(gpurt_tunable_op_run(shared_op, "n=8192", NULL, stream), GPURT_SUCCESS);
        EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
        clock_gettime(CLOCK_MONOTONIC, &c);
        printf("tunable_test: tuning a signature (2 candidates, 1 ms and ~1 us) took %.1f ms; a tuned run %.3f ms\n",
               (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6, (c.tv_sec - b.tv_sec) * 1e3 + (c.tv_nsec - b.tv_nsec) / 1e6);
    }

    /* A second process reads the file. */
    CHECK(posix_spawn(&child, "/proc/self/exe", NULL, NULL, child_argv, environ) == 0, "the second process starts");
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the second process used the recorded choice");
    remove(path);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    EXPECT(gpurt_tunable_op_destroy(shared_op), GPURT_SUCCESS);
    printf("tunable_test: %d checks, %d failed (%s)\n", checks, failures, real ? props.name : "stub driver: equal timings, the first candidate wins ties");
    return failures ? 1 : 0;
}
