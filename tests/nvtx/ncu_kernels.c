/* Kernels inside and outside named gpurt NVTX ranges, for ncu's NVTX filter
 * (tests/nvtx/ncu_filter.sh): 3 inside the push/pop range "gpurt-inside", 2 inside
 * the start/end range "gpurt-span", 1 inside the push/pop range "gpurt-layer" of
 * the domain "gpurt-engine", 4 outside any. Each is a random fill. */
#include <gpurt.h>
#include <stdio.h>

#define TRY(call) do { if ((call) != GPURT_SUCCESS) { printf("%s: %s\n", #call, gpurt_last_error_message()); return 1; } } while (0)

static int fill(void *buf, gpurt_stream_t s, int n) {
    int i;
    for (i = 0; i < n; i++) TRY(gpurt_random_uniform(NULL, buf, 1 << 16, GPURT_DTYPE_F32, s));
    return 0;
}

int main(void) {
    gpurt_stream_t s;
    void *buf;
    uint64_t span;
    gpurt_nvtx_domain_t engine;
    TRY(gpurt_stream_create(0, 0, 0, &s));
    TRY(gpurt_malloc(4 << 16, s, &buf));
    if (fill(buf, s, 2)) return 1;
    TRY(gpurt_nvtx_range_push("gpurt-inside", NULL));
    if (fill(buf, s, 3)) return 1;
    TRY(gpurt_nvtx_range_pop(NULL));
    if (fill(buf, s, 1)) return 1;
    TRY(gpurt_nvtx_range_start("gpurt-span", &span));
    if (fill(buf, s, 2)) return 1;
    TRY(gpurt_nvtx_range_end(span));
    if (fill(buf, s, 1)) return 1;
    TRY(gpurt_nvtx_domain_create("gpurt-engine", &engine));
    TRY(gpurt_nvtx_range_push_ex(engine, "gpurt-layer", 0xff0000ffu, 1, NULL));
    if (fill(buf, s, 1)) return 1;
    TRY(gpurt_nvtx_range_pop_ex(engine, NULL));
    TRY(gpurt_nvtx_domain_destroy(engine));
    TRY(gpurt_stream_synchronize(s));
    TRY(gpurt_free(buf));
    TRY(gpurt_stream_destroy(s));
    printf("ncu_kernels: 10 fills, 3 in gpurt-inside, 2 in gpurt-span, 1 in gpurt-engine's gpurt-layer\n");
    return 0;
}
