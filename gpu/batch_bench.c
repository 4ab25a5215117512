/* Issue #57's benchmark for gpurt_memcpy_batch_async: 10 000 copies of 16 KiB from
 * device to pinned host memory, side by side in one process with a loop of
 * gpurt_memcpy_async and the driver's own cuMemcpyBatchAsync made directly on the same
 * native stream; taken in turns, medians of 15, bytes checked after each. Targets:
 * >= 5x the loop, within 10 % of the driver's call.
 *
 *   batch_bench */
#include <cuda.h>
#include <gpurt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COPIES 10000
#define BYTES ((size_t)16 << 10)
#define ROUNDS 15

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define OK(call) do { if ((call) != GPURT_SUCCESS) { fprintf(stderr, "%s: %s\n", #call, gpurt_last_error_message()); return 1; } } while (0)

int main(void) {
    gpurt_stream_t stream;
    gpurt_pinned_pool_t pinned;
    void *native = NULL;
    unsigned char *device, *host, *want = malloc(COPIES * BYTES);
    void **dsts = malloc(COPIES * sizeof(void *));
    const void **srcs = malloc(COPIES * sizeof(void *));
    size_t *sizes = malloc(COPIES * sizeof(size_t)), attr_index = 0, i;
    CUdeviceptr *raw_dsts = malloc(COPIES * sizeof(CUdeviceptr)), *raw_srcs = malloc(COPIES * sizeof(CUdeviceptr));
    CUmemcpyAttributes attrs;
    double loop[ROUNDS], batch[ROUNDS], raw[ROUNDS];
    int r, wrong = 0;
    CUcontext primary;
    CUdevice dev;
    OK(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream));
    /* gpurt makes its device current around its own calls; the raw call needs it current here. */
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&primary, dev) != CUDA_SUCCESS || cuCtxSetCurrent(primary) != CUDA_SUCCESS) {
        fprintf(stderr, "no primary context\n");
        return 1;
    }
    OK(gpurt_stream_native(stream, &native));
    OK(gpurt_pinned_pool_default(&pinned));
    OK(gpurt_malloc(COPIES * BYTES, stream, (void **)&device));
    OK(gpurt_pinned_malloc(pinned, COPIES * BYTES, (void **)&host));
    for (i = 0; i < COPIES * BYTES; i++) want[i] = (unsigned char)(rand() >> 7);
    OK(gpurt_memcpy(device, want, COPIES * BYTES, stream));
    for (i = 0; i < COPIES; i++) {
        dsts[i] = host + i * BYTES;
        srcs[i] = device + i * BYTES;
        raw_dsts[i] = (CUdeviceptr)(uintptr_t)dsts[i];
        raw_srcs[i] = (CUdeviceptr)(uintptr_t)srcs[i];
        sizes[i] = BYTES;
    }
    memset(&attrs, 0, sizeof attrs);
    attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    for (r = 0; r < ROUNDS; r++) {
        double t;
        memset(host, 0, COPIES * BYTES);
        t = now_ms();
        for (i = 0; i < COPIES; i++) OK(gpurt_memcpy_async(dsts[i], srcs[i], sizes[i], stream));
        OK(gpurt_stream_synchronize(stream));
        loop[r] = now_ms() - t;
        wrong += memcmp(host, want, COPIES * BYTES) != 0;
        memset(host, 0, COPIES * BYTES);
        t = now_ms();
        OK(gpurt_memcpy_batch_async(dsts, srcs, sizes, COPIES, stream));
        OK(gpurt_stream_synchronize(stream));
        batch[r] = now_ms() - t;
        wrong += memcmp(host, want, COPIES * BYTES) != 0;
        memset(host, 0, COPIES * BYTES);
        t = now_ms();
        {
            CUresult code = cuMemcpyBatchAsync(raw_dsts, raw_srcs, sizes, COPIES, &attrs, &attr_index, 1, (CUstream)native);
            const char *name = "?";
            if (code != CUDA_SUCCESS) {
                cuGetErrorName(code, &name);
                fprintf(stderr, "cuMemcpyBatchAsync failed: %s\n", name);
                return 1;
            }
        }
        OK(gpurt_stream_synchronize(stream));
        raw[r] = now_ms() - t;
        wrong += memcmp(host, want, COPIES * BYTES) != 0;
    }
    qsort(loop, ROUNDS, sizeof(double), cmp);
    qsort(batch, ROUNDS, sizeof(double), cmp);
    qsort(raw, ROUNDS, sizeof(double), cmp);
    printf("batch_bench: %d copies of %zu KiB device->pinned, medians of %d in turns: loop of gpurt_memcpy_async %.3f ms, gpurt_memcpy_batch_async %.3f ms, "
           "cuMemcpyBatchAsync %.3f ms\n", COPIES, BYTES >> 10, ROUNDS, loop[ROUNDS / 2], batch[ROUNDS / 2], raw[ROUNDS / 2]);
    printf("batch_bench: %.1fx the loop (target >= 5), %.3f x the driver's call (target <= 1.10); %d wrong copies\n", loop[ROUNDS / 2] / batch[ROUNDS / 2], batch[ROUNDS / 2] / raw[ROUNDS / 2], wrong);
    return wrong == 0 && loop[ROUNDS / 2] / batch[ROUNDS / 2] >= 5 && batch[ROUNDS / 2] / raw[ROUNDS / 2] <= 1.10 ? 0 : 1;
}
