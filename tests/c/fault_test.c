/* Fault injection through the stub driver: a mixed workload (two streams, the
 * caching allocator with cross-stream use and record_stream, events, the pinned pool
 * with copies, a staged copy, a graph capture that allocates from its private pool,
 * a conditional node whose body allocates, a module load, a green context's stream, a
 * growable buffer mapped and unmapped, a user memory pool routed to by push, managed memory, a file
 * written and read back through the GDS calls, synchronous and queued) runs once
 * for every driver call it makes, with that one call made to fail. After each run,
 * with the fault disarmed:
 *   - every failed gpurt call returned a status other than success and a message;
 *   - nothing is left allocated: gpurt's statistics say 0 bytes in use;
 *   - gpurt's reserved bytes equal the device bytes the stub has handed out, and
 *     after empty_cache both are 0; the pinned pool likewise gives every host byte
 *     back to the stub.
 * Runs the sweep with separate and with expandable segments, then again with the
 * workload on 4 threads at once (the n-th call among all threads fails: shards,
 * pools and handle tables shared between threads must stay consistent), and prints
 * how many failure points it swept. On threads, the captures and the calls that wait
 * for the whole device (gpurt_device_synchronize, a growable buffer's unmap and
 * destroy) take turns: a device-wide wait invalidates every capture under way, as the
 * driver (and the stub) rules. Needs tests/stub-driver as libcuda.so.1;
 * FAULT_VERBOSE=1 prints each failed call and its message. */
#define _GNU_SOURCE
#include <gpurt.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0, failed_calls = 0;
static void (*fail_nth)(const char *, long);
static long (*fail_hits)(void);
static void (*live)(long *, long *, long *, long *);
/* Captures hold it shared, device-wide waits exclusive (see above). */
static pthread_rwlock_t device_waits = PTHREAD_RWLOCK_INITIALIZER;

/* A call of the workload: may fail (that is the point), but never without a message. */
#define TRY(call) tried(#call, (call))
static int tried(const char *what, gpurt_status_t s) {
    if (s == GPURT_SUCCESS) return 1;
    __atomic_add_fetch(&failed_calls, 1, __ATOMIC_RELAXED);
    if (getenv("FAULT_VERBOSE")) printf("  %s: %s\n", what, gpurt_last_error_message());
    if (gpurt_last_error_message()[0] == '\0') {
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        printf("FAIL: %s returned %s with no message\n", what, gpurt_status_string(s));
    }
    return 0;
}

#define BLOCKS 24

static void workload(void) {
    static const size_t sizes[BLOCKS] = {512, 3000, 1 << 20, 5 << 20, 20 << 20, 100, 700 << 10, 12 << 20,
                                         64, 2 << 20, 9 << 20, 1,   4096,    33 << 20, 300 << 10, 8};
    gpurt_stream_t s[2] = {NULL, NULL};
    gpurt_event_t timing = NULL, pooled = NULL;
    gpurt_pinned_pool_t def = NULL;
    gpurt_graph_t graph = NULL;
    gpurt_graph_exec_t exec = NULL;
    gpurt_module_t module = NULL;
    static const char ptx[] = ".version 7.0\n.target sm_50\n.address_size 64\n";
    void *blocks[BLOCKS] = {NULL}, *pinned[3] = {NULL}, *scratch = NULL, *staged_dev = NULL;
    void *in_pool[4] = {NULL}, *managed = NULL;
    gpurt_mem_pool_t user_pool = NULL;
    char *pageable = NULL;
    int i;
    TRY(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s[0]));
    TRY(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s[1]));
    if (s[1] == NULL) TRY(gpurt_stream_from_pool(0, 0, &s[1]));
    for (i = 0; i < BLOCKS; i++) TRY(gpurt_malloc(sizes[i % 16] + (size_t)i * 512, s[i % 2] ? s[i % 2] : s[1], &blocks[i]));
    for (i = 0; i < BLOCKS; i += 3)
        if (blocks[i] != NULL) TRY(gpurt_record_stream(blocks[i], s[(i + 1) % 2] ? s[(i + 1) % 2] : s[1]));
    for (i = 0; i < BLOCKS; i += 2) {
        if (blocks[i] != NULL && TRY(gpurt_free(blocks[i]))) blocks[i] = NULL;
    }
    TRY(gpurt_event_create(0, 0, &timing));
    TRY(gpurt_event_pool_get(0, &pooled));
    if (timing != NULL) TRY(gpurt_event_record(timing, s[1]));
    if (pooled != NULL) TRY(gpurt_event_record(pooled, s[1]));
    if (pooled != NULL && s[0] != NULL) TRY(gpurt_stream_wait_event(s[0], pooled));
    if (TRY(gpurt_pinned_pool_default(&def))) {
        for (i = 0; i < 3; i++) TRY(gpurt_pinned_malloc(def, (size_t)(i + 1) << 18, &pinned[i]));
        for (i = 0; i < 3; i++)
            if (pinned[i] != NULL && blocks[1] != NULL) TRY(gpurt_memcpy_async(blocks[1], pinned[i], 3000, s[1]));
        for (i = 0; i < 3; i++)
            if (pinned[i] != NULL) TRY(gpurt_pinned_free(pinned[i]));
    }
    pageable = (char *)calloc(9 << 20, 1);
    if (TRY(gpurt_malloc(9 << 20, s[1], &staged_dev))) {
        TRY(gpurt_memcpy_htod_staged(staged_dev, pageable, 9 << 20, s[1]));
        TRY(gpurt_memcpy_dtoh_staged(pageable, staged_dev, 9 << 20, s[1]));
        TRY(gpurt_free(staged_dev));
    }
    free(pageable);
    pthread_rwlock_rdlock(&device_waits);
    if (s[0] != NULL && TRY(gpurt_stream_begin_capture(s[0], GPURT_CAPTURE_MODE_THREAD_LOCAL, NULL))) {
        unsigned long long cond = 0;
        if (TRY(gpurt_malloc(3 << 20, s[0], &scratch))) {
            TRY(gpurt_memset_async(scratch, 1, 1, 3 << 20, s[0]));
            TRY(gpurt_free(scratch));
        }
        /* A conditional node whose body allocates from the capture's pool. */
        if (TRY(gpurt_graph_conditional_handle_create(s[0], 1, 0, &cond)) && TRY(gpurt_graph_conditional_begin(s[0], cond, GPURT_GRAPH_CONDITIONAL_IF, 1))) {
            if (TRY(gpurt_malloc(1 << 20, s[0], &scratch))) TRY(gpurt_free(scratch));
            TRY(gpurt_graph_conditional_end(s[0]));
        }
        if (TRY(gpurt_stream_end_capture(s[0], &graph)) && TRY(gpurt_graph_instantiate(graph, 0, NULL, &exec))) {
            TRY(gpurt_graph_launch(exec, s[0]));
            TRY(gpurt_graph_exec_destroy(exec));
        }
        if (graph != NULL) TRY(gpurt_graph_destroy(graph));
    }
    pthread_rwlock_unlock(&device_waits);
    if (TRY(gpurt_module_load_data(ptx, sizeof ptx - 1, &module))) TRY(gpurt_module_unload(module));
    /* A green context's stream through the allocator; a growable buffer mapped, unmapped,
     * mapped again and destroyed. A destroy that failed is retried: the fault is gone. */
    {
        gpurt_green_context_t green = NULL;
        gpurt_stream_t on_sms = NULL;
        gpurt_vbuffer_t vb = NULL;
        void *on_green = NULL;
        if (TRY(gpurt_green_context_create(0, 16, &green))) {
            if (TRY(gpurt_green_context_stream_create(green, GPURT_STREAM_NON_BLOCKING, 0, &on_sms))) {
                if (TRY(gpurt_malloc(1 << 20, on_sms, &on_green))) TRY(gpurt_free(on_green));
                TRY(gpurt_stream_synchronize(on_sms));
                if (!TRY(gpurt_stream_destroy(on_sms))) TRY(gpurt_stream_destroy(on_sms));
            }
            if (!TRY(gpurt_green_context_destroy(green))) TRY(gpurt_green_context_destroy(green));
        }
        pthread_rwlock_wrlock(&device_waits);
        if (s[1] != NULL && TRY(gpurt_vbuffer_create(0, 8 << 20, &vb))) {
            if (TRY(gpurt_vbuffer_map(vb, 0, 4 << 20))) TRY(gpurt_vbuffer_unmap(vb, 0, 4 << 20, s[1]));
            TRY(gpurt_vbuffer_map(vb, 4 << 20, 2 << 20));
            if (!TRY(gpurt_vbuffer_destroy(vb))) TRY(gpurt_vbuffer_destroy(vb));
        }
        pthread_rwlock_unlock(&device_waits);
    }
    /* A user pool (with the process's options) routed to by push, and managed memory. */
    if (s[1] != NULL && TRY(gpurt_mem_pool_create(0, NULL, &user_pool))) {
        if (TRY(gpurt_mem_pool_push(user_pool))) {
            for (i = 0; i < 3; i++) TRY(gpurt_malloc(sizes[i + 2], s[1], &in_pool[i]));
            TRY(gpurt_mem_pool_pop());
        }
        TRY(gpurt_mem_pool_malloc(user_pool, 5000, s[1], &in_pool[3]));
        for (i = 0; i < 4; i++)
            if (in_pool[i] != NULL) TRY(gpurt_free(in_pool[i]));
        TRY(gpurt_stream_synchronize(s[1]));
        TRY(gpurt_mem_pool_destroy(user_pool));
    }
    if (TRY(gpurt_malloc_managed(3 << 20, GPURT_MEM_ATTACH_GLOBAL, &managed))) TRY(gpurt_free(managed));
    /* A file through the staged GDS path: 9 MiB written and read back, then queued. */
    if (s[1] != NULL && TRY(gpurt_malloc(9 << 20, s[1], &staged_dev))) {
        char path[96];
        gpurt_gds_file_t file = NULL;
        snprintf(path, sizeof path, "/tmp/gpurt_fault_%d_%lx.bin", (int)getpid(), (unsigned long)pthread_self());
        if (TRY(gpurt_gds_file_open(path, O_RDWR | O_CREAT | O_TRUNC, &file))) {
            size_t done = 0;
            TRY(gpurt_gds_write(file, staged_dev, 9 << 20, 0, &done));
            TRY(gpurt_gds_read(file, staged_dev, 9 << 20, 0, &done));
            TRY(gpurt_gds_write_async(file, staged_dev, 5 << 20, 100, s[1]));
            TRY(gpurt_gds_read_async(file, staged_dev, 5 << 20, 100, s[1]));
            TRY(gpurt_stream_synchronize(s[1]));
            TRY(gpurt_gds_file_close(file));
        }
        remove(path);
        TRY(gpurt_free(staged_dev));
    }
    for (i = 0; i < BLOCKS; i++)
        if (blocks[i] != NULL) TRY(gpurt_free(blocks[i]));
    if (timing != NULL) TRY(gpurt_event_destroy(timing));
    if (pooled != NULL) TRY(gpurt_event_destroy(pooled));
    for (i = 0; i < 2; i++)
        if (s[i] != NULL) TRY(gpurt_stream_destroy(s[i]));
    pthread_rwlock_wrlock(&device_waits);
    TRY(gpurt_device_synchronize(0));
    pthread_rwlock_unlock(&device_waits);
}

/* The checks after one run; `what` names the injected fault. */
static void check_consistent(const char *what) {
    gpurt_memory_stats_t st = GPURT_MEMORY_STATS_INIT;
    gpurt_host_memory_stats_t host = GPURT_HOST_MEMORY_STATS_INIT;
    gpurt_pinned_pool_t def = NULL;
    long device, host_bytes, streams, events;
    int bad = 0;
    if (gpurt_memory_stats(0, &st) != GPURT_SUCCESS) bad |= 1;
    live(&device, &host_bytes, &streams, &events);
    if (st.allocated_bytes.all.current != 0 || st.allocation.all.current != 0) bad |= 2;
    if (st.reserved_bytes.all.current != device) bad |= 4;
    if (gpurt_empty_cache() != GPURT_SUCCESS || gpurt_memory_stats(0, &st) != GPURT_SUCCESS) bad |= 8;
    live(&device, &host_bytes, &streams, &events);
    /* Blocks freed with record_stream stay active until their streams' work is seen
     * done; empty_cache waits for that. */
    if (st.reserved_bytes.all.current != 0 || device != 0 || st.active.all.current != 0) bad |= 16;
    if (gpurt_pinned_pool_default(&def) != GPURT_SUCCESS || gpurt_pinned_stats(def, &host) != GPURT_SUCCESS) bad |= 32;
    if (host.allocations.current != 0) bad |= 64;
    if (gpurt_pinned_empty_cache(def) != GPURT_SUCCESS) bad |= 128;
    live(&device, &host_bytes, &streams, &events);
    if (host_bytes != 0) bad |= 256;
    if (bad) {
        failures++;
        printf("FAIL after %s: checks %#x (2 in use, 4 reserved != stub's %ld, 16 not returned, 64 pinned in use, "
               "256 host bytes not returned: %ld); allocated %lld reserved %lld\n",
               what, bad, device, host_bytes, (long long)st.allocated_bytes.all.current,
               (long long)st.reserved_bytes.all.current);
    }
}

#define THREADS 4

static void *workload_thread(void *unused) {
    (void)unused;
    workload();
    return NULL;
}

/* The workload on THREADS threads at once. */
static void threaded_workload(void) {
    pthread_t threads[THREADS];
    int i;
    for (i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, workload_thread, NULL);
    for (i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
}

/* Fails each call of each point in turn while `run` runs; checks after each. */
static long sweep(const char *const *points, size_t count, const char *config, void (*run)(void), const char *label) {
    long swept = 0, n;
    size_t p;
    char what[200];
    run(); /* the reference run, no fault */
    snprintf(what, sizeof what, "a run without faults (%s, %s)", config, label);
    check_consistent(what);
    for (p = 0; p < count; p++) {
        for (n = 1;; n++) {
            long hit;
            fail_nth(points[p], n);
            run();
            hit = fail_hits();
            fail_nth(NULL, 0);
            if (hit == 0) break; /* the workload makes fewer than n such calls */
            snprintf(what, sizeof what, "failing call %ld of %s (%s, %s)", n, points[p], config, label);
            check_consistent(what);
            swept++;
        }
    }
    return swept;
}

int main(void) {
    static const char *points[] = {"cuMemAlloc_v2", "cuMemHostAlloc", "cuEventCreate", "cuEventRecord",
                                   "cuStreamCreateWithPriority", "cuMemcpyAsync", "cuModuleLoadDataEx",
                                   "cuStreamBeginCapture_v2", "cuGraphInstantiateWithFlags", "cuGraphLaunch",
                                   "cuMemAddressReserve", "cuMemCreate", "cuMemMap", "cuLaunchHostFunc",
                                   "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuGreenCtxCreate", "cuGraphAddNode_v2",
                                   "cuStreamBeginCaptureToGraph"};
    static const char *configs[] = {"expandable_segments:False", "expandable_segments:True"};
    void *driver;
    size_t c;
    long swept, threaded = 0, by_config[2] = {0, 0};
    if (gpurt_init() != GPURT_SUCCESS) {
        printf("fault_test: skipped (no driver: %s)\n", gpurt_last_error_message());
        return 0;
    }
    driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    *(void **)(&fail_nth) = driver ? dlsym(driver, "stub_fail_nth") : NULL; /* POSIX: function pointers from dlsym */
    *(void **)(&fail_hits) = driver ? dlsym(driver, "stub_fail_hits") : NULL;
    *(void **)(&live) = driver ? dlsym(driver, "stub_live") : NULL;
    if (fail_nth == NULL || fail_hits == NULL || live == NULL) {
        printf("fault_test: skipped (the driver is not tests/stub-driver: fault injection needs it)\n");
        return 0;
    }
    for (c = 0; c < 2; c++) {
        if (gpurt_alloc_set_config(configs[c]) != GPURT_SUCCESS) return 1;
        by_config[c] = sweep(points, sizeof points / sizeof points[0], configs[c], workload, "one thread");
        threaded += sweep(points, sizeof points / sizeof points[0], configs[c], threaded_workload, "4 threads");
    }
    swept = by_config[0] + by_config[1] + threaded;
    printf("fault_test: %ld failure points swept (one thread: %ld with separate segments, %ld expandable; "
           "4 threads at once: %ld), %d injected failures reported with a message\n",
           swept, by_config[0], by_config[1], threaded, failed_calls);
    printf("fault_test: %ld passed, %d failed\n", swept + 4 - failures, failures);
    return failures == 0 ? 0 : 1;
}
