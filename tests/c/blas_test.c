/* The math libraries' handles through the C ABI (gpurt_blas_handle, _blaslt_,
 * _solver_, _sparse_, _dnn_, the TF32 switch, workspaces, counts, versions).
 *
 * `blas_test missing`: without the libraries (CI, no stand-ins on the path) every
 * handle call checks its arguments and stream first, then says which library is
 * missing. `blas_test`: cuBLAS and cuBLASLt present (the stand-ins of
 * tests/stub-driver in CI, the real ones on a GPU): one handle per thread reused on
 * every stream; workspaces from gpurt's pool per stream, sized by
 * CUBLAS_WORKSPACE_CONFIG and CUBLASLT_WORKSPACE_SIZE (set below), surviving
 * gpurt_empty_cache, freed by gpurt_blas_clear_workspaces once idle; a thread's
 * handles go back at exit and the next thread reuses them; 8 threads at once get 8
 * handles; the TF32 switch. With the stand-ins it also reads what gpurt set on each
 * handle, and fails cuBLAS's calls on purpose: each failure is
 * reported, leaks nothing, and the next call works. gpurt_blas_handles_release
 * destroys the handles threads hold and idle ones, gives their memory back (the
 * memory report's math-library handles), and each thread's next call gets a live
 * handle with the math mode the old one had; a refused destroy leaves the rest live. The GEMMs' data checks are in
 * blas_gpu_test.c (GPU suite).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <gpurt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define BLAS_WORKSPACE (2u << 20)    /* CUBLAS_WORKSPACE_CONFIG=:1024:2 */
#define BLASLT_WORKSPACE (64u << 10) /* CUBLASLT_WORKSPACE_SIZE=64 */

/* The stand-in cuBLAS's state and fault injection (NULL with the real one). */
static int (*math_state)(void *, void **, void **, size_t *, int *);
static void (*math_fail_nth)(const char *, long);

static uint64_t allocated(void) {
    uint64_t bytes = 0;
    gpurt_memory_usage(0, &bytes, NULL, NULL, NULL);
    return bytes;
}

static size_t created(gpurt_math_library_t library) {
    size_t made = 0, idle = 0;
    EXPECT(gpurt_math_handle_counts(library, 0, &made, &idle), GPURT_SUCCESS);
    return made;
}

static size_t idle(gpurt_math_library_t library) {
    size_t made = 0, idle = 0;
    EXPECT(gpurt_math_handle_counts(library, 0, &made, &idle), GPURT_SUCCESS);
    return idle;
}

static void *native(gpurt_stream_t s) {
    void *n = NULL;
    EXPECT(gpurt_stream_native(s, &n), GPURT_SUCCESS);
    return n;
}

/* With the stand-in: `handle` is bound to `stream` with a workspace of `size`
 * bytes and the math mode `mode`. */
static void expect_bound(void *handle, gpurt_stream_t stream, size_t size, int mode) {
    void *bound = NULL, *workspace = NULL;
    size_t ws_size = 0;
    int math_mode = -1;
    if (!math_state) return;
    CHECK(math_state(handle, &bound, &workspace, &ws_size, &math_mode), "not a live stand-in handle: %p", handle);
    CHECK(bound == native(stream), "bound to %p, not %p", bound, native(stream));
    CHECK(workspace != NULL && ws_size == size, "workspace %p of %zu bytes, not %zu", workspace, ws_size, size);
    CHECK(math_mode == mode, "math mode %d, not %d", math_mode, mode);
}

/* Every handle call refuses NULL out-parameters and bad streams before anything else. */
static void misuse(gpurt_stream_t good) {
    gpurt_stream_t stale = NULL, forged = (gpurt_stream_t)(uintptr_t)0x5eed0001;
    void *h = NULL, *ws = NULL;
    size_t size = 0;
    int v = 0;
    size_t a = 0, b = 0;
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stale), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(stale), GPURT_SUCCESS);
    EXPECT(gpurt_blas_handle(good, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_current_blas_handle(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_blaslt_handle(good, NULL, &ws, &size), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_blaslt_handle(good, &h, NULL, &size), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_blaslt_handle(good, &h, &ws, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_solver_handle(good, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_sparse_handle(good, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_dnn_handle(good, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_blas_get_allow_tf32(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_math_library_version(GPURT_MATH_CUBLAS, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_math_library_version(5, &v), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_math_library_version(-1, &v), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_math_handle_counts(7, 0, &a, &b), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_math_handle_counts(GPURT_MATH_CUBLAS, 0, NULL, &b), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_math_handle_counts(GPURT_MATH_CUBLAS, 99, &a, &b), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_blas_clear_workspaces(99), GPURT_ERROR_INVALID_ARGUMENT);
    {
        gpurt_stream_t bad[] = {NULL, stale, forged};
        int i;
        for (i = 0; i < 3; i++) {
            h = (void *)1;
            EXPECT(gpurt_blas_handle(bad[i], &h), GPURT_ERROR_INVALID_HANDLE);
            CHECK(h == (void *)1, "a failed call wrote its out-parameter");
            EXPECT(gpurt_blaslt_handle(bad[i], &h, &ws, &size), GPURT_ERROR_INVALID_HANDLE);
            EXPECT(gpurt_solver_handle(bad[i], &h), GPURT_ERROR_INVALID_HANDLE);
            EXPECT(gpurt_sparse_handle(bad[i], &h), GPURT_ERROR_INVALID_HANDLE);
            EXPECT(gpurt_dnn_handle(bad[i], &h), GPURT_ERROR_INVALID_HANDLE);
        }
    }
}

/* Without the libraries: not supported, naming the library. */
static void missing(gpurt_stream_t s) {
    void *h = NULL, *ws = NULL;
    size_t size = 0;
    int v = 0;
    EXPECT(gpurt_blas_handle(s, &h), GPURT_ERROR_NOT_SUPPORTED);
    CHECK(strstr(gpurt_last_error_message(), "cuBLAS") && strstr(gpurt_last_error_message(), "libcublas.so.13"), "the message names cuBLAS");
    EXPECT(gpurt_current_blas_handle(&h), GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_blaslt_handle(s, &h, &ws, &size), GPURT_ERROR_NOT_SUPPORTED);
    CHECK(strstr(gpurt_last_error_message(), "cuBLASLt") != NULL, "the message names cuBLASLt");
    EXPECT(gpurt_math_library_version(GPURT_MATH_CUBLAS, &v), GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_math_library_version(GPURT_MATH_CUBLASLT, &v), GPURT_ERROR_NOT_SUPPORTED);
    CHECK(allocated() == 0, "nothing allocated: %llu bytes", (unsigned long long)allocated());
}

/* cuSOLVER, cuSPARSE and cuDNN: a handle bound to the stream where the library is
 * here, else not supported naming it. */
static void other_libraries(gpurt_stream_t s) {
    static const char *names[] = {"cuSOLVER", "cuSPARSE", "cuDNN"};
    gpurt_status_t (*get[])(gpurt_stream_t, void **) = {gpurt_solver_handle, gpurt_sparse_handle, gpurt_dnn_handle};
    int i;
    for (i = 0; i < 3; i++) {
        void *h = NULL, *again = NULL;
        int version = 0;
        gpurt_status_t st = get[i](s, &h);
        if (st == GPURT_SUCCESS) {
            EXPECT(get[i](s, &again), GPURT_SUCCESS);
            CHECK(h != NULL && h == again, "%s: the same handle twice", names[i]);
            EXPECT(gpurt_math_library_version((gpurt_math_library_t)(GPURT_MATH_CUSOLVER + i), &version), GPURT_SUCCESS);
            printf("%s: version %d, handle %p\n", names[i], version, h);
        } else {
            CHECK(st == GPURT_ERROR_NOT_SUPPORTED && strstr(gpurt_last_error_message(), names[i]), "%s: status %d", names[i], (int)st);
            printf("%s: absent (%s)\n", names[i], gpurt_last_error_message());
        }
    }
}

typedef struct {
    gpurt_stream_t stream; /* NULL: a stream of the thread's own */
    void *blas, *lt;
    gpurt_status_t status;
    pthread_barrier_t *together; /* held until every thread has its handles */
} Job;

static void *take_handles(void *arg) {
    Job *job = arg;
    void *ws = NULL;
    size_t size = 0;
    gpurt_stream_t s = job->stream;
    if (!s) gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s);
    job->status = gpurt_blas_handle(s, &job->blas);
    if (job->status == GPURT_SUCCESS) job->status = gpurt_blaslt_handle(s, &job->lt, &ws, &size);
    if (job->together) pthread_barrier_wait(job->together);
    if (!job->stream) gpurt_stream_destroy(s);
    return NULL;
}

static Job in_thread(gpurt_stream_t s) {
    pthread_t t;
    Job job;
    memset(&job, 0, sizeof job);
    job.stream = s;
    pthread_create(&t, NULL, take_handles, &job);
    pthread_join(t, NULL);
    return job;
}

static void present(gpurt_stream_t s1) {
    gpurt_stream_t s2 = NULL, cur = NULL;
    void *h = NULL, *again = NULL, *lt = NULL, *lt2 = NULL, *ws1 = NULL, *ws2 = NULL, *ws_again = NULL;
    size_t size1 = 0, size2 = 0, size_again = 0;
    uint64_t before, blas_made, lt_made;
    int allow = -1, version = 0;
    int i;

    EXPECT(gpurt_math_library_version(GPURT_MATH_CUBLAS, &version), GPURT_SUCCESS);
    CHECK(version >= 120000, "cuBLAS version %d", version);
    printf("cuBLAS: version %d\n", version);
    EXPECT(gpurt_math_library_version(GPURT_MATH_CUBLASLT, &version), GPURT_SUCCESS);
    printf("cuBLASLt: version %d\n", version);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s2), GPURT_SUCCESS);

    /* One handle per thread, on any stream; a workspace per stream from the pool. */
    EXPECT(gpurt_memory_record_history(1, 0, 0), GPURT_SUCCESS);
    before = allocated();
    blas_made = created(GPURT_MATH_CUBLAS);
    EXPECT(gpurt_blas_get_allow_tf32(&allow), GPURT_SUCCESS);
    CHECK(allow == 0, "TF32 is off by default");
    EXPECT(gpurt_blas_handle(s1, &h), GPURT_SUCCESS);
    CHECK(h != NULL, "a handle");
    CHECK(created(GPURT_MATH_CUBLAS) == blas_made + 1, "one handle created");
    {
        /* The handle's own memory, measured across its creation: the stand-in's 1 MiB a handle. */
        gpurt_memory_report_t r = GPURT_MEMORY_REPORT_INIT;
        EXPECT(gpurt_memory_report(0, &r), GPURT_SUCCESS);
        if (math_state)
            CHECK(r.math_handles == (created(GPURT_MATH_CUBLAS) + created(GPURT_MATH_CUBLASLT)) * (1u << 20),
                  "the memory report's math-library handles: %llu bytes", (unsigned long long)r.math_handles);
        else
            printf("blas_test: the math-library handles took %.1f MiB, as the driver's free memory shows\n", r.math_handles / 1048576.0);
    }
    CHECK(allocated() == before + BLAS_WORKSPACE, "the workspace is %llu bytes from the pool", (unsigned long long)(allocated() - before));
    expect_bound(h, s1, BLAS_WORKSPACE, 0);
    for (i = 0; i < 1000; i++) {
        EXPECT(gpurt_blas_handle(s1, &again), GPURT_SUCCESS);
        if (again != h) break;
    }
    CHECK(again == h && allocated() == before + BLAS_WORKSPACE, "the same handle and workspace, nothing more allocated");
    EXPECT(gpurt_blas_handle(s2, &again), GPURT_SUCCESS);
    CHECK(again == h, "the thread's one handle, on another stream");
    CHECK(allocated() == before + 2 * BLAS_WORKSPACE, "a second workspace for the second stream");
    expect_bound(h, s2, BLAS_WORKSPACE, 0);
    EXPECT(gpurt_blas_handle(s1, &again), GPURT_SUCCESS);
    expect_bound(h, s1, BLAS_WORKSPACE, 0);
    CHECK(allocated() == before + 2 * BLAS_WORKSPACE, "the first stream's workspace again");
    EXPECT(gpurt_current_stream(0, &cur), GPURT_SUCCESS);
    EXPECT(gpurt_current_blas_handle(&again), GPURT_SUCCESS);
    CHECK(again == h, "the current stream's handle is the thread's");
    expect_bound(h, cur, BLAS_WORKSPACE, 0);
    CHECK(created(GPURT_MATH_CUBLAS) == blas_made + 1, "still one handle created");

    /* The history names the workspaces' allocations. */
    {
        size_t size = 0;
        char *json;
        CHECK(gpurt_memory_snapshot_buffer(0, GPURT_SNAPSHOT_JSON, NULL, 0, &size) == GPURT_ERROR_INVALID_ARGUMENT && size > 0, "snapshot size");
        size = 2 * size + 4096; /* the history may grow between the two calls */
        json = malloc(size + 1);
        EXPECT(gpurt_memory_snapshot_buffer(0, GPURT_SNAPSHOT_JSON, json, size, &size), GPURT_SUCCESS);
        json[size] = 0;
        CHECK(strstr(json, "\"cuBLAS workspace\"") != NULL, "the snapshot annotates the cuBLAS workspaces");
        free(json);
        EXPECT(gpurt_memory_record_history(0, 0, 0), GPURT_SUCCESS);
    }

    /* cuBLASLt: its own handle; a workspace per stream, given to the caller. */
    before = allocated();
    lt_made = created(GPURT_MATH_CUBLASLT);
    EXPECT(gpurt_blaslt_handle(s1, &lt, &ws1, &size1), GPURT_SUCCESS);
    EXPECT(gpurt_blaslt_handle(s2, &lt2, &ws2, &size2), GPURT_SUCCESS);
    EXPECT(gpurt_blaslt_handle(s1, &lt2, &ws_again, &size_again), GPURT_SUCCESS);
    CHECK(lt != NULL && lt == lt2 && lt != h, "one cuBLASLt handle, not the cuBLAS one");
    CHECK(size1 == BLASLT_WORKSPACE && size2 == BLASLT_WORKSPACE, "CUBLASLT_WORKSPACE_SIZE: %zu, %zu", size1, size2);
    CHECK(ws1 != NULL && ws2 != NULL && ws1 != ws2 && ws_again == ws1, "a workspace per stream, kept");
    CHECK(((uintptr_t)ws1 & 255) == 0, "the workspace is 256-byte aligned");
    CHECK(allocated() == before + 2 * BLASLT_WORKSPACE, "both from the pool");
    CHECK(created(GPURT_MATH_CUBLASLT) == lt_made + 1, "one cuBLASLt handle created");

    /* Workspaces survive emptying the cache while their handle is held. */
    before = allocated();
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    CHECK(allocated() == before, "empty_cache kept the workspaces");
    EXPECT(gpurt_blas_handle(s1, &again), GPURT_SUCCESS);
    expect_bound(h, s1, BLAS_WORKSPACE, 0);

    /* TF32: the math mode of handles given out from now on, cached ones included. */
    EXPECT(gpurt_blas_set_allow_tf32(1), GPURT_SUCCESS);
    EXPECT(gpurt_blas_get_allow_tf32(&allow), GPURT_SUCCESS);
    CHECK(allow == 1, "TF32 on");
    EXPECT(gpurt_blas_handle(s1, &again), GPURT_SUCCESS);
    expect_bound(h, s1, BLAS_WORKSPACE, 3);
    EXPECT(gpurt_blas_set_allow_tf32(0), GPURT_SUCCESS);
    EXPECT(gpurt_blas_handle(s1, &again), GPURT_SUCCESS);
    expect_bound(h, s1, BLAS_WORKSPACE, 0);

    /* Thread exit: handles go back; the next thread reuses them. */
    {
        Job first, second;
        blas_made = created(GPURT_MATH_CUBLAS);
        CHECK(idle(GPURT_MATH_CUBLAS) == 0, "no idle handle yet");
        first = in_thread(s1);
        EXPECT(first.status, GPURT_SUCCESS);
        CHECK(first.blas != h, "another thread, another handle");
        CHECK(created(GPURT_MATH_CUBLAS) == blas_made + 1, "one more handle");
        CHECK(idle(GPURT_MATH_CUBLAS) == 1, "the exited thread's handle is idle");
        second = in_thread(s1);
        EXPECT(second.status, GPURT_SUCCESS);
        CHECK(second.blas == first.blas && second.lt == first.lt, "the next thread reuses the handles");
        CHECK(created(GPURT_MATH_CUBLAS) == blas_made + 1, "no handle created for it");
        expect_bound(second.blas, s1, BLAS_WORKSPACE, 0);
    }

    /* 8 threads at once, each on its own stream: 8 distinct handles, each bound. */
    {
        pthread_t t[8];
        Job jobs[8];
        pthread_barrier_t together;
        int a, b;
        pthread_barrier_init(&together, NULL, 8);
        for (a = 0; a < 8; a++) {
            memset(&jobs[a], 0, sizeof jobs[a]);
            jobs[a].together = &together;
            pthread_create(&t[a], NULL, take_handles, &jobs[a]);
        }
        for (a = 0; a < 8; a++) pthread_join(t[a], NULL);
        pthread_barrier_destroy(&together);
        for (a = 0; a < 8; a++) {
            EXPECT(jobs[a].status, GPURT_SUCCESS);
            for (b = 0; b < a; b++) CHECK(jobs[a].blas != jobs[b].blas, "threads %d and %d share a handle", a, b);
        }
        CHECK(idle(GPURT_MATH_CUBLAS) >= 8, "all 8 back after exit: %zu idle", idle(GPURT_MATH_CUBLAS));
        printf("cuBLAS handles: %zu created, %zu idle after 11 threads\n", created(GPURT_MATH_CUBLAS), idle(GPURT_MATH_CUBLAS));
    }

    /* Idle handles' workspaces go back to the pool; held ones stay. */
    {
        Job again_job;
        before = allocated();
        EXPECT(gpurt_blas_clear_workspaces(GPURT_CURRENT_DEVICE), GPURT_SUCCESS);
        CHECK(allocated() < before, "idle workspaces freed: %llu -> %llu", (unsigned long long)before, (unsigned long long)allocated());
        CHECK(allocated() >= 2 * BLAS_WORKSPACE + 2 * BLASLT_WORKSPACE, "this thread's stay");
        EXPECT(gpurt_blas_handle(s1, &again), GPURT_SUCCESS);
        expect_bound(h, s1, BLAS_WORKSPACE, 0);
        before = allocated();
        again_job = in_thread(s1);
        EXPECT(again_job.status, GPURT_SUCCESS);
        expect_bound(again_job.blas, s1, BLAS_WORKSPACE, 0);
        CHECK(allocated() == before + BLAS_WORKSPACE + BLASLT_WORKSPACE, "a reused handle allocates anew");
    }
    EXPECT(gpurt_stream_destroy(s2), GPURT_SUCCESS);
}

/* The stand-ins fail on purpose: each failure is reported and the next call works. */
static void failures_injected(gpurt_stream_t s) {
    size_t made = created(GPURT_MATH_CUBLAS);
    gpurt_stream_t fresh = NULL;
    void *h = NULL;

    /* cublasCreate fails in a thread with no handle (the idle ones are taken first). */
    {
        pthread_t t[16];
        Job jobs[16];
        pthread_barrier_t together;
        int n = (int)idle(GPURT_MATH_CUBLAS) + 1, a;
        if (n > 16) n = 16;
        pthread_barrier_init(&together, NULL, (unsigned)n);
        math_fail_nth("cublasCreate_v2", 1);
        for (a = 0; a < n; a++) {
            memset(&jobs[a], 0, sizeof jobs[a]);
            jobs[a].stream = s;
            jobs[a].together = &together;
            pthread_create(&t[a], NULL, take_handles, &jobs[a]);
        }
        for (a = 0; a < n; a++) pthread_join(t[a], NULL);
        pthread_barrier_destroy(&together);
        math_fail_nth(NULL, 0);
        {
            int failed = 0;
            for (a = 0; a < n; a++) failed += jobs[a].status == GPURT_ERROR_OUT_OF_MEMORY;
            CHECK(failed == 1, "one thread's cublasCreate failed as out of memory (%d)", failed);
        }
        CHECK(created(GPURT_MATH_CUBLAS) == made, "the failed handle is not counted");
    }

    /* cublasSetWorkspace fails: the handle stays the thread's, unbound; the next call binds it. */
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &fresh), GPURT_SUCCESS);
    math_fail_nth("cublasSetWorkspace_v2", 1);
    EXPECT(gpurt_blas_handle(fresh, &h), GPURT_ERROR_CUDA);
    CHECK(strstr(gpurt_last_error_message(), "cublasSetWorkspace_v2") != NULL, "the message names the call");
    math_fail_nth(NULL, 0);
    EXPECT(gpurt_blas_handle(fresh, &h), GPURT_SUCCESS);
    expect_bound(h, fresh, BLAS_WORKSPACE, 0);
    math_fail_nth("cublasSetStream_v2", 1);
    EXPECT(gpurt_blas_handle(s, &h), GPURT_ERROR_CUDA);
    math_fail_nth(NULL, 0);
    EXPECT(gpurt_blas_handle(s, &h), GPURT_SUCCESS);
    expect_bound(h, s, BLAS_WORKSPACE, 0);
    math_fail_nth("cublasSetMathMode", 1);
    EXPECT(gpurt_blas_set_allow_tf32(1), GPURT_SUCCESS);
    EXPECT(gpurt_blas_handle(s, &h), GPURT_ERROR_CUDA);
    math_fail_nth(NULL, 0);
    EXPECT(gpurt_blas_handle(s, &h), GPURT_SUCCESS);
    expect_bound(h, s, BLAS_WORKSPACE, 3);
    EXPECT(gpurt_blas_set_allow_tf32(0), GPURT_SUCCESS);

    EXPECT(gpurt_stream_destroy(fresh), GPURT_SUCCESS);
}

/* The workspace cannot be allocated (a memory cap): out of memory, nothing held,
 * the handle back in the pool; without the cap, the next call works. */
static void workspace_out_of_memory(void) {
    Job job;
    uint64_t before;
    size_t idle_before;
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    before = allocated();
    idle_before = idle(GPURT_MATH_CUBLAS);
    EXPECT(gpurt_set_per_process_memory_fraction(1e-9, 0), GPURT_SUCCESS);
    job = in_thread(NULL);
    EXPECT(gpurt_set_per_process_memory_fraction(1.0, 0), GPURT_SUCCESS);
    CHECK(job.status == GPURT_ERROR_OUT_OF_MEMORY, "status %d", (int)job.status);
    CHECK(allocated() == before, "nothing held after the failure");
    CHECK(idle(GPURT_MATH_CUBLAS) == idle_before, "the handle went back to the pool");
    job = in_thread(NULL);
    EXPECT(job.status, GPURT_SUCCESS);
}

/* A handle first asked for inside a capture (a thread with none, a stream that
 * captures): the capture goes on. The GPU suite replays such a graph. */
static void *capture_first_handle(void *arg) {
    gpurt_status_t *status = arg;
    gpurt_stream_t s = NULL;
    gpurt_graph_t graph = NULL;
    void *h = NULL, *ws = NULL;
    size_t size = 0;
    gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s);
    EXPECT(gpurt_stream_begin_capture(s, GPURT_CAPTURE_MODE_GLOBAL, NULL), GPURT_SUCCESS);
    status[0] = gpurt_blas_handle(s, &h);
    status[1] = gpurt_blaslt_handle(s, &h, &ws, &size);
    EXPECT(gpurt_stream_end_capture(s, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    gpurt_stream_destroy(s);
    return NULL;
}

/* gpurt_blas_handles_release, with cuBLAS's own math-mode calls (real or stand-in). */
static void released(gpurt_stream_t s) {
    void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_NOLOAD), *h = NULL, *again = NULL, *lt = NULL, *ws = NULL;
    int (*set_mode)(void *, int) = NULL, (*get_mode)(void *, int *) = NULL;
    int mode = -1;
    size_t size = 0;
    gpurt_memory_report_t before = GPURT_MEMORY_REPORT_INIT, after = GPURT_MEMORY_REPORT_INIT;
    Job job;
    *(void **)(&set_mode) = lib ? dlsym(lib, "cublasSetMathMode") : NULL;
    *(void **)(&get_mode) = lib ? dlsym(lib, "cublasGetMathMode") : NULL;
    CHECK(set_mode && get_mode, "cuBLAS's math-mode calls");
    if (!set_mode || !get_mode) return;
    job = in_thread(s); /* an idle handle, which a thread held */
    EXPECT(job.status, GPURT_SUCCESS);
    EXPECT(gpurt_blas_handle(s, &h), GPURT_SUCCESS);
    EXPECT(gpurt_blaslt_handle(s, &lt, &ws, &size), GPURT_SUCCESS);
    CHECK(set_mode(h, 3) == 0, "TF32 math set on the handle directly (as ggml does)");
    EXPECT(gpurt_memory_report(0, &before), GPURT_SUCCESS);
    EXPECT(gpurt_blas_handles_release(GPURT_CURRENT_DEVICE), GPURT_SUCCESS);
    EXPECT(gpurt_memory_report(0, &after), GPURT_SUCCESS);
    CHECK(after.math_handles < before.math_handles, "the handles' memory given back: %llu of %llu bytes left",
          (unsigned long long)after.math_handles, (unsigned long long)before.math_handles);
    printf("blas_test: a release gave back %.1f MiB of math-library handles\n", (before.math_handles - after.math_handles) / 1048576.0);
    if (math_state) {
        void *bound, *workspace;
        size_t ws_size;
        int m;
        CHECK(!math_state(h, &bound, &workspace, &ws_size, &m) && !math_state(lt, &bound, &workspace, &ws_size, &m) &&
                  !math_state(job.blas, &bound, &workspace, &ws_size, &m),
              "the held and the idle handles destroyed");
    }
    /* This thread's next call: a live handle, its old math mode, its workspace. */
    EXPECT(gpurt_blas_handle(s, &again), GPURT_SUCCESS);
    CHECK(get_mode(again, &mode) == 0 && mode == 3, "the old handle's math mode: %d", mode);
    expect_bound(again, s, BLAS_WORKSPACE, 3);
    EXPECT(gpurt_blaslt_handle(s, &lt, &ws, &size), GPURT_SUCCESS);
    CHECK(ws != NULL && size == BLASLT_WORKSPACE, "cuBLASLt's workspace: %p, %zu bytes", ws, size);
    job = in_thread(s); /* the idle lease, renewed */
    EXPECT(job.status, GPURT_SUCCESS);
    if (math_state && math_fail_nth) {
        void *bound, *workspace;
        size_t ws_size;
        int m;
        CHECK(math_state(job.blas, &bound, &workspace, &ws_size, &m), "the next thread's handle is live");
        math_fail_nth("cublasDestroy_v2", 1);
        EXPECT(gpurt_blas_handles_release(0), GPURT_ERROR_CUDA);
        CHECK(strstr(gpurt_last_error_message(), "cublasDestroy_v2") != NULL, "the refusal named: %s", gpurt_last_error_message());
        math_fail_nth(NULL, 0);
        CHECK(math_state(again, &bound, &workspace, &ws_size, &m) || math_state(job.blas, &bound, &workspace, &ws_size, &m),
              "a refused destroy leaves handles live");
        EXPECT(gpurt_blas_handles_release(0), GPURT_SUCCESS);
        EXPECT(gpurt_blas_handle(s, &again), GPURT_SUCCESS);
        expect_bound(again, s, BLAS_WORKSPACE, 3);
    }
    EXPECT(gpurt_blas_handles_release(99), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(set_mode(again, 0) == 0, "default math again");
}

int main(int argc, char **argv) {
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_stream_t s = NULL;
    int count = 0;
    int expect_missing = argc > 1 && strcmp(argv[1], "missing") == 0;
    void *lib;
    setenv("CUBLAS_WORKSPACE_CONFIG", ":1024:2", 1);
    setenv("CUBLASLT_WORKSPACE_SIZE", "64", 1);
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count < 1) {
        printf("blas_test: skipped (no device: %s)\n", gpurt_last_error_message());
        return getenv("GPURT_REQUIRE_GPU") ? 1 : 0;
    }
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s), GPURT_SUCCESS);
    misuse(s);
    if (expect_missing) {
        missing(s);
        other_libraries(s);
    } else {
        gpurt_status_t in_capture[2] = {GPURT_ERROR_INTERNAL, GPURT_ERROR_INTERNAL};
        pthread_t t;
        int version = 0;
        /* Loading the libraries (a version asks for no handle) makes the stand-ins' hooks reachable. */
        EXPECT(gpurt_math_library_version(GPURT_MATH_CUBLAS, &version), GPURT_SUCCESS);
        EXPECT(gpurt_math_library_version(GPURT_MATH_CUBLASLT, &version), GPURT_SUCCESS);
        lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_NOLOAD);
        *(void **)(&math_state) = lib ? dlsym(lib, "stub_math_state") : NULL; /* POSIX: function pointers from dlsym */
        *(void **)(&math_fail_nth) = lib ? dlsym(lib, "stub_math_fail_nth") : NULL;
        present(s);
        other_libraries(s);
        workspace_out_of_memory();
        if (math_state && math_fail_nth) failures_injected(s);
        pthread_create(&t, NULL, capture_first_handle, in_capture);
        pthread_join(t, NULL);
        EXPECT(in_capture[0], GPURT_SUCCESS);
        EXPECT(in_capture[1], GPURT_SUCCESS);
        released(s);
    }
    EXPECT(gpurt_stream_destroy(s), GPURT_SUCCESS);
    printf("blas_test (%s, %s): %d checks, %d failures\n", props.name, expect_missing ? "libraries missing" : "libraries present", checks, failures);
    return failures != 0;
}
