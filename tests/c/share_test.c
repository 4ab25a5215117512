/* A share group across processes on the stand-in driver's shared device
 * (STUB_CUDA_SHARED_MEMORY: 8 GiB that the processes take from together): a member
 * that needs memory the device no longer has gets it from another member's cache,
 * which that member's gpurt thread empties on request; a member that offers nothing
 * keeps its cache and the request fails at once, its message saying what the group
 * was asked and gave; a process outside the group gets nothing; processes that join
 * through GPURT_ALLOC_CONF=share:NAME are served alike; a member that offers its
 * pools asleep gives an idle one (its next allocation wakes it, contents kept with
 * offload, or gpurt_mem_pool_touch does) and keeps one in use (allocated from, or
 * touched), and a pool's own offer overrides its device's (both ways); two processes
 * whose pools do not fit together take turns, each turn served, and destroy their
 * pools, asleep or not; a request leaves the asker's headroom free (more pools put
 * to sleep for more headroom); and the API's misuse is
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
#include <poll.h>
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

static void pause_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static void say(int fd) { CHECK(write(fd, "x", 1) == 1, "a pipe write"); }
static void hear(int fd) { char c; CHECK(read(fd, &c, 1) == 1, "a pipe read"); }

/* Set for a case whose processes join through GPURT_ALLOC_CONF=share:share-test (at
 * their first allocation or pool, offering their cache; a sleeper its pools asleep
 * with offload, idle after 100 ms) instead of gpurt_share_join. */
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

/* A sleeper, on a device of 512 MiB: offers its pools asleep (`offer`, idle after
 * 100 ms), holds 384 MiB live in a pool of its own, and lets the asker ask. Then
 * (`slept`) it finds its pool put to sleep for the asker, its bytes offloaded where it
 * offered that, and allocates from it once the asker has freed its memory: the pool
 * wakes, asking the group for the memory in turn; with `touch`, gpurt_mem_pool_touch
 * (work about to use the pool) wakes it instead; with `touch` 2 the pool is the
 * default one and asking for a cuBLAS handle, whose workspace lies there, wakes it
 * (before cuBLAS is loaded: the stand-in has none here). Or (not `slept`: its pool was in use)
 * it finds the pool awake: not idle for the group (idle after 60 s), or, with `touch`,
 * touched every 20 ms. The stand-in driver keeps no bytes: the GPU tests check
 * contents through a sleep. */
#define POOL_MIB (384ull << 20)
static int sleeper(int offer, int slept, int per_pool, int touch, int ready, int done) {
    gpurt_share_options_t options = GPURT_SHARE_OPTIONS_INIT;
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    gpurt_mem_pool_t pool = NULL;
    gpurt_stream_t stream = NULL;
    void *p = NULL, *q = NULL;
    int asleep = -1;
    /* per_pool: the device offers its cache alone (or, `offer` being NEVER, its pools
     * asleep) and the pool offers `offer` itself. */
    options.offer = !per_pool ? offer : offer == GPURT_SHARE_OFFER_NEVER ? GPURT_SHARE_OFFER_SLEEP_OFFLOAD : GPURT_SHARE_OFFER_CACHED;
    options.deadline_ms = 2000;
    options.idle_ms = slept || per_pool || touch ? 100 : 60000;
    if (!configured) EXPECT(gpurt_share_join(0, "share-test", &options), GPURT_SUCCESS);
    if (touch == 2) {
        EXPECT(gpurt_mem_pool_default(0, &pool), GPURT_SUCCESS);
    } else {
        EXPECT(gpurt_mem_pool_create(0, NULL, &pool), GPURT_SUCCESS); /* configured: joins */
    }
    if (per_pool) EXPECT(gpurt_share_pool_offer(pool, offer, 100), GPURT_SUCCESS);
    EXPECT(gpurt_current_stream(0, &stream), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(pool, POOL_MIB, stream, &p), GPURT_SUCCESS);
    pause_ms(300); /* idle past 100 ms */
    if (touch && !slept) {
        struct pollfd heard = {done, POLLIN, 0};
        EXPECT(gpurt_mem_pool_touch(pool), GPURT_SUCCESS);
        say(ready);
        while (poll(&heard, 1, 20) == 0) EXPECT(gpurt_mem_pool_touch(pool), GPURT_SUCCESS);
    } else {
        say(ready);
    }
    hear(done);
    EXPECT(gpurt_mem_pool_is_asleep(pool, &asleep), GPURT_SUCCESS);
    CHECK(asleep == slept, "the pool %s for the asker (asleep: %d)", slept ? "slept" : "stayed awake", asleep);
    EXPECT(gpurt_mem_pool_stats(pool, &stats), GPURT_SUCCESS);
    if (slept) {
        CHECK(stats.asleep_bytes >= (int64_t)POOL_MIB, "its memory given back: %lld asleep", (long long)stats.asleep_bytes);
        CHECK(stats.offloaded_bytes == (offer == GPURT_SHARE_OFFER_SLEEP_OFFLOAD ? (int64_t)POOL_MIB : 0), "%lld bytes offloaded",
              (long long)stats.offloaded_bytes);
    }
    if (touch == 2) {
        void *handle = NULL;
        int status = gpurt_blas_handle(stream, &handle);
        CHECK(status == GPURT_SUCCESS || status == GPURT_ERROR_NOT_SUPPORTED, "gpurt_blas_handle: %d", status);
    } else if (touch) {
        EXPECT(gpurt_mem_pool_touch(pool), GPURT_SUCCESS);
    }
    EXPECT(gpurt_mem_pool_is_asleep(pool, &asleep), GPURT_SUCCESS);
    CHECK(asleep == 0 || !touch, "awake after the touch");
    EXPECT(gpurt_mem_pool_malloc(pool, 4096, stream, &q), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_is_asleep(pool, &asleep), GPURT_SUCCESS);
    CHECK(asleep == 0, "awake after its next allocation");
    CHECK(reserved() >= POOL_MIB, "its memory mapped again: %llu reserved", (unsigned long long)reserved());
    EXPECT(gpurt_free(q), GPURT_SUCCESS);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    if (touch != 2) EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
    EXPECT(gpurt_share_leave(0), GPURT_SUCCESS);
    return failures != 0;
}

/* The sleeper's asker: asks for 256 MiB (128 are free), is served from the sleeping
 * pool or refused, then frees its memory into its cache, for the sleeper's wake to
 * ask for. */
static int sleepers_asker(int served, int ready, int done) {
    void *p = NULL;
    int status;
    EXPECT(join(GPURT_SHARE_OFFER_CACHED), GPURT_SUCCESS);
    hear(ready);
    status = gpurt_malloc_device(0, 256ull << 20, &p);
    if (served) {
        CHECK(status == GPURT_SUCCESS, "256 MiB from the sleeper's pool put to sleep (status %d: %s)", status, gpurt_last_error_message());
        EXPECT(gpurt_free(p), GPURT_SUCCESS);
    } else {
        CHECK(status == GPURT_ERROR_OUT_OF_MEMORY, "refused: the sleeper's pool was in use (status %d)", status);
        CHECK(strstr(gpurt_last_error_message(), "gave back 0 B") != NULL, "the message says so: %s", gpurt_last_error_message());
    }
    say(done);
    /* Served until the sleeper's wake has asked for this cache. */
    pause_ms(1500);
    EXPECT(gpurt_share_leave(0), GPURT_SUCCESS);
    return failures != 0;
}

/* A case: two fresh processes on a fresh shared device (of `capacity` bytes; NULL: 8
 * GiB), a holder of memory and an asker. */
typedef struct {
    const char *name;
    int offer;         /* the holder's */
    int served;        /* the asker is served */
    int outside;       /* the asker is in no group */
    int sleeping;      /* the holder is a sleeper (its pool asleep on request); 2: offered per pool */
    const char *capacity;
    int touch;         /* the sleeper touches its pool (gpurt_mem_pool_touch); 2: the default pool, through gpurt_blas_handle */
} Case;

/* Runs `c`; the number of its processes that failed. */
static int run_case(const char *dir, Case c) {
    char device[4096];
    int ready[2], done[2], bad = 0, status, i;
    pid_t pids[2];
    snprintf(device, sizeof device, "%s/device-%s", dir, c.name);
    unlink(device);
    setenv("STUB_CUDA_SHARED_MEMORY", device, 1);
    if (c.capacity) setenv("STUB_CUDA_SHARED_CAPACITY", c.capacity, 1);
    if (pipe(ready) != 0 || pipe(done) != 0) return 2;
    fflush(stdout);
    for (i = 0; i < 2; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            int failed;
            if (configured) {
                setenv("GPURT_ALLOC_CONF", c.sleeping ? "share:share-test,share_offer:sleep-offload,share_idle_ms:100" : "share:share-test", 1);
            }
            if (c.sleeping) {
                failed = i == 0 ? sleeper(c.offer, c.served, c.sleeping == 2, c.touch, ready[1], done[0]) : sleepers_asker(c.served, ready[0], done[1]);
            } else {
                failed = i == 0 ? holder(c.offer, c.served, ready[1], done[0]) : asker(c.served, c.outside, ready[0], done[1]);
            }
            fflush(stdout);
            _exit(failed);
        }
    }
    for (i = 0; i < 2; i++) {
        waitpid(pids[i], &status, 0);
        bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    unsetenv("STUB_CUDA_SHARED_CAPACITY");
    close(ready[0]); close(ready[1]); close(done[0]); close(done[1]);
    printf("%s: %s\n", c.name, bad ? "FAILED" : "ok");
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

/* A taker of `turns`: holds 384 MiB in a pool it offers asleep with offload (idle after
 * 20 ms), on a device of 512 MiB that holds one such pool; at each "go" it touches its
 * pool, as an engine does before each step, until the touch succeeds (the other's pool
 * put to sleep for it once idle), and answers with the milliseconds it took. */
static int taker(int first, int up, int down) {
    gpurt_share_options_t options = GPURT_SHARE_OPTIONS_INIT;
    gpurt_mem_pool_t pool = NULL;
    gpurt_stream_t stream = NULL;
    void *p = NULL;
    char go;
    options.offer = GPURT_SHARE_OFFER_SLEEP_OFFLOAD;
    options.idle_ms = 20;
    options.deadline_ms = 2000;
    EXPECT(gpurt_share_join(0, "share-test", &options), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_create(0, NULL, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_current_stream(0, &stream), GPURT_SUCCESS);
    if (!first) hear(down); /* the first one's pool is made */
    for (double start = now_ms(); gpurt_mem_pool_malloc(pool, POOL_MIB, stream, &p) != GPURT_SUCCESS && now_ms() - start < 5000;) pause_ms(5);
    CHECK(p != NULL, "the pool's 384 MiB, the other's put to sleep for it");
    say(up);
    while (read(down, &go, 1) == 1 && go == 'g') {
        double start = now_ms();
        int status, asleep = -1, ms;
        while ((status = gpurt_mem_pool_touch(pool)) == GPURT_ERROR_OUT_OF_MEMORY && now_ms() - start < 5000) pause_ms(5);
        EXPECT(status, GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_is_asleep(pool, &asleep), GPURT_SUCCESS);
        CHECK(asleep == 0, "awake for its turn");
        ms = (int)(now_ms() - start);
        CHECK(write(up, &ms, sizeof ms) == sizeof ms, "a pipe write");
    }
    /* The pool may be asleep for the other: freed and destroyed all the same, without
     * the memory a wake would need. */
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
    EXPECT(gpurt_share_leave(0), GPURT_SUCCESS);
    return failures != 0;
}

/* Two processes whose pools do not fit the device together take `rounds` turns each,
 * as two servers in a group do: every turn is served, and the switches' median time
 * (the idle period, the watch's period and the asking: the stand-in copies nothing) is
 * printed. */
static int turns(const char *dir, int rounds) {
    char device[4096];
    int up[2], down[2][2], bad = 0, status, ms, served = 0;
    int took[2 * 64];
    pid_t pids[2];
    snprintf(device, sizeof device, "%s/device-turns", dir);
    unlink(device);
    setenv("STUB_CUDA_SHARED_MEMORY", device, 1);
    setenv("STUB_CUDA_SHARED_CAPACITY", "536870912", 1);
    if (pipe(up) != 0 || pipe(down[0]) != 0 || pipe(down[1]) != 0) return 1;
    fflush(stdout);
    for (int i = 0; i < 2; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            int failed = taker(i == 0, up[1], down[i][0]);
            fflush(stdout);
            _exit(failed);
        }
        hear(up[0]); /* it holds its pool */
        if (i == 0) say(down[1][1]);
    }
    alarm(120);
    for (int round = 0; round < rounds && round < 64 && !bad; round++) {
        for (int i = 0; i < 2; i++) {
            CHECK(write(down[i][1], "g", 1) == 1, "a pipe write");
            if (read(up[0], &ms, sizeof ms) != sizeof ms) bad = 1;
            else took[served++] = ms;
        }
    }
    alarm(0);
    for (int i = 0; i < 2; i++) CHECK(write(down[i][1], "q", 1) == 1, "a pipe write");
    for (int i = 0; i < 2; i++) {
        waitpid(pids[i], &status, 0);
        bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    unsetenv("STUB_CUDA_SHARED_CAPACITY");
    for (int i = 1; i < served; i++) { /* insertion sort, for the median */
        int v = took[i], j = i - 1;
        for (; j >= 0 && took[j] > v; j--) took[j + 1] = took[j];
        took[j + 1] = v;
    }
    printf("turns: %d of %d turns served, a switch took %d ms (median; max %d): %s\n", served, 2 * rounds,
           served ? took[served / 2] : -1, served ? took[served - 1] : -1, bad || served != 2 * rounds ? "FAILED" : "ok");
    close(up[0]); close(up[1]);
    for (int i = 0; i < 2; i++) { close(down[i][0]); close(down[i][1]); }
    return bad || served != 2 * rounds;
}

/* Headroom, on a device of 1 GiB: a member holds two idle pools of 384 MiB (256 MiB
 * free), offered asleep; another asks for 384 MiB with `headroom_mib` beside it. The
 * group gives until the device has both free: with 512 MiB of headroom both pools
 * sleep (one would leave 640 MiB free, short of 896), with 1 MiB one does. */
static int headroom_holder(int ready, int done, int expect_asleep) {
    gpurt_share_options_t options = GPURT_SHARE_OPTIONS_INIT;
    gpurt_mem_pool_t pools[2] = {NULL, NULL};
    gpurt_stream_t stream = NULL;
    void *p[2] = {NULL, NULL};
    int asleep = 0;
    options.offer = GPURT_SHARE_OFFER_SLEEP_DISCARD;
    options.idle_ms = 100;
    options.deadline_ms = 2000;
    EXPECT(gpurt_share_join(0, "share-test", &options), GPURT_SUCCESS);
    EXPECT(gpurt_current_stream(0, &stream), GPURT_SUCCESS);
    for (int i = 0; i < 2; i++) {
        EXPECT(gpurt_mem_pool_create(0, NULL, &pools[i]), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_malloc(pools[i], POOL_MIB, stream, &p[i]), GPURT_SUCCESS);
    }
    pause_ms(300); /* idle past 100 ms */
    say(ready);
    hear(done);
    for (int i = 0; i < 2; i++) {
        int one = -1;
        EXPECT(gpurt_mem_pool_is_asleep(pools[i], &one), GPURT_SUCCESS);
        asleep += one == 1;
    }
    CHECK(asleep == expect_asleep, "%d of the 2 pools put to sleep for the asker, %d expected", asleep, expect_asleep);
    for (int i = 0; i < 2; i++) {
        EXPECT(gpurt_free(p[i]), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_destroy(pools[i]), GPURT_SUCCESS);
    }
    EXPECT(gpurt_share_leave(0), GPURT_SUCCESS);
    return failures != 0;
}

static int headroom_asker(int ready, int done, unsigned headroom_mib) {
    gpurt_share_options_t options = GPURT_SHARE_OPTIONS_INIT;
    void *p = NULL;
    options.deadline_ms = 2000;
    options.headroom_mib = headroom_mib;
    EXPECT(gpurt_share_join(0, "share-test", &options), GPURT_SUCCESS);
    hear(ready);
    int status = gpurt_malloc_device(0, POOL_MIB, &p);
    CHECK(status == GPURT_SUCCESS, "384 MiB with %u MiB of headroom (status %d: %s)", headroom_mib, status, gpurt_last_error_message());
    say(done);
    if (p) EXPECT(gpurt_free(p), GPURT_SUCCESS);
    EXPECT(gpurt_share_leave(0), GPURT_SUCCESS);
    return failures != 0;
}

static int headroom(const char *dir, unsigned headroom_mib, int expect_asleep) {
    char device[4096];
    int ready[2], done[2], bad = 0, status;
    pid_t pids[2];
    snprintf(device, sizeof device, "%s/device-headroom-%u", dir, headroom_mib);
    unlink(device);
    setenv("STUB_CUDA_SHARED_MEMORY", device, 1);
    setenv("STUB_CUDA_SHARED_CAPACITY", "1073741824", 1);
    if (pipe(ready) != 0 || pipe(done) != 0) return 1;
    fflush(stdout);
    for (int i = 0; i < 2; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            int failed = i == 0 ? headroom_holder(ready[1], done[0], expect_asleep) : headroom_asker(ready[0], done[1], headroom_mib);
            fflush(stdout);
            _exit(failed);
        }
    }
    for (int i = 0; i < 2; i++) {
        waitpid(pids[i], &status, 0);
        bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    unsetenv("STUB_CUDA_SHARED_CAPACITY");
    close(ready[0]); close(ready[1]); close(done[0]); close(done[1]);
    printf("headroom %u MiB: %s\n", headroom_mib, bad ? "FAILED" : "ok");
    return bad;
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
        pool_options.config = "share_offer:never";
        EXPECT(gpurt_mem_pool_create(0, &pool_options, &pool), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_alloc_set_config("share_offer:sometimes"), GPURT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(gpurt_last_error_message(), "expected never, cached, sleep-discard or sleep-offload") != NULL, "%s", gpurt_last_error_message());
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
        /* Per-pool offers: a pool of a device in a group, a known offer, no graph pool. */
        EXPECT(gpurt_mem_pool_create(0, NULL, &pool), GPURT_SUCCESS);
        EXPECT(gpurt_share_pool_offer(NULL, GPURT_SHARE_OFFER_NEVER, 0), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_mem_pool_touch(NULL), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_mem_pool_touch(pool), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_DISCARD), GPURT_SUCCESS); /* the owner's sleep: a touch is refused */
        EXPECT(gpurt_mem_pool_touch(pool), GPURT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(gpurt_last_error_message(), "asleep: wake it") != NULL, "%s", gpurt_last_error_message());
        EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
        EXPECT(gpurt_share_pool_offer(pool, 42, 0), GPURT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(gpurt_last_error_message(), "offer 42 is not a GPURT_SHARE_OFFER_* value") != NULL, "%s", gpurt_last_error_message());
        {
            gpurt_graph_pool_t graphs = NULL;
            EXPECT(gpurt_graph_pool_create(0, &graphs), GPURT_SUCCESS);
            EXPECT(gpurt_share_pool_offer(graphs, GPURT_SHARE_OFFER_NEVER, 0), GPURT_ERROR_INVALID_ARGUMENT);
            EXPECT(gpurt_graph_pool_destroy(graphs), GPURT_SUCCESS);
        }
        EXPECT(gpurt_share_pool_offer(pool, GPURT_SHARE_OFFER_SLEEP_DISCARD, 500), GPURT_SUCCESS);
        EXPECT(gpurt_share_pool_offer(pool, GPURT_SHARE_OFFER_NEVER, 0), GPURT_SUCCESS); /* replaces */
        EXPECT(gpurt_share_leave(0), GPURT_SUCCESS);
        EXPECT(gpurt_share_pool_offer(pool, GPURT_SHARE_OFFER_CACHED, 0), GPURT_ERROR_INVALID_ARGUMENT); /* in no group */
        CHECK(strstr(gpurt_last_error_message(), "in no share group") != NULL, "%s", gpurt_last_error_message());
        EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_touch(pool), GPURT_ERROR_INVALID_HANDLE); /* destroyed */
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
    bad += run_case(argv[1], (Case){"cached", GPURT_SHARE_OFFER_CACHED, 1, 0, 0, NULL, 0});
    bad += run_case(argv[1], (Case){"never", GPURT_SHARE_OFFER_NEVER, 0, 0, 0, NULL, 0});
    bad += run_case(argv[1], (Case){"outside", GPURT_SHARE_OFFER_CACHED, 0, 1, 0, NULL, 0});
    configured = 1;
    bad += run_case(argv[1], (Case){"configured", GPURT_SHARE_OFFER_CACHED, 1, 0, 0, NULL, 0});
    bad += run_case(argv[1], (Case){"configured-asleep", GPURT_SHARE_OFFER_SLEEP_OFFLOAD, 1, 0, 1, "536870912", 1});
    configured = 0;
    bad += run_case(argv[1], (Case){"asleep-offload", GPURT_SHARE_OFFER_SLEEP_OFFLOAD, 1, 0, 1, "536870912", 0});
    bad += run_case(argv[1], (Case){"asleep-discard", GPURT_SHARE_OFFER_SLEEP_DISCARD, 1, 0, 1, "536870912", 0});
    bad += run_case(argv[1], (Case){"asleep-busy", GPURT_SHARE_OFFER_SLEEP_OFFLOAD, 0, 0, 1, "536870912", 0});
    bad += run_case(argv[1], (Case){"asleep-touch", GPURT_SHARE_OFFER_SLEEP_OFFLOAD, 1, 0, 1, "536870912", 1});
    bad += run_case(argv[1], (Case){"asleep-touched-busy", GPURT_SHARE_OFFER_SLEEP_OFFLOAD, 0, 0, 1, "536870912", 1});
    bad += run_case(argv[1], (Case){"asleep-default-blas", GPURT_SHARE_OFFER_SLEEP_OFFLOAD, 1, 0, 1, "536870912", 2});
    bad += run_case(argv[1], (Case){"asleep-pool-offer", GPURT_SHARE_OFFER_SLEEP_OFFLOAD, 1, 0, 2, "536870912", 0});
    bad += run_case(argv[1], (Case){"asleep-pool-never", GPURT_SHARE_OFFER_NEVER, 0, 0, 2, "536870912", 0});
    bad += headroom(argv[1], 512, 2);
    bad += headroom(argv[1], 1, 1);
    bad += turns(argv[1], 20);
    bad += mutual(argv[1], 2, 1000);
    bad += mutual(argv[1], 3, 1000);
    bad += misuse(argv[1]);
    printf("share test: %s\n", bad ? "FAILED" : "passed");
    return bad != 0;
}
