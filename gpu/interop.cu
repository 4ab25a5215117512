// Interop with the CUDA runtime, built with nvcc on the GPU machine: the device that
// gpurt makes current is the one cudart sees (and back), and a kernel of the
// caller's own, sized from properties read through gpurt, runs on it and its
// result is exact. With two devices: gpurt's copies of one device's memory run
// with the other device current (what the runtime refuses for mapped memory).
#include <cuda_runtime.h>
#include <gpurt.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <random>

#define CHECK_GPURT(call)                                                                          \
    do {                                                                                           \
        gpurt_status_t s_ = (call);                                                                \
        if (s_ != GPURT_SUCCESS) {                                                                 \
            std::printf("FAIL %s: %s: %s\n", #call, gpurt_status_string(s_), gpurt_last_error_message()); \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#define CHECK_CUDA(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            std::printf("FAIL %s: %s\n", #call, cudaGetErrorString(e_));                           \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

__global__ void axpb(const unsigned *in, unsigned *out, unsigned a, unsigned b, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = in[i] * a + b;
}

// Device `owner`'s gpurt memory (expandable segments: mapped for `owner` only),
// copied by gpurt on `owner`'s stream with `current` the current device: 1D and 2D,
// both ways, fresh random bytes. Also says what the runtime's copy answers there.
static int copy_from_other_device(int owner, int current) {
    const size_t width = 384, pitch = 4096, height = 6000; // 23 MiB: rows across two 20 MiB pages
    std::vector<unsigned char> host(pitch * height), rows(width * height), back(pitch * height);
    std::mt19937 rng(std::random_device{}());
    for (auto &c : host) c = (unsigned char)rng();
    gpurt_stream_t stream;
    void *dev;
    CHECK_GPURT(gpurt_stream_create(owner, GPURT_STREAM_NON_BLOCKING, 0, &stream));
    CHECK_GPURT(gpurt_malloc(pitch * height, stream, &dev));
    CHECK_GPURT(gpurt_set_device(current));
    CHECK_GPURT(gpurt_memcpy_async(dev, host.data(), pitch * height, stream));
    CHECK_GPURT(gpurt_memcpy_2d_async(rows.data(), width, dev, pitch, width, height, stream));
    CHECK_GPURT(gpurt_stream_synchronize(stream));
    size_t wrong = 0;
    for (size_t r = 0; r < height; r++) wrong += std::memcmp(&rows[r * width], &host[r * pitch], width) != 0;
    for (auto &c : rows) c = (unsigned char)rng();
    CHECK_GPURT(gpurt_memcpy_2d_async(dev, pitch, rows.data(), width, width, height, stream));
    CHECK_GPURT(gpurt_memcpy_async(back.data(), dev, pitch * height, stream));
    CHECK_GPURT(gpurt_stream_synchronize(stream));
    for (size_t r = 0; r < height; r++)
        wrong += std::memcmp(&back[r * pitch], &rows[r * width], width) != 0 ||
                 std::memcmp(&back[r * pitch + width], &host[r * pitch + width], pitch - width) != 0;
    void *native;
    CHECK_GPURT(gpurt_stream_native(stream, &native));
    cudaError_t runtime = cudaMemcpy2DAsync(rows.data(), width, dev, pitch, width, height, cudaMemcpyDeviceToHost, (cudaStream_t)native);
    if (runtime == cudaSuccess) runtime = cudaStreamSynchronize((cudaStream_t)native);
    cudaGetLastError();
    std::printf("device %d's memory, device %d current: gpurt 1D + 2D copies both ways, %zu of %zu rows wrong "
                "(the runtime's cudaMemcpy2DAsync there: %s)\n", owner, current, wrong, 2 * height, cudaGetErrorString(runtime));
    CHECK_GPURT(gpurt_free(dev));
    CHECK_GPURT(gpurt_stream_destroy(stream));
    return wrong != 0;
}

int main() {
    int count = 0;
    CHECK_GPURT(gpurt_device_count(&count));
    if (count == 0) { std::printf("FAIL: no device\n"); return 1; }
    int failures = 0;
    for (int d = count - 1; d >= 0; d--) {
        CHECK_GPURT(gpurt_set_device(d));
        int seen = -1;
        CHECK_CUDA(cudaGetDevice(&seen));
        std::printf("gpurt_set_device(%d) -> cudaGetDevice = %d\n", d, seen);
        if (seen != d) failures++;
    }
    CHECK_CUDA(cudaSetDevice(count - 1));
    int ours = -1;
    CHECK_GPURT(gpurt_get_device(&ours));
    std::printf("cudaSetDevice(%d) -> gpurt_get_device = %d\n", count - 1, ours);
    if (ours != count - 1) failures++;

    CHECK_GPURT(gpurt_set_device(0));
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    CHECK_GPURT(gpurt_device_get_properties(GPURT_CURRENT_DEVICE, &props));
    cudaDeviceProp rt;
    CHECK_CUDA(cudaGetDeviceProperties(&rt, 0));
    std::printf("gpurt: %s, %d SMs, %llu bytes; cudart: %s, %d SMs, %zu bytes\n", props.name,
                props.multiprocessor_count, (unsigned long long)props.total_memory, rt.name,
                rt.multiProcessorCount, rt.totalGlobalMem);
    if (props.multiprocessor_count != rt.multiProcessorCount || props.total_memory != rt.totalGlobalMem ||
        props.major != rt.major || props.minor != rt.minor)
        failures++;

    const int n = 1 << 22;
    std::vector<unsigned> host(n), back(n);
    std::mt19937 rng(std::random_device{}());
    for (auto &x : host) x = rng();
    unsigned a = rng() | 1, b = rng();
    unsigned *din, *dout;
    CHECK_CUDA(cudaMalloc(&din, n * sizeof(unsigned)));
    CHECK_CUDA(cudaMalloc(&dout, n * sizeof(unsigned)));
    CHECK_CUDA(cudaMemcpy(din, host.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    axpb<<<props.multiprocessor_count * 4, props.max_threads_per_block / 4>>>(din, dout, a, b, n);
    CHECK_CUDA(cudaGetLastError());
    CHECK_GPURT(gpurt_device_synchronize(GPURT_CURRENT_DEVICE));
    CHECK_CUDA(cudaMemcpy(back.data(), dout, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += back[i] != host[i] * a + b;
    std::printf("kernel with grid from gpurt properties: %d of %d elements wrong\n", wrong, n);
    if (wrong) failures++;
    cudaFree(din);
    cudaFree(dout);
    if (count > 1) {
        failures += copy_from_other_device(1, 0);
        failures += copy_from_other_device(0, 1);
    }
    std::printf("interop: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
