/* Process events through the C ABI: fork() after CUDA was initialised, exit with
 * live objects and work in flight (from main, from exit() in a thread, from a signal
 * handler). Each case runs in a child process of its own, so a crash or hang is a
 * failed case, not a dead test run. (dlclose: tests/c/dlclose_test.c.)
 *
 * Needs a device (the stub driver in CI, a GPU on the GPU machine); without one it
 * says so and exits 0, unless GPURT_REQUIRE_GPU=1.
 */
#define _GNU_SOURCE
#include <gpurt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

/* Runs `body` in a child; the child's exit status is what `body` returns. A child
 * that is still running after `seconds` is killed and counts as a hang. */
static int in_child(int (*body)(void), int seconds) {
    pid_t pid = fork();
    int status = 0, waited = 0;
    if (pid == 0) _exit(body());
    while (waitpid(pid, &status, WNOHANG) == 0) {
        struct timespec tick = {0, 10 * 1000 * 1000};
        nanosleep(&tick, NULL);
        if (++waited > seconds * 100) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -2; /* hung */
        }
    }
    if (WIFSIGNALED(status)) return -1000 - WTERMSIG(status);
    return WEXITSTATUS(status);
}

/* Live objects of every kind, with work queued: a stream with copies and a host
 * function, a cached and a live device block, a pinned block, a captured graph. */
static gpurt_stream_t make_live_objects(void) {
    gpurt_stream_t stream = NULL;
    gpurt_graph_t graph = NULL;
    gpurt_graph_exec_t exec = NULL;
    gpurt_pinned_pool_t pinned = NULL;
    void *a = NULL, *b = NULL, *host = NULL;
    if (gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream) != GPURT_SUCCESS) return NULL;
    gpurt_malloc(1 << 20, stream, &a);
    gpurt_malloc(3 << 20, stream, &b);
    gpurt_free(b);
    gpurt_pinned_pool_default(&pinned);
    gpurt_pinned_malloc(pinned, 1 << 16, &host);
    gpurt_memcpy_async(a, host, 1 << 16, stream);
    gpurt_stream_begin_capture(stream, GPURT_CAPTURE_MODE_THREAD_LOCAL, NULL);
    gpurt_memset_async(a, 7, 1, 4096, stream);
    gpurt_stream_end_capture(stream, &graph);
    gpurt_graph_instantiate(graph, 0, NULL, &exec);
    gpurt_graph_launch(exec, stream);
    return stream;
}

/* ---- fork ----------------------------------------------------------------- */

static int child_uses_gpurt_after_fork(void) {
    void *p = NULL;
    int count = -1, level_ok, ret = 0;
    gpurt_status_t s = gpurt_malloc_device(0, 1024, &p);
    if (s != GPURT_ERROR_FORKED) ret |= 1;
    if (strstr(gpurt_last_error_message(), "fork") == NULL) ret |= 2;
    if (p != NULL) ret |= 4;
    if (gpurt_device_count(&count) != GPURT_ERROR_FORKED) ret |= 8;
    if (gpurt_free(p) != GPURT_ERROR_FORKED || gpurt_empty_cache() != GPURT_ERROR_FORKED) ret |= 16;
    if (gpurt_torch_alloc(1024, 0, NULL) != NULL) ret |= 32;
    level_ok = gpurt_set_log_level(0) == GPURT_SUCCESS && strcmp(gpurt_status_string(GPURT_ERROR_FORKED), "CUDA cannot be used in a forked child") == 0;
    if (!level_ok) ret |= 64; /* calls that never reach the driver still work */
    return ret;
}

static int child_of_fresh_parent(void) {
    int count = -1;
    void *p = NULL;
    /* The parent never initialised CUDA (see main): the child may. */
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count < 1) return 1;
    if (gpurt_malloc_device(0, 4096, &p) != GPURT_SUCCESS || gpurt_free(p) != GPURT_SUCCESS) return 2;
    return 0;
}

static void check_fork(void) {
    void *p = NULL, *q = NULL;
    uint64_t before = 0, after = 0;
    int r;
    CHECK(gpurt_malloc_device(0, 5000, &p) == GPURT_SUCCESS, "%s", gpurt_last_error_message());
    CHECK(gpurt_memory_usage(0, &before, NULL, NULL, NULL) == GPURT_SUCCESS, "%s", gpurt_last_error_message());
    r = in_child(child_uses_gpurt_after_fork, 20);
    CHECK(r == 0, "the forked child's calls: result %d (bits: 1 status, 2 message, 4 pointer, 8 device_count, 16 free/empty_cache, 32 torch drop-in, 64 host-only calls; -2 hung, <= -1000 signal)", r);
    /* The parent is unaffected. */
    CHECK(gpurt_memory_usage(0, &after, NULL, NULL, NULL) == GPURT_SUCCESS && after == before, "parent's usage %llu -> %llu",
          (unsigned long long)before, (unsigned long long)after);
    CHECK(gpurt_malloc_device(0, 5000, &q) == GPURT_SUCCESS && q != p, "%s", gpurt_last_error_message());
    CHECK(gpurt_free(q) == GPURT_SUCCESS && gpurt_free(p) == GPURT_SUCCESS, "%s", gpurt_last_error_message());
}

/* ---- exit with live objects ----------------------------------------------- */

static int exit_from_main(void) {
    if (make_live_objects() == NULL) return 90;
    return 0; /* _exit in in_child; exit() runs atexit handlers: */
}

static int exit_normally(void) {
    if (make_live_objects() == NULL) return 90;
    exit(0);
}

static void *allocating_thread(void *arg) {
    gpurt_stream_t stream = (gpurt_stream_t)arg;
    for (;;) {
        void *p = NULL;
        gpurt_malloc(4096, stream, &p);
        gpurt_free(p);
    }
    return NULL;
}

static void *exiting_thread(void *arg) {
    struct timespec pause = {0, 20 * 1000 * 1000};
    (void)arg;
    nanosleep(&pause, NULL);
    exit(0);
    return NULL;
}

static int exit_from_thread_while_another_allocates(void) {
    pthread_t worker, exiter;
    gpurt_stream_t stream = make_live_objects();
    if (stream == NULL) return 90;
    pthread_create(&worker, NULL, allocating_thread, stream);
    pthread_create(&exiter, NULL, exiting_thread, NULL);
    pthread_join(worker, NULL); /* never returns: exiting_thread ends the process */
    return 91;
}

static void exit_on_signal(int sig) {
    (void)sig;
    exit(0); /* not async-signal-safe, and exactly what programs do */
}

static int exit_from_signal_handler(void) {
    if (make_live_objects() == NULL) return 90;
    signal(SIGTERM, exit_on_signal);
    raise(SIGTERM);
    return 92;
}

int main(void) {
    int r;
    const char *require = getenv("GPURT_REQUIRE_GPU");
    static const struct {
        const char *name;
        int (*body)(void);
    } exits[] = {
        {"return from main with live objects", exit_from_main},
        {"exit() with live objects and work in flight", exit_normally},
        {"exit() from a thread while another allocates", exit_from_thread_while_another_allocates},
        {"exit() from a signal handler", exit_from_signal_handler},
    };
    size_t i;
    setvbuf(stdout, NULL, _IONBF, 0);
    /* Before this process initialises CUDA: its children may use it. */
    r = in_child(child_of_fresh_parent, 20);
    if (r == 1) {
        if (require != NULL && strcmp(require, "1") == 0) {
            printf("process_test: no device, and GPURT_REQUIRE_GPU=1\n");
            return 1;
        }
        printf("process_test: skipped (no CUDA device: gpurt_init says %s)\n", gpurt_status_string(gpurt_init()));
        return 0;
    }
    CHECK(r == 0, "a child of a parent that never initialised CUDA could not use it: %d", r);
    for (i = 0; i < sizeof exits / sizeof exits[0]; i++) {
        r = in_child(exits[i].body, 20);
        CHECK(r == 0, "%s: result %d (-2: hung; <= -1000: killed by signal)", exits[i].name, r);
    }
    check_fork();
    printf("process_test: %d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
