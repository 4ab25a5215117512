/* The math-library handles beside raw cuBLAS, in one process (GPU suite; built there
 * against CUDA's cuBLAS headers). Medians over rounds; raw and gpurt rounds alternate.
 *
 *  - raw cublasCreate (the process's first, then create + destroy after);
 *  - per call: gpurt_blas_handle on the stream its handle is bound to (target
 *    <= 20 ns), on alternating streams (target: at most 20 ns over raw
 *    cublasSetStream + cublasSetWorkspace, measured in turn within each round), gpurt_blaslt_handle, gpurt_current_blas_handle;
 *  - GEMMs through gpurt's handle (asked for before every GEMM, as a caller does)
 *    against a raw handle with its own workspace of the same size: fp32 1024^3 and
 *    4096^3, fp16 4096^3 (fp32 accumulation), a batch-1 GEMV shape (target: within 1 %).
 */
#include <cublas_v2.h>
#include <gpurt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROUNDS 21
#define OK(call) do { if ((call) != 0) { fprintf(stderr, "%s:%d: %s failed (%s)\n", __FILE__, __LINE__, #call, gpurt_last_error_message()); exit(1); } } while (0)

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return v[n / 2];
}

/* Per-call cost of `body` in ns: median over rounds of `calls` calls. */
#define PER_CALL(result, calls, body)                                          \
    do {                                                                       \
        double samples_[ROUNDS];                                               \
        int r_, i_;                                                            \
        for (r_ = 0; r_ < ROUNDS; r_++) {                                      \
            double t0_ = now_ns();                                             \
            for (i_ = 0; i_ < (calls); i_++) { body; }                         \
            samples_[r_] = (now_ns() - t0_) / (calls);                         \
        }                                                                      \
        result = median(samples_, ROUNDS);                                     \
    } while (0)

typedef struct {
    const char *name;
    int m, n, k;
    cudaDataType_t type;
} Shape;

/* One GEMM of `shape` on `handle` (asked from gpurt first when `stream` is set). */
static void gemm(cublasHandle_t raw, gpurt_stream_t stream, const Shape *sh, void *a, void *b, void *c) {
    const float one = 1, zero = 0;
    cublasHandle_t h = raw;
    if (stream) OK(gpurt_blas_handle(stream, (void **)&h));
    OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, sh->m, sh->n, sh->k, &one, a, sh->type, sh->m, b, sh->type, sh->k, &zero, c, sh->type, sh->m,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* ms per GEMM over `reps` GEMMs, by events on `s`. */
static double time_gemms(cublasHandle_t raw, gpurt_stream_t via, gpurt_stream_t s, const Shape *sh, void *a, void *b, void *c, int reps) {
    gpurt_event_t start, stop;
    float ms = 0;
    int i;
    OK(gpurt_event_create(0, 0, &start));
    OK(gpurt_event_create(0, 0, &stop));
    OK(gpurt_event_record(start, s));
    for (i = 0; i < reps; i++) gemm(raw, via, sh, a, b, c);
    OK(gpurt_event_record(stop, s));
    OK(gpurt_event_synchronize(stop));
    OK(gpurt_event_elapsed_time(start, stop, &ms));
    gpurt_event_destroy(start);
    gpurt_event_destroy(stop);
    return ms / reps;
}

int main(void) {
    gpurt_stream_t s1 = NULL, s2 = NULL;
    void *n1 = NULL, *n2 = NULL, *ws1 = NULL, *ws2 = NULL, *h = NULL, *lt = NULL, *lt_ws = NULL;
    cublasHandle_t raw = NULL, tmp = NULL;
    size_t ws_size = 0, lt_size = 0, made = 0, idle = 0;
    double first_create, create_destroy, samples[ROUNDS];
    double raw_same, raw_switch, raw_set_ws, g_same, g_switch, g_extra, aa_extra, g_lt, g_current;
    int r, count = 0, calls = 200000;
    gpurt_memory_stats_t before = GPURT_MEMORY_STATS_INIT, after = GPURT_MEMORY_STATS_INIT;
    static const Shape shapes[] = {{"fp32 1024^3", 1024, 1024, 1024, CUDA_R_32F},
                                   {"fp32 4096^3", 4096, 4096, 4096, CUDA_R_32F},
                                   {"fp16 4096^3", 4096, 4096, 4096, CUDA_R_16F},
                                   {"fp32 GEMV 4096x4096 (batch 1)", 4096, 1, 4096, CUDA_R_32F},
                                   {"fp16 GEMV 4096x4096 (batch 1)", 4096, 1, 4096, CUDA_R_16F}};
    size_t i;

    if (gpurt_device_count(&count) != GPURT_SUCCESS || count < 1) {
        printf("blas_bench: skipped (no device: %s)\n", gpurt_last_error_message());
        return getenv("GPURT_REQUIRE_GPU") ? 1 : 0;
    }
    OK(gpurt_set_device(0));
    OK(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s1));
    OK(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s2));
    OK(gpurt_stream_native(s1, &n1));
    OK(gpurt_stream_native(s2, &n2));

    /* Raw creation: the process's first, then create + destroy. */
    {
        double t0 = now_ns();
        OK(cublasCreate(&raw));
        first_create = (now_ns() - t0) / 1e6;
        for (r = 0; r < ROUNDS; r++) {
            t0 = now_ns();
            OK(cublasCreate(&tmp));
            OK(cublasDestroy(tmp));
            samples[r] = (now_ns() - t0) / 1e3;
        }
        create_destroy = median(samples, ROUNDS);
    }

    /* gpurt's handle: its workspaces' size serves the raw handle too. */
    OK(gpurt_memory_stats(0, &before));
    OK(gpurt_blas_handle(s1, &h));
    OK(gpurt_memory_stats(0, &after));
    ws_size = (size_t)(after.allocated_bytes.all.current - before.allocated_bytes.all.current);
    OK(gpurt_blas_handle(s2, &h));
    OK(gpurt_malloc(ws_size, s1, &ws1));
    OK(gpurt_malloc(ws_size, s2, &ws2));
    OK(cublasSetStream(raw, (cudaStream_t)n1));
    OK(cublasSetWorkspace(raw, ws1, ws_size));

    /* Per-call costs, raw and gpurt alternating by measurement. */
    PER_CALL(raw_same, calls, OK(cublasSetStream(raw, (cudaStream_t)n1)));
    PER_CALL(raw_set_ws, calls, OK(cublasSetWorkspace(raw, ws1, ws_size)));
    /* Switching streams: raw and gpurt in turn within each round, the median of
     * each and of gpurt's extra cost per round. */
    {
        double raw_t[ROUNDS], g_t[ROUNDS], extra[ROUNDS], control[ROUNDS], t0;
        int j, side;
        for (r = 0; r < ROUNDS; r++) {
            double raw_twice[2];
            for (side = 0; side < 2; side++) { /* raw twice: the A/A control */
                t0 = now_ns();
                for (j = 0; j < calls; j++) {
                    OK(cublasSetStream(raw, (cudaStream_t)((j & 1) ? n2 : n1)));
                    OK(cublasSetWorkspace(raw, (j & 1) ? ws2 : ws1, ws_size));
                }
                raw_twice[side] = (now_ns() - t0) / calls;
                if (side == 0) {
                    t0 = now_ns();
                    for (j = 0; j < calls; j++) OK(gpurt_blas_handle((j & 1) ? s2 : s1, &h));
                    g_t[r] = (now_ns() - t0) / calls;
                }
            }
            raw_t[r] = (raw_twice[0] + raw_twice[1]) / 2;
            extra[r] = g_t[r] - raw_t[r];
            control[r] = raw_twice[1] - raw_twice[0];
        }
        raw_switch = median(raw_t, ROUNDS);
        g_switch = median(g_t, ROUNDS);
        g_extra = median(extra, ROUNDS);
        aa_extra = median(control, ROUNDS);
    }
    PER_CALL(g_same, calls * 10, OK(gpurt_blas_handle(s1, &h)));
    OK(gpurt_blaslt_handle(s1, &lt, &lt_ws, &lt_size));
    PER_CALL(g_lt, calls * 10, OK(gpurt_blaslt_handle(s1, &lt, &lt_ws, &lt_size)));
    OK(gpurt_set_stream(s1));
    PER_CALL(g_current, calls * 10, OK(gpurt_current_blas_handle(&h)));
    OK(gpurt_math_handle_counts(GPURT_MATH_CUBLAS, 0, &made, &idle));

    printf("cuBLAS handles (%s workspace of %zu bytes, cuBLASLt %zu; %zu handle(s) created by gpurt)\n", "per stream", ws_size, lt_size, made);
    printf("  raw cublasCreate, first in process       %10.2f ms\n", first_create);
    printf("  raw cublasCreate + cublasDestroy after   %10.1f us\n", create_destroy);
    printf("  raw cublasSetStream                      %10.1f ns\n", raw_same);
    printf("  raw cublasSetWorkspace                   %10.1f ns\n", raw_set_ws);
    printf("  raw SetStream + SetWorkspace, 2 streams  %10.1f ns\n", raw_switch);
    printf("  gpurt_blas_handle, bound stream          %10.1f ns   target <= 20 ns: %s\n", g_same, g_same <= 20 ? "PASS" : "FAIL");
    printf("  gpurt_blas_handle, 2 streams alternating %10.1f ns   gpurt's extra cost over raw %.1f ns (median of rounds), target <= 20 ns: %s\n",
           g_switch, g_extra, g_extra <= 20 ? "PASS" : "FAIL");
    printf("  A/A: raw SetStream + SetWorkspace against itself, in the same rounds: %.1f ns\n", aa_extra);
    printf("  gpurt_blaslt_handle, bound stream        %10.1f ns\n", g_lt);
    printf("  gpurt_current_blas_handle                %10.1f ns\n", g_current);

    /* GEMMs: raw handle (own workspace) and gpurt's handle alternate by round. */
    for (i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const Shape *sh = &shapes[i];
        size_t elem = sh->type == CUDA_R_16F ? 2 : 4;
        void *a = NULL, *b = NULL, *c = NULL;
        double raw_ms[ROUNDS], g_ms[ROUNDS], ratio[ROUNDS], aa[ROUNDS], raw_med, g_med, g_ratio;
        int reps = sh->n == 1 ? 2000 : (sh->m >= 4096 ? 20 : 100); /* a GEMV takes ~10 us: many, so launch jitter averages out */
        OK(gpurt_malloc((size_t)sh->m * sh->k * elem, s1, &a));
        OK(gpurt_malloc((size_t)sh->k * sh->n * elem, s1, &b));
        OK(gpurt_malloc((size_t)sh->m * sh->n * elem, s1, &c));
        OK(gpurt_memset_async(a, 0x3c00, 2, (size_t)sh->m * sh->k * elem / 2, s1)); /* fp16 1.0; a small fp32 value */
        OK(gpurt_memset_async(b, 0x3c00, 2, (size_t)sh->k * sh->n * elem / 2, s1));
        OK(cublasSetStream(raw, (cudaStream_t)n1));
        OK(cublasSetWorkspace(raw, ws1, ws_size));
        time_gemms(raw, NULL, s1, sh, a, b, c, reps); /* warm-up of both */
        time_gemms(NULL, s1, s1, sh, a, b, c, reps);
        /* Each round: raw, gpurt, raw; gpurt against the mean of the raw runs around it
         * (drift within a round cancels), and the second raw against the first (A/A). */
        for (r = 0; r < ROUNDS; r++) {
            double before = time_gemms(raw, NULL, s1, sh, a, b, c, reps);
            g_ms[r] = time_gemms(NULL, s1, s1, sh, a, b, c, reps);
            double after = time_gemms(raw, NULL, s1, sh, a, b, c, reps);
            raw_ms[r] = (before + after) / 2;
            ratio[r] = g_ms[r] / raw_ms[r];
            aa[r] = after / before;
        }
        raw_med = median(raw_ms, ROUNDS);
        g_med = median(g_ms, ROUNDS);
        g_ratio = median(ratio, ROUNDS);
        printf("  GEMM %-30s raw %9.4f ms  gpurt %9.4f ms  ratio %.4f (A/A %.4f)  target within 1 %%: %s\n", sh->name, raw_med, g_med, g_ratio,
               median(aa, ROUNDS), g_ratio <= 1.01 ? "PASS" : "FAIL");
        gpurt_free(a), gpurt_free(b), gpurt_free(c);
    }
    cublasDestroy(raw);
    gpurt_free(ws1), gpurt_free(ws2);
    return 0;
}
