// The C++ header at work: a stream, device buffers, an NVRTC kernel launched with
// its arguments as values, event timing and the allocator's statistics.
#include <gpurt.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() try {
    if (gpurt_init() != GPURT_SUCCESS || gpurt::Device::count() == 0) {
        std::printf("saxpy: no GPU (%s): nothing to run\n", gpurt_status_string(gpurt_init()));
        return 0;
    }
    int major = 0, minor = 0;
    if (gpurt_rtc_version(&major, &minor) != GPURT_SUCCESS) {
        std::printf("saxpy: NVRTC is not installed: nothing to run\n");
        return 0;
    }
    gpurt::Device device(0);
    gpurt::DeviceGuard on(device);
    gpurt::Stream stream;
    const unsigned n = 1 << 22;
    std::vector<float> x(n), y(n);
    for (unsigned i = 0; i < n; i++) {
        x[i] = static_cast<float>(i % 1024) * 0.5f;
        y[i] = static_cast<float>(i % 77);
    }
    gpurt::DeviceBuffer<float> dx(n, stream), dy(n, stream);
    dx.copy_from(x, stream);
    dy.copy_from(y, stream);
    gpurt::Kernel saxpy = gpurt::Kernel::compile(
        "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, unsigned n)"
        "{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }",
        "saxpy");
    gpurt::Event start, stop;
    start.record(stream);
    saxpy.launch_with((n + 255) / 256, 256, stream, 3.0f, dx.data(), dy.data(), n);
    stop.record(stream);
    std::vector<float> result = dy.to_vector(stream);
    unsigned bad = 0;
    for (unsigned i = 0; i < n; i++) bad += std::fabs(result[i] - (3.0f * x[i] + y[i])) > 1e-3f;
    std::printf("saxpy: %u floats on %s in %.3f ms: %s\n", n, device.properties().name, stop.elapsed_since(start),
                bad == 0 ? "all correct" : "WRONG");
    std::printf("saxpy: %lld bytes allocated through gpurt at the peak\n",
                static_cast<long long>(device.memory_stats().allocated_bytes.all.peak));
    return bad == 0 ? 0 : 1;
} catch (const gpurt::Error &e) {
    std::fprintf(stderr, "saxpy: %s (%s)\n", e.what(), e.status_string());
    return 1;
}
