/* Green contexts on the GPU, with cuBLAS through gpurt's math-library handles (GPU
 * suite; built there against CUDA's cuBLAS):
 *
 *  - each share's GEMM throughput against the whole device's: a green context of
 *    S SMs runs fp16 8192^3 GEMMs at S / total of the full rate (target: within 10 %);
 *  - two contexts split from one device ({16, rest}), run at once: each one's rate at
 *    its share of SMs (target: within 10 %), and against its rate alone;
 *  - a 16-SM context's GEMMs running beside a full-device stream's: the full-device
 *    GEMM slows by at most the 16 SMs' share (+5 points), where a second full-device
 *    stream beside it (no green context) takes about half.
 *
 * Medians of ROUNDS rounds; each round's GEMM time from events on its stream.
 *   green_bench */
#include <cublas_v2.h>
#include <gpurt.h>
#include <stdio.h>
#include <stdlib.h>

#define ROUNDS 7
#define N 8192
#define OK(call) do { if ((call) != 0) { fprintf(stderr, "%s:%d: %s failed (%s)\n", __FILE__, __LINE__, #call, gpurt_last_error_message()); exit(1); } } while (0)

static void *a, *b, *c, *c2;

static int by_value(const void *x, const void *y) {
    double p = *(const double *)x, q = *(const double *)y;
    return (p > q) - (p < q);
}

static void gemms(gpurt_stream_t stream, void *out, int reps) {
    const float one = 1, zero = 0;
    cublasHandle_t h = NULL;
    OK(gpurt_blas_handle(stream, (void **)&h));
    for (int i = 0; i < reps; i++)
        OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a, CUDA_R_16F, N, b, CUDA_R_16F, N, &zero, out, CUDA_R_16F, N,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* TFLOP/s of `reps` GEMMs on `stream` (median over rounds); with `beside`, each round
 * also runs `beside_reps` GEMMs there, queued first, so that both overlap. */
static double tflops(gpurt_stream_t stream, int reps, gpurt_stream_t beside, int beside_reps) {
    double v[ROUNDS];
    gpurt_event_t start, stop;
    OK(gpurt_event_create(0, 0, &start));
    OK(gpurt_event_create(0, 0, &stop));
    gemms(stream, c, 1); /* warm: cuBLAS's kernel choice and the handle's workspace */
    OK(gpurt_stream_synchronize(stream));
    for (int r = 0; r < ROUNDS; r++) {
        float ms = 0;
        if (beside) gemms(beside, c2, beside_reps);
        OK(gpurt_event_record(start, stream));
        gemms(stream, c, reps);
        OK(gpurt_event_record(stop, stream));
        OK(gpurt_event_synchronize(stop));
        if (beside) OK(gpurt_stream_synchronize(beside));
        OK(gpurt_event_elapsed_time(start, stop, &ms));
        v[r] = 2.0 * N * N * (double)N * reps / (ms * 1e-3) / 1e12;
    }
    OK(gpurt_event_destroy(start));
    OK(gpurt_event_destroy(stop));
    qsort(v, ROUNDS, sizeof *v, by_value);
    return v[ROUNDS / 2];
}

int main(void) {
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_stream_t full, other;
    int failures = 0;
    const unsigned shares[] = {16, 32, 64};
    OK(gpurt_device_get_properties(0, &props));
    unsigned total = (unsigned)props.multiprocessor_count;
    size_t bytes = (size_t)N * N * 2;
    OK(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &full));
    OK(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &other));
    OK(gpurt_malloc(bytes, full, &a));
    OK(gpurt_malloc(bytes, full, &b));
    OK(gpurt_malloc(bytes, full, &c));
    OK(gpurt_malloc(bytes, full, &c2));
    OK(gpurt_memset_async(a, 0x3c00, 2, (size_t)N * N, full)); /* fp16 1.0: finite sums */
    OK(gpurt_memset_async(b, 0x2c00, 2, (size_t)N * N, full)); /* fp16 0.0625 */
    OK(gpurt_stream_synchronize(full));
    double whole = tflops(full, 10, NULL, 0);
    printf("%s, %u SMs: fp16 %d^3 GEMM on a full-device stream: %.0f TFLOP/s\n", props.name, total, N, whole);
    for (unsigned i = 0; i < sizeof shares / sizeof *shares; i++) {
        gpurt_green_context_t g;
        gpurt_stream_t s;
        unsigned got = 0;
        OK(gpurt_green_context_create(0, shares[i], &g));
        OK(gpurt_green_context_sm_count(g, &got));
        OK(gpurt_green_context_stream_create(g, GPURT_STREAM_NON_BLOCKING, 0, &s));
        double t = tflops(s, 3, NULL, 0), want = whole * got / total;
        int holds = t >= want * 0.9 && t <= want * 1.1;
        failures += !holds;
        printf("green context of %u SMs: %.0f TFLOP/s = %.3f of the device's rate, its share %.3f: %s (within 10 %%)\n", got, t, t / whole,
               (double)got / total, holds ? "holds" : "DOES NOT hold");
        OK(gpurt_stream_destroy(s));
        OK(gpurt_green_context_destroy(g));
    }
    {
        /* Disjoint contexts, at once: the 16-SM one runs beside the rest's GEMMs. */
        gpurt_green_context_t g[2];
        gpurt_stream_t s[2];
        unsigned counts[2] = {16, 0}, got[2];
        OK(gpurt_green_context_split(0, counts, 2, g));
        for (int i = 0; i < 2; i++) {
            OK(gpurt_green_context_sm_count(g[i], &got[i]));
            OK(gpurt_green_context_stream_create(g[i], GPURT_STREAM_NON_BLOCKING, 0, &s[i]));
        }
        double small_alone = tflops(s[0], 2, NULL, 0), rest_alone = tflops(s[1], 8, NULL, 0);
        double small_beside = tflops(s[0], 2, s[1], 16), rest_beside = tflops(s[1], 8, s[0], 2);
        double small_follows = small_beside / whole / ((double)got[0] / total), rest_follows = rest_beside / whole / ((double)got[1] / total);
        int holds = small_follows >= 0.9 && small_follows <= 1.1 && rest_follows >= 0.9 && rest_follows <= 1.1;
        failures += !holds;
        printf("split {16, rest} = {%u, %u} SMs: alone %.0f / %.0f TFLOP/s, at once %.0f / %.0f (%.2f / %.2f of alone): at once, each one's "
               "rate is %.2f / %.2f x its share of the device's (within 10 %%: %s)\n",
               got[0], got[1], small_alone, rest_alone, small_beside, rest_beside, small_beside / small_alone, rest_beside / rest_alone,
               small_follows, rest_follows, holds ? "holds" : "DOES NOT hold");
        /* A full-device stream beside the 16-SM context, then beside another full-device stream. */
        double beside_green = tflops(full, 10, s[0], 6), beside_full = tflops(full, 10, other, 10);
        double slowdown = 1 - beside_green / whole, share = (double)got[0] / total;
        holds = slowdown <= share + 0.05;
        failures += !holds;
        printf("full-device GEMMs beside the %u-SM context's: %.0f TFLOP/s, %.1f %% slower (its share %.1f %%, +5 points allowed: %s); "
               "beside another full-device stream: %.0f TFLOP/s, %.1f %% slower\n",
               got[0], beside_green, 100 * slowdown, 100 * share, holds ? "holds" : "DOES NOT hold", beside_full, 100 * (1 - beside_full / whole));
        for (int i = 0; i < 2; i++) {
            OK(gpurt_stream_destroy(s[i]));
            OK(gpurt_green_context_destroy(g[i]));
        }
    }
    OK(gpurt_free(a));
    OK(gpurt_free(b));
    OK(gpurt_free(c));
    OK(gpurt_free(c2));
    printf("green_bench: %d target(s) missed\n", failures);
    return failures != 0;
}
