/* The math-library handles on a GPU, with exact data (GPU suite; built there against
 * CUDA's cuBLAS headers): integer-valued matrices from fresh random data, so that
 * every fp32 GEMM result is exact and checked element by element on the host.
 *
 *  1. In a fresh process, the first handle is asked for inside a capture: a cuBLAS
 *     GEMM and a cuBLASLt matmul captured on a gpurt stream, replayed 100 times over
 *     inputs rewritten between replays: each replay exact, and identical to the
 *     eager result bit for bit; nothing allocated during the replays.
 *  2. Eager GEMMs through gpurt's handle: 1024^3, odd shapes, a batch-1 GEMV shape,
 *     with TF32 off and on (integers of at most 4 bits stay exact in TF32).
 *  3. 8 threads, each on its own stream, GEMMs at once, each exact; then 8 more
 *     threads reuse their handles (no handle created).
 *  4. cuSOLVER, cuSPARSE and cuDNN handles bound to a stream, where installed.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <gpurt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void random_integers(float *x, size_t n, uint64_t seed) {
    size_t i;
    seed = seed * 0x9e3779b97f4a7c15ull | 1;
    for (i = 0; i < n; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        x[i] = (float)((int)(seed % 17) - 8);
    }
}

/* C = A B, column-major, A m x k, B k x n: exact in double for these integers. */
static void host_gemm(int m, int n, int k, const float *a, const float *b, float *c) {
    int i, j, l;
    double *col = malloc(sizeof(double) * (size_t)m);
    for (j = 0; j < n; j++) {
        for (i = 0; i < m; i++) col[i] = 0;
        for (l = 0; l < k; l++) {
            double bl = b[(size_t)j * k + l];
            const float *al = a + (size_t)l * m;
            for (i = 0; i < m; i++) col[i] += al[i] * bl;
        }
        for (i = 0; i < m; i++) c[(size_t)j * m + i] = (float)col[i];
    }
    free(col);
}

typedef struct {
    int m, n, k;
    float *a, *b, *want, *got; /* host */
    void *da, *db, *dc;        /* device */
} Problem;

static void problem_init(Problem *p, int m, int n, int k, uint64_t seed, gpurt_stream_t s) {
    size_t sa = (size_t)m * k, sb = (size_t)k * n, sc = (size_t)m * n;
    p->m = m, p->n = n, p->k = k;
    p->a = malloc(sa * 4), p->b = malloc(sb * 4), p->want = malloc(sc * 4), p->got = malloc(sc * 4);
    random_integers(p->a, sa, seed);
    random_integers(p->b, sb, seed + 1);
    host_gemm(m, n, k, p->a, p->b, p->want);
    EXPECT(gpurt_malloc(sa * 4, s, &p->da), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(sb * 4, s, &p->db), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(sc * 4, s, &p->dc), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy(p->da, p->a, sa * 4, s), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy(p->db, p->b, sb * 4, s), GPURT_SUCCESS);
}

static void problem_free(Problem *p) {
    free(p->a), free(p->b), free(p->want), free(p->got);
    gpurt_free(p->da), gpurt_free(p->db), gpurt_free(p->dc);
}

/* Whether the device's C equals the host's, element for element. */
static int exact(Problem *p, const void *dc, gpurt_stream_t s) {
    size_t sc = (size_t)p->m * p->n;
    return gpurt_memcpy(p->got, dc, sc * 4, s) == GPURT_SUCCESS && memcmp(p->got, p->want, sc * 4) == 0;
}

static void sgemm(gpurt_stream_t s, Problem *p, void *dc) {
    void *h = NULL;
    const float one = 1, zero = 0;
    EXPECT(gpurt_blas_handle(s, &h), GPURT_SUCCESS);
    CHECK(cublasSgemm((cublasHandle_t)h, CUBLAS_OP_N, CUBLAS_OP_N, p->m, p->n, p->k, &one, p->da, p->m, p->db, p->k, &zero, dc, p->m) == CUBLAS_STATUS_SUCCESS,
          "cublasSgemm %dx%dx%d", p->m, p->n, p->k);
}

static void lt_matmul(gpurt_stream_t s, Problem *p, void *dc) {
    void *h = NULL, *ws = NULL, *native = NULL;
    size_t ws_size = 0;
    const float one = 1, zero = 0;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    EXPECT(gpurt_blaslt_handle(s, &h, &ws, &ws_size), GPURT_SUCCESS);
    EXPECT(gpurt_stream_native(s, &native), GPURT_SUCCESS);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, p->m, p->k, p->m);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, p->k, p->n, p->k);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, p->m, p->n, p->m);
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof ws_size);
    CHECK(cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)h, desc, la, lb, lc, lc, pref, 1, &result, &found) == CUBLAS_STATUS_SUCCESS && found == 1,
          "a cuBLASLt algorithm within %zu bytes of workspace", ws_size);
    if (found == 1)
        CHECK(cublasLtMatmul((cublasLtHandle_t)h, desc, &one, p->da, la, p->db, lb, &zero, dc, lc, dc, lc, &result.algo, ws, ws_size, (cudaStream_t)native) == CUBLAS_STATUS_SUCCESS,
              "cublasLtMatmul %dx%dx%d", p->m, p->n, p->k);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
}

static int64_t allocations(void) {
    gpurt_memory_stats_t st = GPURT_MEMORY_STATS_INIT;
    gpurt_memory_stats(0, &st);
    return st.allocation.all.allocated + st.num_device_alloc;
}

/* 1: the first handles of the process asked for inside a capture, then replays. */
static void capture_and_replay(void) {
    gpurt_stream_t s = NULL;
    gpurt_graph_t graph = NULL;
    gpurt_graph_exec_t exec = NULL;
    Problem p;
    void *lt_c = NULL;
    size_t made = 0, idle = 0, bytes = (size_t)384 * 320 * 4;
    float *eager_blas = malloc(bytes), *eager_lt = malloc(bytes);
    int64_t before;
    int replay, exact_replays = 0, identical = 0;
    EXPECT(gpurt_math_handle_counts(GPURT_MATH_CUBLAS, 0, &made, &idle), GPURT_SUCCESS);
    CHECK(made == 0, "no cuBLAS handle before the capture");
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s), GPURT_SUCCESS);
    problem_init(&p, 384, 320, 448, 11, s);
    EXPECT(gpurt_malloc(bytes, s, &lt_c), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    EXPECT(gpurt_stream_begin_capture(s, GPURT_CAPTURE_MODE_GLOBAL, NULL), GPURT_SUCCESS);
    sgemm(s, &p, p.dc);
    lt_matmul(s, &p, lt_c);
    EXPECT(gpurt_stream_end_capture(s, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_math_handle_counts(GPURT_MATH_CUBLAS, 0, &made, &idle), GPURT_SUCCESS);
    CHECK(made == 1, "the handle was created inside the capture");
    EXPECT(gpurt_graph_instantiate(graph, 0, s, &exec), GPURT_SUCCESS);
    /* The eager result of the same calls, to compare bits with. */
    sgemm(s, &p, p.dc);
    lt_matmul(s, &p, lt_c);
    EXPECT(gpurt_memcpy(eager_blas, p.dc, bytes, s), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy(eager_lt, lt_c, bytes, s), GPURT_SUCCESS);
    CHECK(memcmp(eager_blas, p.want, bytes) == 0 && memcmp(eager_lt, p.want, bytes) == 0, "eager results exact");
    before = allocations();
    for (replay = 0; replay < 100; replay++) {
        /* Garbage in both outputs first: a replay that ran nothing would be caught. */
        EXPECT(gpurt_memset_async(p.dc, 0x7f, 1, bytes, s), GPURT_SUCCESS);
        EXPECT(gpurt_memset_async(lt_c, 0x7f, 1, bytes, s), GPURT_SUCCESS);
        EXPECT(gpurt_graph_launch(exec, s), GPURT_SUCCESS);
        exact_replays += exact(&p, p.dc, s) && memcmp(p.got, eager_blas, bytes) == 0;
        identical += exact(&p, lt_c, s) && memcmp(p.got, eager_lt, bytes) == 0;
    }
    CHECK(exact_replays == 100 && identical == 100, "replays exact and bit-identical: cuBLAS %d, cuBLASLt %d of 100", exact_replays, identical);
    CHECK(allocations() == before, "nothing allocated during the replays (%lld)", (long long)(allocations() - before));
    EXPECT(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    gpurt_free(lt_c);
    problem_free(&p);
    free(eager_blas), free(eager_lt);
    EXPECT(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

/* 2: eager GEMMs of several shapes, cuBLAS and cuBLASLt, TF32 off and on. */
static void shapes(void) {
    static const int dims[][3] = {{1024, 1024, 1024}, {129, 257, 65}, {4096, 1, 1024}, {1, 1, 1}, {640, 384, 1000}};
    gpurt_stream_t s = NULL;
    size_t i;
    int tf32;
    EXPECT(gpurt_stream_from_pool(0, 0, &s), GPURT_SUCCESS);
    for (i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        Problem p;
        problem_init(&p, dims[i][0], dims[i][1], dims[i][2], 100 + i, s);
        for (tf32 = 0; tf32 < 2; tf32++) {
            EXPECT(gpurt_blas_set_allow_tf32(tf32), GPURT_SUCCESS);
            sgemm(s, &p, p.dc);
            CHECK(exact(&p, p.dc, s), "cuBLAS %dx%dx%d, TF32 %d", p.m, p.n, p.k, tf32);
            EXPECT(gpurt_memset_async(p.dc, 0, 1, (size_t)p.m * p.n * 4, s), GPURT_SUCCESS);
        }
        lt_matmul(s, &p, p.dc);
        CHECK(exact(&p, p.dc, s), "cuBLASLt %dx%dx%d", p.m, p.n, p.k);
        problem_free(&p);
    }
    EXPECT(gpurt_blas_set_allow_tf32(0), GPURT_SUCCESS);
}

/* 3: 8 threads at once, each on its own stream. */
typedef struct {
    int index, exact_gemms;
    void *handle;
    pthread_barrier_t *together;
} Worker;

static void *gemms_on_own_stream(void *arg) {
    Worker *w = arg;
    gpurt_stream_t s = NULL;
    int round;
    gpurt_set_device(0);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s), GPURT_SUCCESS);
    pthread_barrier_wait(w->together);
    for (round = 0; round < 10; round++) {
        Problem p;
        problem_init(&p, 256 + 8 * w->index, 192, 320, 1000 * (uint64_t)w->index + round, s);
        sgemm(s, &p, p.dc);
        w->exact_gemms += exact(&p, p.dc, s);
        lt_matmul(s, &p, p.dc);
        w->exact_gemms += exact(&p, p.dc, s);
        problem_free(&p);
    }
    gpurt_blas_handle(s, &w->handle);
    pthread_barrier_wait(w->together);
    EXPECT(gpurt_stream_destroy(s), GPURT_SUCCESS);
    return NULL;
}

static void threads(void) {
    size_t made = 0, idle = 0, made_after = 0;
    int wave, i, j;
    for (wave = 0; wave < 2; wave++) {
        pthread_t t[8];
        Worker w[8];
        pthread_barrier_t together;
        EXPECT(gpurt_math_handle_counts(GPURT_MATH_CUBLAS, 0, &made, &idle), GPURT_SUCCESS);
        pthread_barrier_init(&together, NULL, 8);
        for (i = 0; i < 8; i++) {
            memset(&w[i], 0, sizeof w[i]);
            w[i].index = i, w[i].together = &together;
            pthread_create(&t[i], NULL, gemms_on_own_stream, &w[i]);
        }
        for (i = 0; i < 8; i++) pthread_join(t[i], NULL);
        pthread_barrier_destroy(&together);
        for (i = 0; i < 8; i++) {
            CHECK(w[i].exact_gemms == 20, "wave %d thread %d: %d of 20 GEMMs exact", wave, i, w[i].exact_gemms);
            for (j = 0; j < i; j++) CHECK(w[i].handle != w[j].handle, "threads %d and %d at once shared a handle", i, j);
        }
        EXPECT(gpurt_math_handle_counts(GPURT_MATH_CUBLAS, 0, &made_after, &idle), GPURT_SUCCESS);
        printf("wave %d: cuBLAS handles created %zu -> %zu, %zu idle\n", wave, made, made_after, idle);
        if (wave == 1) CHECK(made_after == made, "the second wave reused the first's handles");
    }
}

/* 4: the other libraries' handles, where installed. */
static void other_libraries(void) {
    static const char *names[] = {"cuSOLVER", "cuSPARSE", "cuDNN"};
    gpurt_status_t (*get[])(gpurt_stream_t, void **) = {gpurt_solver_handle, gpurt_sparse_handle, gpurt_dnn_handle};
    gpurt_stream_t s = NULL;
    int i;
    EXPECT(gpurt_stream_from_pool(0, 0, &s), GPURT_SUCCESS);
    for (i = 0; i < 3; i++) {
        void *h = NULL;
        int version = 0;
        gpurt_status_t st = get[i](s, &h);
        if (st == GPURT_SUCCESS) {
            EXPECT(gpurt_math_library_version((gpurt_math_library_t)(GPURT_MATH_CUSOLVER + i), &version), GPURT_SUCCESS);
            printf("%s %d: handle %p\n", names[i], version, h);
        } else {
            printf("%s: not installed here (%s)\n", names[i], gpurt_last_error_message());
            CHECK(st == GPURT_ERROR_NOT_SUPPORTED, "%s: status %d", names[i], (int)st);
        }
    }
}

int main(void) {
    int count = 0, version = 0;
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count < 1) {
        printf("blas_gpu_test: skipped (no device: %s)\n", gpurt_last_error_message());
        return getenv("GPURT_REQUIRE_GPU") ? 1 : 0;
    }
    EXPECT(gpurt_set_device(0), GPURT_SUCCESS);
    capture_and_replay();
    shapes();
    threads();
    other_libraries();
    EXPECT(gpurt_math_library_version(GPURT_MATH_CUBLAS, &version), GPURT_SUCCESS);
    printf("blas_gpu_test (cuBLAS %d): %d checks, %d failures\n", version, checks, failures);
    return failures != 0;
}
