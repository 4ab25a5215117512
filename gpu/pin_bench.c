/* How fast host memory for an offload can be had (issue #56, the first sleep's stall):
 * cuMemHostAlloc of N GiB against anonymous memory advised into huge pages, touched by
 * T threads and registered with cuMemHostRegister, and against plain pageable memory
 * the driver copies into itself; each followed by a device-to-host copy of N GiB into
 * it, and a second copy (the warm rate). Fresh memory each round, medians of R.
 *
 *   pin_bench GIB THREADS ROUNDS */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define CK(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { const char *n_; cuGetErrorName(r_, &n_); fprintf(stderr, "%s: %s\n", #call, n_); exit(1); } } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

typedef struct { char *base; size_t bytes; } Part;

static void *touch(void *arg) {
    Part *p = arg;
    size_t i;
    for (i = 0; i < p->bytes; i += 4096) p->base[i] = 0;
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    size_t gib = argc > 1 ? (size_t)atoi(argv[1]) : 8, bytes = gib << 30;
    int threads = argc > 2 ? atoi(argv[2]) : 8, rounds = argc > 3 ? atoi(argv[3]) : 3, r, t, way;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d;
    static const char *names[] = {"cuMemHostAlloc", "mmap+hugepages+touch+register", "mmap+hugepages+register (no touch)", "pageable (driver stages)"};
    double get[4][16], first[4][16], warm[4][16];
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemAlloc(&d, bytes));
    CK(cuMemsetD8(d, 7, bytes));
    if (rounds > 16) rounds = 16;
    for (r = 0; r < rounds; r++)
        for (way = 0; way < 4; way++) {
            void *host = NULL;
            double t0 = now();
            if (way == 0) {
                CK(cuMemHostAlloc(&host, bytes, 0));
            } else {
                pthread_t tid[64];
                Part parts[64];
                host = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (host == MAP_FAILED) { perror("mmap"); return 1; }
                madvise(host, bytes, MADV_HUGEPAGE);
                if (way == 1 || way == 3) {
                    for (t = 0; t < threads; t++) {
                        parts[t].base = (char *)host + bytes / (size_t)threads * (size_t)t;
                        parts[t].bytes = bytes / (size_t)threads;
                        pthread_create(&tid[t], NULL, touch, &parts[t]);
                    }
                    for (t = 0; t < threads; t++) pthread_join(tid[t], NULL);
                }
                if (way == 1 || way == 2) CK(cuMemHostRegister(host, bytes, 0));
            }
            get[way][r] = now() - t0;
            t0 = now();
            CK(cuMemcpyDtoH(host, d, bytes));
            first[way][r] = now() - t0;
            t0 = now();
            CK(cuMemcpyDtoH(host, d, bytes));
            warm[way][r] = now() - t0;
            if (((unsigned char *)host)[bytes - 1] != 7) { fprintf(stderr, "wrong bytes\n"); return 1; }
            if (way == 0) CK(cuMemFreeHost(host));
            else {
                if (way == 1 || way == 2) CK(cuMemHostUnregister(host));
                munmap(host, bytes);
            }
        }
    printf("pin_bench: %zu GiB, %d threads, medians of %d\n", gib, threads, rounds);
    for (way = 0; way < 4; way++) {
        qsort(get[way], (size_t)rounds, sizeof(double), cmp);
        qsort(first[way], (size_t)rounds, sizeof(double), cmp);
        qsort(warm[way], (size_t)rounds, sizeof(double), cmp);
        printf("%-36s  get %8.1f ms  first copy %7.1f ms  get+copy %8.1f ms  warm copy %7.1f ms (%.1f GiB/s)\n", names[way], get[way][rounds / 2],
               first[way][rounds / 2], get[way][rounds / 2] + first[way][rounds / 2], warm[way][rounds / 2], (double)gib / (warm[way][rounds / 2] / 1e3));
    }
    return 0;
}
