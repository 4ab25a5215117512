// Interop with the CUDA runtime, built with nvcc on the GPU machine: the device that
// gpurt makes current is the one cudart sees (and back), and a kernel of the
// caller's own, sized from properties read through gpurt, runs on it and its
// result is exact.
#include <cuda_runtime.h>
#include <gpurt.h>
#include <cstdio>
#include <cstdlib>
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
    std::printf("interop: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
