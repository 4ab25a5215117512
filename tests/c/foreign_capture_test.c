/* Captures begun outside gpurt (cuStreamBeginCapture on a gpurt stream's native
 * handle, as PyTorch's torch.cuda.graph, CuPy's graphs and C++ engines do): their
 * gpurt allocations come from a private pool of the capture, or from the graph pool
 * bound to the thread (gpurt_graph_pool_bind_thread), never from the shared cache;
 * the memory stays the graph's until the driver destroys the graph and every exec
 * made from it, and goes back after. With whole segments and with expandable ones.
 *
 * The regression this guards: a 1 MiB block taken inside such a capture and freed
 * inside it (as PyTorch frees a capture's temporaries) was handed out again by
 * gpurt_malloc after the capture while the graph, whose replays write it, still lived.
 *
 * On the GPU it also replays: a kernel captured into the graph writes fresh random
 * words into capture-time memory, eager work reuses other memory meanwhile, and every
 * replay's bytes are checked. Needs a device (the stub driver in CI); without one it
 * says so and exits 0, unless GPURT_REQUIRE_GPU=1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <gpurt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

typedef int (*begin_capture_fn)(void *stream, int mode);
typedef int (*end_capture_fn)(void *stream, void **graph);
typedef int (*graph_fn)(void *graph);
typedef int (*instantiate_fn)(void **exec, void *graph, unsigned long long flags);
typedef int (*launch_fn)(void *exec, void *stream);
typedef void (*fail_nth_fn)(const char *name, long n);
typedef void (*live_fn)(long *device, long *host, long *streams, long *events);
typedef long (*count_fn)(void);

static begin_capture_fn begin_capture;
static end_capture_fn end_capture;
static graph_fn graph_destroy, exec_destroy;
static instantiate_fn instantiate;
static launch_fn launch;
/* The stand-in driver's accounting, where it is the driver (NULL on a GPU). */
static fail_nth_fn stub_fail_nth;
static live_fn stub_live;
static count_fn stub_user_objects;
static count_fn stub_stream_syncs;

static void *sym(void *lib, const char *name) {
    return lib ? dlsym(lib, name) : NULL;
}

/* Whether [a, a+an) and [b, b+bn) overlap. */
static int overlap(void *a, size_t an, void *b, size_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bn && y < x + an;
}

static size_t reserved(void) {
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    gpurt_memory_stats(0, &stats);
    return (size_t)stats.reserved_bytes.all.current;
}

/* gpurt's reserved bytes once back at `expected`, or after 5 s. The driver runs a
 * graph's user-object destructor on a thread of its own once the graph, its execs and
 * their launches are gone, and nothing waits for it (CU_USER_OBJECT_NO_DESTRUCTOR_SYNC):
 * a stream synchronisation does not mean it ran. gpurt gives the pool back at its next
 * collection after it ran (empty_cache here). */
static size_t reserved_settled(size_t expected) {
    const struct timespec millisecond = {0, 1000000};
    for (int i = 0; i < 5000 && reserved() != expected; i++) {
        nanosleep(&millisecond, NULL);
        gpurt_empty_cache();
    }
    return reserved();
}

static long live_device_bytes(void) {
    long device = 0, host, streams, events;
    if (stub_live) stub_live(&device, &host, &streams, &events);
    return device;
}

/* A fresh random 32-bit word. */
static unsigned word(void) {
    return ((unsigned)rand() << 16) ^ (unsigned)rand();
}

/* Whether all `size` bytes at device address `p` hold `value` (on a GPU; the stand-in
 * driver moves no bytes, so there it says yes). */
static int holds(void *p, size_t size, unsigned value, gpurt_stream_t stream) {
    if (stub_live) return 1;
    unsigned *host = malloc(size);
    int all = host && gpurt_memcpy(host, p, size, stream) == GPURT_SUCCESS;
    for (size_t i = 0; all && i < size / 4; i++) all = host[i] == value;
    free(host);
    return all;
}

/* Captures on `native`, allocating `n` blocks of `size`, each set to `value` by a
 * captured memset (and freed inside the capture when `free_inside`), and gives the
 * graph; the blocks' addresses go to `blocks`. */
static void *capture_set(void *native, int mode, size_t size, int n, int free_inside, gpurt_stream_t stream, void **blocks, unsigned value) {
    void *graph = NULL;
    CHECK(begin_capture(native, mode) == 0, "capture begun");
    for (int i = 0; i < n; i++) {
        blocks[i] = NULL;
        EXPECT(gpurt_malloc(size, stream, &blocks[i]), GPURT_SUCCESS);
        EXPECT(gpurt_memset_async(blocks[i], value, 4, size / 4, stream), GPURT_SUCCESS);
        if (free_inside) EXPECT(gpurt_free(blocks[i]), GPURT_SUCCESS);
    }
    CHECK(end_capture(native, &graph) == 0 && graph != NULL, "the capture ended with a graph");
    return graph;
}

static void *capture(void *native, int mode, size_t size, int n, int free_inside, gpurt_stream_t stream, void **blocks) {
    return capture_set(native, mode, size, n, free_inside, stream, blocks, word());
}

static void the_graphs_memory_is_not_handed_out(const char *config, gpurt_stream_t stream, void *native) {
    void *inside[2], *after = NULL, *again = NULL, *exec = NULL;
    const size_t mib = 1u << 20;
    long device_before = live_device_bytes();
    size_t reserved_before = reserved();
    unsigned graphs = word(), eager = word() ^ 1;
    void *cached = NULL;
    EXPECT(gpurt_malloc(mib, stream, &cached), GPURT_SUCCESS); /* a cached block the capture must not take */
    EXPECT(gpurt_free(cached), GPURT_SUCCESS);
    void *graph = capture_set(native, 1 /* THREAD_LOCAL */, mib, 2, 1, stream, inside, graphs);
    CHECK(inside[0] == inside[1], "%s: a block freed inside the capture serves the capture's next allocation", config);
    CHECK(!overlap(cached, mib, inside[0], mib), "%s: the capture does not take the shared cache's block", config);
    EXPECT(gpurt_malloc(mib, stream, &after), GPURT_SUCCESS);
    CHECK(!overlap(after, mib, inside[0], mib), "%s: after the capture, gpurt_malloc does not hand out the graph's block", config);
    CHECK(instantiate(&exec, graph, 0) == 0, "%s: instantiated", config);
    EXPECT(gpurt_memset_async(after, eager, 4, mib / 4, stream), GPURT_SUCCESS);
    CHECK(launch(exec, native) == 0, "%s: replayed", config);
    CHECK(holds(after, mib, eager, stream), "%s: a replay leaves the eager block's random words alone", config);
    CHECK(holds(inside[0], mib, graphs, stream), "%s: the replay wrote the graph's block", config);
    CHECK(graph_destroy(graph) == 0, "%s: graph destroyed, the exec still lives", config);
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(mib, stream, &again), GPURT_SUCCESS);
    CHECK(!overlap(again, mib, inside[0], mib), "%s: while an exec lives, its block stays its own (empty_cache too)", config);
    CHECK(launch(exec, native) == 0, "%s: the exec launches", config);
    CHECK(exec_destroy(exec) == 0, "%s: exec destroyed", config);
    EXPECT(gpurt_free(after), GPURT_SUCCESS);
    EXPECT(gpurt_free(again), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    size_t reserved_after = reserved_settled(reserved_before);
    CHECK(reserved_after == reserved_before, "%s: the graph's pool went back with its last exec (%zu reserved, %zu before)", config,
          reserved_after, reserved_before);
    if (stub_live) CHECK(live_device_bytes() == device_before, "%s: the driver holds nothing more (%ld, %ld before)", config,
                         live_device_bytes(), device_before);
}

static void growth_in_a_capture_is_served(const char *config, gpurt_stream_t stream, void *native) {
    void *big = NULL, *graph = NULL;
    size_t reserved_before = reserved();
    const size_t size = (size_t)3 << 30;
    CHECK(begin_capture(native, 0 /* GLOBAL */) == 0, "%s: global capture begun", config);
    EXPECT(gpurt_malloc(size, stream, &big), GPURT_SUCCESS);
    CHECK(big != NULL, "%s: 3 GiB inside a global capture: served from the capture's pool", config);
    EXPECT(gpurt_free(big), GPURT_SUCCESS);
    CHECK(end_capture(native, &graph) == 0 && graph != NULL, "%s: the capture survived the growth", config);
    CHECK(reserved() >= reserved_before + size, "%s: the graph holds its 3 GiB", config);
    CHECK(graph_destroy(graph) == 0, "%s: destroyed", config);
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    CHECK(reserved_settled(reserved_before) == reserved_before, "%s: given back with the graph", config);
}

static void a_bound_pool_is_shared(const char *config, gpurt_stream_t stream, void *native) {
    gpurt_graph_pool_t pool = NULL, bound = NULL;
    void *first[1], *second[1], *third[1];
    const size_t size = 4u << 20;
    size_t reserved_before = reserved();
    EXPECT(gpurt_graph_pool_create(0, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_bind_thread(pool), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_bound_thread(&bound), GPURT_SUCCESS);
    CHECK(bound == pool, "%s: the bound pool is reported", config);
    void *g1 = capture(native, 2 /* RELAXED */, size, 1, 1, stream, first);
    void *g2 = capture(native, 2, size, 1, 1, stream, second);
    CHECK(first[0] == second[0], "%s: two captures bound to one pool reuse its blocks (vLLM's batch sizes)", config);
    EXPECT(gpurt_graph_pool_bind_thread(NULL), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_bound_thread(&bound), GPURT_SUCCESS);
    CHECK(bound == NULL, "%s: unbound", config);
    void *g3 = capture(native, 2, size, 1, 1, stream, third);
    CHECK(!overlap(third[0], size, first[0], size), "%s: an unbound capture gets a pool of its own", config);
    EXPECT(gpurt_graph_pool_destroy(pool), GPURT_SUCCESS);
    CHECK(graph_destroy(g1) == 0 && graph_destroy(g3) == 0, "%s: graphs destroyed", config);
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    CHECK(reserved() > reserved_before, "%s: the second graph keeps the shared pool", config);
    CHECK(graph_destroy(g2) == 0, "%s: the last graph destroyed", config);
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    CHECK(reserved_settled(reserved_before) == reserved_before, "%s: the shared pool went with its last graph", config);
}

static void misuse(void) {
    gpurt_mem_pool_t user = NULL;
    gpurt_graph_pool_t pool = NULL;
    EXPECT(gpurt_graph_pool_bound_thread(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_pool_bind_thread((gpurt_graph_pool_t)(uintptr_t)0x1234), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_mem_pool_create(0, NULL, &user), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_bind_thread(user), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_destroy(user), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_create(0, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_destroy(pool), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_bind_thread(pool), GPURT_ERROR_INVALID_HANDLE);
}

/* A bound pool destroyed before the capture's first allocation: refused, naming it,
 * and the capture survives. */
static void a_destroyed_bound_pool_is_refused(gpurt_stream_t stream, void *native) {
    gpurt_graph_pool_t pool = NULL;
    void *p = NULL, *graph = NULL;
    EXPECT(gpurt_graph_pool_create(0, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_bind_thread(pool), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_destroy(pool), GPURT_SUCCESS);
    CHECK(begin_capture(native, 1) == 0, "capture begun");
    CHECK(gpurt_malloc(1024, stream, &p) != GPURT_SUCCESS && p == NULL, "a destroyed bound pool is refused");
    CHECK(strstr(gpurt_last_error_message(), "bound to this thread") != NULL, "the refusal names the binding: %s", gpurt_last_error_message());
    CHECK(end_capture(native, &graph) == 0 && graph != NULL, "the capture survived");
    CHECK(graph_destroy(graph) == 0, "destroyed");
    EXPECT(gpurt_graph_pool_bind_thread(NULL), GPURT_SUCCESS);
}

/* The driver refusing the user object or its retention: the allocation fails with
 * the driver's message, and nothing is kept. */
static void faults_keep_nothing(gpurt_stream_t stream, void *native) {
    const char *points[] = {"cuUserObjectCreate", "cuGraphRetainUserObject"};
    if (!stub_fail_nth) return;
    for (int i = 0; i < 2; i++) {
        void *p = NULL, *graph = NULL;
        size_t reserved_before = reserved();
        long objects = stub_user_objects();
        CHECK(begin_capture(native, 1) == 0, "capture begun");
        stub_fail_nth(points[i], 1);
        CHECK(gpurt_malloc(1u << 20, stream, &p) != GPURT_SUCCESS && p == NULL, "%s refused: the allocation fails", points[i]);
        CHECK(strstr(gpurt_last_error_message(), points[i]) != NULL, "the message names %s: %s", points[i], gpurt_last_error_message());
        stub_fail_nth(NULL, 0);
        EXPECT(gpurt_malloc(1u << 20, stream, &p), GPURT_SUCCESS); /* the next allocation adopts the capture */
        EXPECT(gpurt_free(p), GPURT_SUCCESS);
        CHECK(end_capture(native, &graph) == 0 && graph != NULL, "the capture survived");
        CHECK(graph_destroy(graph) == 0, "destroyed");
        EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
        CHECK(reserved_settled(reserved_before) == reserved_before, "after %s refused, nothing kept", points[i]);
        CHECK(stub_user_objects() == objects, "no user object left (%ld, %ld before)", stub_user_objects(), objects);
    }
}

/* 100 capture / instantiate / replay / destroy cycles: nothing grows. */
static void cycles_leak_nothing(gpurt_stream_t stream, void *native) {
    size_t reserved_before = reserved();
    long device_before = live_device_bytes();
    for (int cycle = 0; cycle < 100; cycle++) {
        void *blocks[3], *exec = NULL;
        void *graph = capture(native, cycle % 3, (size_t)(cycle % 7 + 1) << 20, 3, cycle % 2, stream, blocks);
        CHECK(instantiate(&exec, graph, 0) == 0 && launch(exec, native) == 0, "cycle %d replays", cycle);
        if (cycle % 2 == 0)
            for (int i = 0; i < 3; i++) EXPECT(gpurt_free(blocks[i]), GPURT_SUCCESS); /* freed after the capture, as outputs are */
        CHECK(graph_destroy(graph) == 0 && exec_destroy(exec) == 0, "cycle %d destroyed", cycle);
    }
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    size_t reserved_after = reserved_settled(reserved_before);
    CHECK(reserved_after == reserved_before, "100 cycles: reserved %zu, before %zu", reserved_after, reserved_before);
    if (stub_live) CHECK(live_device_bytes() == device_before, "100 cycles: the driver holds %ld, before %ld", live_device_bytes(), device_before);
    if (stub_user_objects) CHECK(stub_user_objects() == 0, "100 cycles: no user object left");
}

/* A pool whose graph is gone, noticed by a call on another stream, is not collected
 * there: that would wait for the pool's stream, and a capture its thread began in
 * between would be invalidated (the threads below hit that). gpurt_empty_cache gives it
 * back. */
static void a_dead_graph_s_pool_is_not_waited_for_in_passing(gpurt_stream_t stream, void *native) {
    gpurt_stream_t other = NULL;
    void *blocks[2], *p = NULL;
    size_t reserved_before;
    long syncs;
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    reserved_before = reserved();
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &other), GPURT_SUCCESS);
    void *graph = capture(native, 2 /* RELAXED */, 4u << 20, 2, 0, stream, blocks);
    for (int i = 0; i < 2; i++) EXPECT(gpurt_free(blocks[i]), GPURT_SUCCESS); /* outputs, freed after the capture */
    CHECK(graph_destroy(graph) == 0, "destroyed");
    nanosleep(&(struct timespec){0, 20000000}, NULL); /* the driver's destructor thread runs */
    syncs = stub_stream_syncs ? stub_stream_syncs() : 0;
    EXPECT(gpurt_malloc(1u << 20, other, &p), GPURT_SUCCESS); /* notices the graph gone */
    if (stub_stream_syncs) CHECK(stub_stream_syncs() == syncs, "no stream waited for in passing (%ld waits)", stub_stream_syncs() - syncs);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(other), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(other), GPURT_SUCCESS);
    size_t reserved_after = reserved_settled(reserved_before);
    CHECK(reserved_after == reserved_before, "gpurt_empty_cache gave the pool back (%zu reserved, %zu before)", reserved_after, reserved_before);
}

/* Threads capturing at once on streams of their own, half of them into one shared
 * bound pool, graphs and execs destroyed in either order, blocks freed inside the
 * capture or after it: afterwards nothing is held, and no block was handed out twice
 * while held (each thread checks its live blocks against the one it gets). */
#define STRESS_THREADS 4
#define STRESS_CYCLES 150
static gpurt_graph_pool_t stress_pool;
static char stress_errors[STRESS_THREADS][256];

static void *stress(void *arg) {
    int id = (int)(intptr_t)arg, bad = 0;
    unsigned seed = 1234u + (unsigned)id;
    gpurt_stream_t stream = NULL;
    void *native = NULL;
    /* the primary context current on this thread too, for the driver calls made here */
    if (gpurt_set_device(0) != GPURT_SUCCESS || gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream) != GPURT_SUCCESS ||
        gpurt_stream_native(stream, &native) != GPURT_SUCCESS)
        return (void *)1;
    if (id % 2 == 0 && gpurt_graph_pool_bind_thread(stress_pool) != GPURT_SUCCESS) bad++;
    for (int cycle = 0; cycle < STRESS_CYCLES; cycle++) {
        void *blocks[4] = {NULL, NULL, NULL, NULL}, *graph = NULL, *exec = NULL;
        size_t sizes[4];
        int freed_inside = rand_r(&seed) % 2;
        if (begin_capture(native, 1 + rand_r(&seed) % 2 /* thread-local or relaxed */) != 0) { bad++; break; }
        for (int i = 0; i < 4; i++) {
            sizes[i] = (size_t)(1 + rand_r(&seed) % 4096) << (8 + rand_r(&seed) % 8);
            if (gpurt_malloc(sizes[i], stream, &blocks[i]) != GPURT_SUCCESS) bad++;
            for (int j = 0; j < i; j++)
                if (!(freed_inside && j % 2 == 0) && overlap(blocks[i], sizes[i], blocks[j], sizes[j])) bad++;
            if (freed_inside && i % 2 == 0 && gpurt_free(blocks[i]) != GPURT_SUCCESS) bad++;
        }
        if (end_capture(native, &graph) != 0 || instantiate(&exec, graph, 0) != 0 || launch(exec, native) != 0) bad++;
        for (int i = 0; i < 4; i++)
            if (!(freed_inside && i % 2 == 0) && gpurt_free(blocks[i]) != GPURT_SUCCESS) bad++;
        if (rand_r(&seed) % 2) {
            if (graph_destroy(graph) != 0 || exec_destroy(exec) != 0) bad++;
        } else if (exec_destroy(exec) != 0 || graph_destroy(graph) != 0) {
            bad++;
        }
    }
    if (gpurt_graph_pool_bind_thread(NULL) != GPURT_SUCCESS || gpurt_stream_synchronize(stream) != GPURT_SUCCESS ||
        gpurt_stream_destroy(stream) != GPURT_SUCCESS)
        bad++;
    snprintf(stress_errors[id], sizeof stress_errors[id], "%s", gpurt_last_error_message());
    return (void *)(intptr_t)bad;
}

static void threads_capture_at_once(void) {
    pthread_t threads[STRESS_THREADS];
    size_t reserved_before;
    long device_before = live_device_bytes();
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    reserved_before = reserved();
    EXPECT(gpurt_graph_pool_create(0, &stress_pool), GPURT_SUCCESS);
    for (int t = 0; t < STRESS_THREADS; t++) CHECK(pthread_create(&threads[t], NULL, stress, (void *)(intptr_t)t) == 0, "thread %d", t);
    for (int t = 0; t < STRESS_THREADS; t++) {
        void *bad = NULL;
        pthread_join(threads[t], &bad);
        CHECK(bad == NULL, "thread %d: %ld failed calls or overlapping live blocks (its last gpurt message: %s)", t, (long)(intptr_t)bad,
              stress_errors[t]);
    }
    EXPECT(gpurt_graph_pool_destroy(stress_pool), GPURT_SUCCESS);
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    size_t reserved_after = reserved_settled(reserved_before);
    CHECK(reserved_after == reserved_before, "%d threads x %d captures: reserved %zu, before %zu", STRESS_THREADS, STRESS_CYCLES,
          reserved_after, reserved_before);
    if (stub_live) CHECK(live_device_bytes() == device_before, "the driver holds %ld, before %ld", live_device_bytes(), device_before);
    if (stub_user_objects) CHECK(stub_user_objects() == 0, "no user object left");
}

/* A thread that never made a context current allocates on the per-thread default
 * stream (which names the current context's): the allocator's capture query asks in
 * the device's context, and the allocation succeeds as outside any capture. */
static void *per_thread_without_context(void *arg) {
    gpurt_stream_t stream = NULL;
    void *p = NULL;
    int bad = 0;
    (void)arg;
    if (gpurt_stream_per_thread(0, &stream) != GPURT_SUCCESS || gpurt_malloc(1u << 20, stream, &p) != GPURT_SUCCESS || p == NULL ||
        gpurt_free(p) != GPURT_SUCCESS)
        bad = 1;
    snprintf(stress_errors[0], sizeof stress_errors[0], "%s", gpurt_last_error_message());
    return (void *)(intptr_t)bad;
}

static void the_per_thread_stream_without_a_current_context(void) {
    pthread_t thread;
    void *bad = NULL;
    CHECK(pthread_create(&thread, NULL, per_thread_without_context, NULL) == 0, "thread");
    pthread_join(thread, &bad);
    CHECK(bad == NULL, "gpurt_malloc on the per-thread stream from a thread with no current context (%s)", stress_errors[0]);
}

int main(void) {
    int count = 0;
    srand((unsigned)time(NULL));
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        const char *require = getenv("GPURT_REQUIRE_GPU");
        printf("foreign_capture_test: skipped: no device (%s)\n", gpurt_last_error_message());
        return require && strcmp(require, "1") == 0;
    }
    EXPECT(gpurt_set_device(0), GPURT_SUCCESS); /* the primary context current, for the driver calls made here */
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    /* POSIX: function pointers from dlsym */
    *(void **)(&begin_capture) = sym(cuda, "cuStreamBeginCapture_v2");
    *(void **)(&end_capture) = sym(cuda, "cuStreamEndCapture");
    *(void **)(&graph_destroy) = sym(cuda, "cuGraphDestroy");
    *(void **)(&exec_destroy) = sym(cuda, "cuGraphExecDestroy");
    *(void **)(&instantiate) = sym(cuda, "cuGraphInstantiateWithFlags");
    *(void **)(&launch) = sym(cuda, "cuGraphLaunch");
    *(void **)(&stub_fail_nth) = sym(cuda, "stub_fail_nth");
    *(void **)(&stub_live) = sym(cuda, "stub_live");
    *(void **)(&stub_user_objects) = sym(cuda, "stub_user_objects");
    *(void **)(&stub_stream_syncs) = sym(cuda, "stub_stream_syncs");
    CHECK(begin_capture && end_capture && graph_destroy && exec_destroy && instantiate && launch, "the driver's graph calls");
    if (!begin_capture || !end_capture || !graph_destroy || !exec_destroy || !instantiate || !launch) return 1;
    misuse();
    const char *configs[] = {"expandable_segments:False", ""};
    for (int c = 0; c < 2; c++) {
        EXPECT(gpurt_alloc_set_config(configs[c]), GPURT_SUCCESS);
        gpurt_stream_t stream = NULL;
        void *native = NULL;
        EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
        EXPECT(gpurt_stream_native(stream, &native), GPURT_SUCCESS);
        the_graphs_memory_is_not_handed_out(configs[c], stream, native);
        growth_in_a_capture_is_served(configs[c], stream, native);
        a_bound_pool_is_shared(configs[c], stream, native);
        if (c == 1) {
            a_destroyed_bound_pool_is_refused(stream, native);
            faults_keep_nothing(stream, native);
            cycles_leak_nothing(stream, native);
            a_dead_graph_s_pool_is_not_waited_for_in_passing(stream, native);
        }
        EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
        EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
        EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    }
    threads_capture_at_once();
    the_per_thread_stream_without_a_current_context();
    printf("foreign_capture_test: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
