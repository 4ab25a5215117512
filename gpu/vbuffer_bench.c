/* A growable buffer's map + unmap of 2 MiB through gpurt against the raw driver's
 * cuMemCreate + cuMemMap + cuMemSetAccess (+ cuMemUnmap + cuMemRelease to undo them),
 * in one process, rounds alternated, medians (GPU suite; target: gpurt within 2x).
 *   vbuffer_bench */
#include <cuda.h>
#include <gpurt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROUNDS 21
#define REPS 200
#define OK(call) do { if ((call) != 0) { fprintf(stderr, "%s:%d: %s failed (%s)\n", __FILE__, __LINE__, #call, gpurt_last_error_message()); exit(1); } } while (0)

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    gpurt_vbuffer_t vb;
    gpurt_stream_t s;
    CUdeviceptr raw_base;
    CUmemAllocationProp prop = {0};
    CUmemAccessDesc access = {0};
    size_t g = 0;
    double raw[ROUNDS], ours[ROUNDS];
    OK(gpurt_set_device(0)); /* the device's primary context current, for the raw calls */
    OK(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s));
    OK(gpurt_vbuffer_create(0, 64u << 20, &vb));
    OK(gpurt_vbuffer_granularity(vb, &g));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    OK(cuMemAddressReserve(&raw_base, 64u << 20, 0, 0, 0));
    for (int r = 0; r < ROUNDS; r++) {
        double t = now_us();
        for (int i = 0; i < REPS; i++) {
            CUmemGenericAllocationHandle h;
            OK(cuMemCreate(&h, g, &prop, 0));
            OK(cuMemMap(raw_base, g, 0, h, 0));
            OK(cuMemSetAccess(raw_base, g, &access, 1));
            OK(cuMemUnmap(raw_base, g));
            OK(cuMemRelease(h));
        }
        raw[r] = (now_us() - t) / REPS;
        t = now_us();
        for (int i = 0; i < REPS; i++) {
            OK(gpurt_vbuffer_map(vb, 0, g));
            OK(gpurt_vbuffer_unmap(vb, 0, g, s));
        }
        ours[r] = (now_us() - t) / REPS;
    }
    qsort(raw, ROUNDS, sizeof *raw, by_value);
    qsort(ours, ROUNDS, sizeof *ours, by_value);
    double ratio = ours[ROUNDS / 2] / raw[ROUNDS / 2];
    printf("map + unmap of %zu bytes: raw driver (create, map, set access, unmap, release) %.1f us, gpurt_vbuffer_map + _unmap %.1f us: "
           "%.2fx (target <= 2x: %s)\n", g, raw[ROUNDS / 2], ours[ROUNDS / 2], ratio, ratio <= 2 ? "holds" : "DOES NOT hold");
    OK(cuMemAddressFree(raw_base, 64u << 20));
    OK(gpurt_vbuffer_destroy(vb));
    OK(gpurt_stream_destroy(s));
    return ratio > 2;
}
