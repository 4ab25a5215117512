/* A share group across processes on the stand-in driver's shared device
 * (STUB_CUDA_SHARED_MEMORY: 8 GiB that the processes take from together): a member
 * that needs memory the device no longer has gets it from another member's cache,
 * which that member's gpurt thread empties on request; a member that offers nothing
 * keeps its cache and the request fails at once, its message saying what the group
 * was asked and gave; a process outside the group gets nothing; processes that join
 * through GPURT_ALLOC_CONF=share:NAME are served alike; and the API's misuse is
 * refused (a configured group that cannot be joined fails the allocation). Each case runs in two fresh processes, a
 * holder (6 GiB cached) and an asker (4 GiB wanted), synchronised through pipes.
 * usage: share_test DIR (for the group and the device's file) */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define GIB (1ull << 30)

static uint64_t reserved(void) {
    uint64_t bytes = 0;
    EXPECT(gpurt_memory_usage(0, NULL, NULL, &bytes, NULL), GPURT_SUCCESS);
    return bytes;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void say(int fd) { CHECK(write(fd, "x", 1) == 1, "a pipe write"); }
static void hear(int fd) { char c; CHECK(read(fd, &c, 1) == 1, "a pipe read"); }

/* Set for a case whose processes join through GPURT_ALLOC_CONF=share:share-test (at
 * their first allocation, offering their cache) instead of gpurt_share_join. */
static int configured;

static int join(int offer) {
    gpurt_share_options_t options = GPURT_SHARE_OPTIONS_INIT;
    if (configured) return GPURT_SUCCESS;
    options.offer = offer;
    options.deadline_ms = 2000;
    return gpurt_share_join(0, "share-test", &options);
}

/* The holder: joins with `offer`, leaves 6 GiB in its cache, lets the asker ask, then
 * checks that it gave its cache (`given`) or kept it. */
static int holder(int offer, int given, int ready, int done) {
    void *p = NULL;
    EXPECT(join(offer), GPURT_SUCCESS);
    EXPECT(gpurt_malloc_device(0, 6 * GIB, &p), GPURT_SUCCESS);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    CHECK(reserved() == 6 * GIB, "6 GiB cached, %llu reserved", (unsigned long long)reserved());
    say(ready);
    hear(done);
    if (given) {
        CHECK(reserved() == 0, "the cache given to the asker: %llu reserved", (unsigned long long)reserved());
    } else {
        CHECK(reserved() == 6 * GIB, "the cache kept: %llu reserved", (unsigned long long)reserved());
    }
    EXPECT(gpurt_share_leave(0), GPURT_SUCCESS);
    return failures != 0;
}

/* The asker: joins (unless `outside`), waits for the holder's cache, asks for 4 GiB. */
static int asker(int expect_served, int outside, int ready, int done) {
    void *p = NULL;
    double start;
    int status;
    if (!outside) EXPECT(join(GPURT_SHARE_OFFER_CACHED), GPURT_SUCCESS);
    hear(ready);
    start = now_ms();
    status = gpurt_malloc_device(0, 4 * GIB, &p);
    if (expect_served) {
        CHECK(status == GPURT_SUCCESS, "4 GiB from the holder's cache (status %d)", status);
        CHECK(reserved() == 4 * GIB, "%llu reserved", (unsigned long long)reserved());
        EXPECT(gpurt_free(p), GPURT_SUCCESS);
    } else {
        const char *message = gpurt_last_error_message();
        CHECK(status == GPURT_ERROR_OUT_OF_MEMORY, "refused as before the group (status %d)", status);
        CHECK(now_ms() - start < 1000, "refused without waiting for the deadline: %.0f ms", now_ms() - start);
        if (outside) {
            CHECK(strstr(message, "share group") == NULL, "outside the group, no group in the message: %s", message);
        } else {
            CHECK(strstr(message, "share group \"share-test\" asked for 4.00 GiB: no other member offers memory") != NULL,
                  "the message says what the group was asked and gave: %s", message);
        }
    }
    say(done);
    if (!outside) EXPECT(gpurt_share_leave(0), GPURT_SUCCESS);
    return failures != 0;
}

/* Runs one case in two fresh processes on a fresh shared device; the number of them
 * that failed. */
static int run_case(const char *dir, const char *name, int offer, int expect_served, int outside) {
    char device[4096];
    int ready[2], done[2], bad = 0, status, i;
    pid_t pids[2];
    snprintf(device, sizeof device, "%s/device-%s", dir, name);
    unlink(device);
    setenv("STUB_CUDA_SHARED_MEMORY", device, 1);
    if (pipe(ready) != 0 || pipe(done) != 0) return 2;
    fflush(stdout);
    for (i = 0; i < 2; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            if (configured) setenv("GPURT_ALLOC_CONF", "share:share-test", 1);
            int failed = i == 0 ? holder(offer, expect_served, ready[1], done[0]) : asker(expect_served, outside, ready[0], done[1]);
            fflush(stdout);
            _exit(failed);
        }
    }
    for (i = 0; i < 2; i++) {
        waitpid(pids[i], &status, 0);
        bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    close(ready[0]); close(ready[1]); close(done[0]); close(done[1]);
    printf("%s: %s\n", name, bad ? "FAILED" : "ok");
    return bad;
}

/* A contender of `mutual`: each round it caches `cached` GiB, waits for the others,
 * asks for `wanted` GiB (more than the device's free memory and its own cache: every
 * contender asks the others at once), says whether it got it, frees everything once
 * all have tried, and waits again. */
static int contender(int rounds, uint64_t cached, uint64_t wanted, int up, int down) {
    EXPECT(join(GPURT_SHARE_OFFER_CACHED), GPURT_SUCCESS);
    for (int round = 0; round < rounds && failures == 0; round++) {
        void *p = NULL;
        int status;
        EXPECT(gpurt_malloc_device(0, cached * GIB, &p), GPURT_SUCCESS);
        EXPECT(gpurt_free(p), GPURT_SUCCESS);
        say(up);
        hear(down);
        status = gpurt_malloc_device(0, wanted * GIB, &p);
        CHECK(status == GPURT_SUCCESS || status == GPURT_ERROR_OUT_OF_MEMORY, "round %d: status %d", round, status);
        CHECK(write(up, status == GPURT_SUCCESS ? "s" : "f", 1) == 1, "a pipe write");
        hear(down);
        if (status == GPURT_SUCCESS) EXPECT(gpurt_free(p), GPURT_SUCCESS);
        EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
        say(up);
        hear(down);
    }
    EXPECT(gpurt_share_leave(0), GPURT_SUCCESS);
    return failures != 0;
}

/* `n` members that all ask each other at once, `rounds` times: no round hangs (the
 * parent's alarm), each request is served or refused as out of memory, and at most one
 * is served (the device holds one). Usually exactly one is (the last to retry finds
 * every other cache given back), but not always: a growth that fails maps and unmaps
 * its pages one by one, and a member retrying meanwhile finds them taken; the count is
 * printed. */
static int mutual(const char *dir, int n, int rounds) {
    char device[4096], outcome[8];
    int up[2], down[8][2], bad = 0, status, served_once = 0, served_more = 0;
    /* 6 GiB cached among them; each wants more than the free 2 GiB and its own cache, and more than half the device */
    uint64_t cached = 6 / (uint64_t)n, wanted = cached + 3;
    pid_t pids[8];
    double start = now_ms();
    snprintf(device, sizeof device, "%s/device-mutual-%d", dir, n);
    unlink(device);
    setenv("STUB_CUDA_SHARED_MEMORY", device, 1);
    if (pipe(up) != 0) return 1;
    for (int i = 0; i < n; i++) {
        if (pipe(down[i]) != 0) return 1;
    }
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] == 0) _exit(contender(rounds, cached, wanted, up[1], down[i][0]));
    }
    alarm(120); /* a hang fails the test instead of stalling it */
    for (int round = 0; round < rounds && !bad; round++) {
        for (int phase = 0; phase < 3; phase++) {
            int served = 0;
            for (int i = 0; i < n; i++) {
                if (read(up[0], outcome, 1) != 1) bad = 1;
                served += outcome[0] == 's';
            }
            if (phase == 1) {
                served_once += served == 1;
                served_more += served > 1;
            }
            for (int i = 0; i < n; i++) CHECK(write(down[i][1], "x", 1) == 1, "a pipe write");
        }
    }
    alarm(0);
    for (int i = 0; i < n; i++) {
        waitpid(pids[i], &status, 0);
        bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    CHECK(served_more == 0, "%d members: more than one served in %d rounds", n, served_more);
    printf("mutual, %d members: %d rounds of all asking each other at once in %.0f ms, none hung, one served in %d, none in %d: %s\n", n,
           rounds, now_ms() - start, served_once, rounds - served_once, bad || served_more ? "FAILED" : "ok");
    close(up[0]); close(up[1]);
    for (int i = 0; i < n; i++) { close(down[i][0]); close(down[i][1]); }
    return bad || served_more != 0;
}

/* The API's refusals, in a process of its own. */
static int misuse(const char *dir) {
    pid_t pid;
    int status;
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        gpurt_share_options_t options = GPURT_SHARE_OPTIONS_INIT;
        char device[4096];
        gpurt_mem_pool_options_t pool_options = GPURT_MEM_POOL_OPTIONS_INIT;
        checks = failures = 0; /* this process's own */
        gpurt_mem_pool_t pool = NULL;
        void *p = NULL;
        snprintf(device, sizeof device, "%s/device-misuse", dir);
        setenv("STUB_CUDA_SHARED_MEMORY", device, 1);
        /* A group the configuration names that cannot be joined fails the allocation, naming it; then none. */
        setenv("GPURT_ALLOC_CONF", "share:.hidden", 1);
        EXPECT(gpurt_malloc_device(0, 1 << 20, &p), GPURT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(gpurt_last_error_message(), "share:.hidden: device 0 could not join") != NULL, "%s", gpurt_last_error_message());
        EXPECT(gpurt_alloc_set_config(""), GPURT_SUCCESS);
        EXPECT(gpurt_malloc_device(0, 1 << 20, &p), GPURT_SUCCESS);
        EXPECT(gpurt_free(p), GPURT_SUCCESS);
        pool_options.config = "share:pool";
        EXPECT(gpurt_mem_pool_create(0, &pool_options, &pool), GPURT_ERROR_INVALID_ARGUMENT); /* the process's option */
        EXPECT(gpurt_share_leave(0), GPURT_ERROR_INVALID_ARGUMENT);           /* in no group */
        EXPECT(gpurt_share_join(0, NULL, NULL), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_share_join(0, "../escape", NULL), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_share_join(7, "misuse", NULL), GPURT_ERROR_INVALID_ARGUMENT); /* no such device */
        options.offer = 42;
        EXPECT(gpurt_share_join(0, "misuse", &options), GPURT_ERROR_INVALID_ARGUMENT);
        options.struct_size = 0;
        EXPECT(gpurt_share_join(0, "misuse", &options), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_share_join(0, "misuse", NULL), GPURT_SUCCESS);          /* the defaults */
        EXPECT(gpurt_share_join(0, "other", NULL), GPURT_ERROR_INVALID_ARGUMENT); /* in a group already */
        EXPECT(gpurt_share_leave(GPURT_CURRENT_DEVICE), GPURT_SUCCESS);
        EXPECT(gpurt_share_join(0, "other", NULL), GPURT_SUCCESS);           /* left: may join again */
        EXPECT(gpurt_share_leave(0), GPURT_SUCCESS);
        printf("misuse: %d checks, %d failures\n", checks, failures);
        fflush(stdout);
        _exit(failures != 0);
    }
    waitpid(pid, &status, 0);
    return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

int main(int argc, char **argv) {
    int bad = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: share_test DIR\n");
        return 2;
    }
    setenv("GPURT_SHARE_DIR", argv[1], 1);
    bad += run_case(argv[1], "cached", GPURT_SHARE_OFFER_CACHED, 1, 0);
    bad += run_case(argv[1], "never", GPURT_SHARE_OFFER_NEVER, 0, 0);
    bad += run_case(argv[1], "outside", GPURT_SHARE_OFFER_CACHED, 0, 1);
    configured = 1;
    bad += run_case(argv[1], "configured", GPURT_SHARE_OFFER_CACHED, 1, 0);
    configured = 0;
    bad += mutual(argv[1], 2, 1000);
    bad += mutual(argv[1], 3, 1000);
    bad += misuse(argv[1]);
    printf("share test: %s\n", bad ? "FAILED" : "passed");
    return bad != 0;
}
