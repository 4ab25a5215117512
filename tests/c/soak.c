/* Soak: THREADS threads for SECONDS seconds of mixed calls through the C ABI, each
 * round checking its data exactly, then the allocator's and the pinned pool's
 * invariants at the end.
 *
 *   soak [SECONDS [THREADS]]      (defaults: 60 s, 8 threads)
 *
 * A round, on a pooled or a fresh stream: device buffers of random sizes allocated on
 * two streams, fresh random bytes staged through pinned memory, copied host -> A ->
 * (event, wait) -> B -> host, the second buffer used across streams with
 * gpurt_record_stream and freed on the other stream; every 8th round a graph of a
 * memset and a copy captured into a private pool and replayed twice. The bytes
 * that come back must equal the bytes sent. At the end: no allocation live, the
 * cache empties to zero reserved bytes, the pinned pool holds no used bytes. Reports
 * the calls per second and every error.
 *
 * On the stand-in driver (CI) data does not move, so the byte checks are skipped
 * and the run checks the statistics and that nothing fails or hangs. Without a
 * device it says so and exits 0, unless GPURT_REQUIRE_GPU=1.
 */
#define _GNU_SOURCE
#include <gpurt.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int real_device = 1;  /* 0 on the stand-in driver: bytes are not moved */
static double deadline;

struct worker {
    int id;
    uint64_t rng;
    long rounds, calls, errors, mismatches;
    char first_error[256];
};

static uint64_t next_random(uint64_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* Counts a call; records the first failure's message. Evaluates to nonzero on success. */
#define CALL(w, expr) call_ok((w), (expr), #expr)
static int call_ok(struct worker *w, gpurt_status_t status, const char *what) {
    w->calls++;
    if (status == GPURT_SUCCESS) return 1;
    if (w->errors++ == 0)
        snprintf(w->first_error, sizeof w->first_error, "%s: %s", what, gpurt_last_error_message());
    return 0;
}

static void fill_random(struct worker *w, unsigned char *p, size_t n) {
    size_t i;
    for (i = 0; i + 8 <= n; i += 8) {
        uint64_t r = next_random(&w->rng);
        memcpy(p + i, &r, 8);
    }
    for (; i < n; i++) p[i] = (unsigned char)next_random(&w->rng);
}

static void compare(struct worker *w, const unsigned char *got, const unsigned char *want, size_t n) {
    if (real_device && memcmp(got, want, n) != 0) w->mismatches++;
}

/* Whether the capture on `s` is still valid after `step`; names the step if not. */
static int capture_intact(struct worker *w, gpurt_stream_t s, const char *step) {
    int status = 0;
    if (gpurt_stream_capture_status(s, &status) == GPURT_SUCCESS && status == 1) return 1;
    if (w->errors++ == 0) snprintf(w->first_error, sizeof w->first_error, "capture status %d after %s", status, step);
    return 0;
}

/* Captures memset(dst, value) + copy(dst -> host) into a graph with a private pool,
 * replays it twice, and checks the host bytes. `s` is the thread's own stream: a
 * pooled stream is shared with other threads, whose work would join the capture. */
static void graph_round(struct worker *w, gpurt_stream_t s, unsigned char *host, size_t n) {
    gpurt_graph_pool_t pool = NULL;
    gpurt_graph_t graph = NULL;
    gpurt_graph_exec_t exec = NULL;
    void *scratch = NULL;
    unsigned char value = (unsigned char)(1 + next_random(&w->rng) % 254);
    int ok = CALL(w, gpurt_graph_pool_create(GPURT_CURRENT_DEVICE, &pool)) &&
             CALL(w, gpurt_stream_begin_capture(s, GPURT_CAPTURE_MODE_THREAD_LOCAL, pool));
    if (ok) {  /* the capture ends even after a failed step, so the stream stays usable */
        int captured = CALL(w, gpurt_malloc(n, s, &scratch)) && capture_intact(w, s, "gpurt_malloc") &&
                       CALL(w, gpurt_memset_async(scratch, value, 1, n, s)) &&
                       CALL(w, gpurt_memcpy_async(host, scratch, n, s)) && CALL(w, gpurt_free(scratch)) &&
                       capture_intact(w, s, "gpurt_free");
        ok = CALL(w, gpurt_stream_end_capture(s, &graph)) && captured &&
             CALL(w, gpurt_graph_instantiate(graph, 0, s, &exec));
    }
    if (ok) {
        int replay;
        for (replay = 0; replay < 2; replay++) {
            memset(host, 0, n);
            if (CALL(w, gpurt_graph_launch(exec, s)) && CALL(w, gpurt_stream_synchronize(s))) {
                size_t i;
                for (i = 0; i < n && (!real_device || host[i] == value); i++) {}
                if (i != n) w->mismatches++;
            }
        }
    }
    if (exec) CALL(w, gpurt_graph_exec_destroy(exec));
    if (graph) CALL(w, gpurt_graph_destroy(graph));
    if (pool) CALL(w, gpurt_graph_pool_destroy(pool));
}

static void round_trip(struct worker *w, gpurt_stream_t own) {
    gpurt_stream_t a = NULL, b = NULL;
    gpurt_event_t ready = NULL;
    gpurt_pinned_pool_t pinned = NULL;
    void *d1 = NULL, *d2 = NULL;
    unsigned char *up = NULL, *down = NULL;
    size_t n = 1 + (size_t)(next_random(&w->rng) % (4u << 20));
    int fresh = next_random(&w->rng) % 4 == 0;

    if (fresh) CALL(w, gpurt_stream_create(GPURT_CURRENT_DEVICE, GPURT_STREAM_NON_BLOCKING, 0, &a));
    else CALL(w, gpurt_stream_from_pool(GPURT_CURRENT_DEVICE, (int)(next_random(&w->rng) % 2), &a));
    CALL(w, gpurt_stream_from_pool(GPURT_CURRENT_DEVICE, 0, &b));
    if (!a || !b) return;
    CALL(w, gpurt_pinned_pool_default(&pinned));
    if (!CALL(w, gpurt_pinned_malloc(pinned, n, (void **)&up)) || !CALL(w, gpurt_pinned_malloc(pinned, n, (void **)&down)))
        goto out;
    fill_random(w, up, n);
    memset(down, 0, n);
    if (!CALL(w, gpurt_malloc(n, a, &d1)) || !CALL(w, gpurt_malloc(n, b, &d2))) goto out;
    CALL(w, gpurt_memcpy_async(d1, up, n, a));
    CALL(w, gpurt_pinned_record_stream(up, a));
    CALL(w, gpurt_event_pool_get(GPURT_CURRENT_DEVICE, &ready));
    CALL(w, gpurt_event_record(ready, a));
    CALL(w, gpurt_stream_wait_event(b, ready));
    CALL(w, gpurt_record_stream(d1, b));   /* d1 is read on b */
    CALL(w, gpurt_memcpy_async(d2, d1, n, b));
    CALL(w, gpurt_free(d1));               /* reuse waits for b's copy */
    d1 = NULL;
    CALL(w, gpurt_memcpy_async(down, d2, n, b));
    CALL(w, gpurt_stream_synchronize(b));
    compare(w, down, up, n);
    if (w->rounds % 8 == 0) graph_round(w, own, down, n < (1u << 20) ? n : (1u << 20));
out:
    if (ready) CALL(w, gpurt_event_destroy(ready));
    if (d1) CALL(w, gpurt_free(d1));
    if (d2) CALL(w, gpurt_free(d2));
    if (up) CALL(w, gpurt_pinned_free(up));
    if (down) CALL(w, gpurt_pinned_free(down));
    if (fresh) CALL(w, gpurt_stream_destroy(a));
}

static void *work(void *arg) {
    struct worker *w = arg;
    gpurt_stream_t own = NULL;
    CALL(w, gpurt_set_device(0));
    if (!CALL(w, gpurt_stream_create(GPURT_CURRENT_DEVICE, GPURT_STREAM_NON_BLOCKING, 0, &own))) return NULL;
    while (seconds_now() < deadline) {
        round_trip(w, own);
        w->rounds++;
    }
    /* Its own stream, not the device: a device-wide synchronisation while other
     * threads capture is refused and invalidates their captures. */
    CALL(w, gpurt_stream_synchronize(own));
    CALL(w, gpurt_stream_destroy(own));
    return NULL;
}

/* A crash prints its stack (addresses resolve with addr2line against the binaries). */
static void on_crash(int sig) {
    void *frames[64];
    int n = backtrace(frames, 64);
    dprintf(2, "soak: signal %d; stack:\n", sig);
    backtrace_symbols_fd(frames, n, 2);
    _exit(128 + sig);
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 60.0, started, elapsed;
    int threads = argc > 2 ? atoi(argv[2]) : 8, count = 0, i, failed = 0;
    long rounds = 0, calls = 0, errors = 0, mismatches = 0;
    struct worker workers[64];
    pthread_t ids[64];
    uint64_t allocated = 1, reserved = 1, used = 1, free_bytes = 0, total = 0, blocks = 0;
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_pinned_pool_t pinned = NULL;

    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        const char *require = getenv("GPURT_REQUIRE_GPU");
        printf("soak: skipped: no device (%s)\n", gpurt_last_error_message());
        return require && strcmp(require, "1") == 0 ? 1 : 0;
    }
    if (threads < 1 || threads > 64) threads = 8;
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGABRT, on_crash);
    gpurt_device_get_properties(0, &props);
    real_device = strcmp(props.name, "Fake GPU") != 0;
    printf("soak: %d threads x %.0f s on %s%s\n", threads, seconds, props.name,
           real_device ? "" : " (stand-in driver: byte checks skipped)");
    started = seconds_now();
    deadline = started + seconds;
    for (i = 0; i < threads; i++) {
        memset(&workers[i], 0, sizeof workers[i]);
        workers[i].id = i;
        workers[i].rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)time(NULL) * 2654435761u) ^ ((uint64_t)i << 32);
        pthread_create(&ids[i], NULL, work, &workers[i]);
    }
    for (i = 0; i < threads; i++) {
        pthread_join(ids[i], NULL);
        rounds += workers[i].rounds;
        calls += workers[i].calls;
        errors += workers[i].errors;
        mismatches += workers[i].mismatches;
        if (workers[i].errors) printf("soak: thread %d: %ld errors, first: %s\n", i, workers[i].errors, workers[i].first_error);
    }
    elapsed = seconds_now() - started;

    /* Final invariants, once every thread is done: nothing live, everything returnable. */
    if (gpurt_device_synchronize(0) != GPURT_SUCCESS) errors++;
    gpurt_memory_usage(0, &allocated, NULL, NULL, NULL);
    gpurt_empty_cache();
    gpurt_memory_usage(0, NULL, NULL, &reserved, NULL);
    gpurt_pinned_pool_default(&pinned);
    gpurt_pinned_pool_usage(pinned, &used, &free_bytes, &total, &blocks);
    printf("soak: %ld rounds, %ld calls in %.1f s: %.0f calls/s, %ld errors, %ld data mismatches\n", rounds, calls,
           elapsed, (double)calls / elapsed, errors, mismatches);
    printf("soak: at the end: %llu bytes allocated, %llu reserved after empty_cache, %llu pinned bytes in use\n",
           (unsigned long long)allocated, (unsigned long long)reserved, (unsigned long long)used);
    failed = errors != 0 || mismatches != 0 || allocated != 0 || reserved != 0 || used != 0 || rounds < threads;
    printf("soak: %s\n", failed ? "FAILED" : "ok");
    return failed;
}
