/* A kernel compiled at run time with NVRTC (cached: the second lookup is a hash
 * lookup) and an elementwise expression (torch's jiterator), both checked. */
#include "example.h"
#include <math.h>

static const char *saxpy =
    "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, unsigned n)"
    "{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }";

int main(void) {
    gpurt_stream_t stream;
    gpurt_kernel_t kernel, again;
    float *x, *y, *z, *hx, *hy, *hz, a = 2.5f;
    unsigned n = 1 << 20, i, bad = 0;
    int major, minor;
    void *args[4];
    const char *names[] = {"x", "y"};
    const void *inputs[2];
    require_gpu("rtc-kernel");
    if (gpurt_rtc_version(&major, &minor) != GPURT_SUCCESS) {
        printf("rtc-kernel: NVRTC is not installed: nothing to run\n");
        return 0;
    }
    CHECK(gpurt_stream_from_pool(0, 0, &stream));
    CHECK(gpurt_rtc_get_kernel(saxpy, "saxpy", NULL, 0, &kernel));
    CHECK(gpurt_rtc_get_kernel(saxpy, "saxpy", NULL, 0, &again)); /* from the cache */
    hx = (float *)malloc(n * sizeof(float));
    hy = (float *)malloc(n * sizeof(float));
    hz = (float *)malloc(n * sizeof(float));
    for (i = 0; i < n; i++) {
        hx[i] = (float)(i % 1000) / 7.0f;
        hy[i] = (float)(i % 333) - 100.0f;
    }
    CHECK(gpurt_malloc(n * sizeof(float), stream, (void **)&x));
    CHECK(gpurt_malloc(n * sizeof(float), stream, (void **)&y));
    CHECK(gpurt_malloc(n * sizeof(float), stream, (void **)&z));
    CHECK(gpurt_memcpy_async(x, hx, n * sizeof(float), stream));
    CHECK(gpurt_memcpy_async(y, hy, n * sizeof(float), stream));
    args[0] = &a;
    args[1] = &x;
    args[2] = &y;
    args[3] = &n;
    CHECK(gpurt_launch_kernel(kernel, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, args));
    inputs[0] = x;
    inputs[1] = y;
    CHECK(gpurt_elementwise("z = x * y - 1.0f", names, inputs, 2, GPURT_DTYPE_F32, n, z, stream));
    CHECK(gpurt_memcpy(hz, z, n * sizeof(float), stream));
    for (i = 0; i < n; i++) {
        float y1 = a * hx[i] + hy[i];
        bad += fabsf(hz[i] - (hx[i] * y1 - 1.0f)) > 1e-3f * (1.0f + fabsf(hx[i] * y1));
    }
    printf("rtc-kernel: NVRTC %d.%d, saxpy then an elementwise expression over %u floats: %s (cached kernel %s)\n", major,
           minor, n, bad == 0 ? "all correct" : "WRONG", kernel == again ? "reused" : "NOT reused");
    CHECK(gpurt_free(x));
    CHECK(gpurt_free(y));
    CHECK(gpurt_free(z));
    free(hx);
    free(hy);
    free(hz);
    return bad == 0 && kernel == again ? 0 : 1;
}
