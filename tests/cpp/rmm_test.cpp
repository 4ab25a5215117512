// gpurt::RmmResource under RMM's own containers, on a GPU (the GPU suite builds it
// against the librmm wheel's headers and library): exact data through
// device_uvector and device_buffer, gpurt's statistics exact before and after,
// cross-stream frees, the synchronous calls, the errors RMM users catch, and RMM's
// current-device resource set to gpurt.
#include <gpurt_rmm.hpp>

#include <rmm/device_buffer.hpp>
#include <rmm/device_uvector.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/resource_ref.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "check.hpp"

static std::uint64_t allocated() {
    std::uint64_t bytes = 0;
    gpurt_memory_usage(0, &bytes, nullptr, nullptr, nullptr);
    return bytes;
}

int main() {
    int count = 0;
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        std::printf("rmm_test: skipped: no GPU\n");
        const char* require = std::getenv("GPURT_REQUIRE_GPU");
        return require && std::strcmp(require, "1") == 0 ? 1 : 0;
    }
    gpurt_set_device(0);
    gpurt::RmmResource mr{0};
    rmm::device_async_resource_ref ref{mr};
    cudaStream_t s1 = nullptr, s2 = nullptr;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    cuda::stream_ref v1{s1}, v2{s2};
    const std::uint64_t base = allocated();

    {  // Random data through RMM's containers, allocated by gpurt.
        std::vector<float> host((1 << 20) + 3);
        std::mt19937 rng{std::random_device{}()};
        std::normal_distribution<float> normal;
        for (float& x : host) x = normal(rng);
        const std::size_t bytes = host.size() * sizeof(float);
        rmm::device_uvector<float> vec(host.size(), v1, ref);
        CHECK(allocated() >= base + bytes);
        CHECK(cudaMemcpyAsync(vec.data(), host.data(), bytes, cudaMemcpyHostToDevice, s1) == cudaSuccess);
        rmm::device_buffer copy(vec.data(), bytes, v1, ref);  // a device-to-device copy by RMM
        std::vector<float> back(host.size());
        CHECK(cudaMemcpyAsync(back.data(), copy.data(), bytes, cudaMemcpyDeviceToHost, s1) == cudaSuccess);
        CHECK(cudaStreamSynchronize(s1) == cudaSuccess);
        CHECK(std::memcmp(back.data(), host.data(), bytes) == 0);
    }
    CHECK(allocated() == base);

    // Allocated on one stream, freed on another: gpurt orders the reuse after s2.
    void* p = mr.allocate(v1, 1 << 20);
    CHECK(p != nullptr && reinterpret_cast<std::uintptr_t>(p) % 256 == 0);
    CHECK(cudaMemsetAsync(p, 7, 1 << 20, s2) == cudaSuccess);
    mr.deallocate(v2, p, 1 << 20);
    CHECK(allocated() == base);

    void* q = mr.allocate_sync(4096, 512);
    CHECK(q != nullptr && reinterpret_cast<std::uintptr_t>(q) % 512 == 0);
    mr.deallocate_sync(q, 4096, 512);
    CHECK(allocated() == base);

    bool out_of_memory = false, bad_alignment = false;
    try {
        (void)mr.allocate(v1, std::size_t{1} << 50);
    } catch (const rmm::out_of_memory& e) {
        out_of_memory = std::strstr(e.what(), "out of memory") != nullptr;
    }
    try {
        (void)mr.allocate(v1, 64, 4096);
    } catch (const rmm::bad_alloc&) {
        bad_alignment = true;
    }
    CHECK(out_of_memory && bad_alignment);
    CHECK(allocated() == base);

    // RMM's current device resource: everything RMM allocates by default is gpurt's.
    auto previous = rmm::mr::set_current_device_resource(mr);
    {
        rmm::device_buffer buffer(8192, v1);
        CHECK(allocated() == base + 8192);
        CHECK(rmm::mr::get_current_device_resource_ref() == ref);
    }
    rmm::mr::set_current_device_resource(std::move(previous));
    CHECK(allocated() == base);
    CHECK(gpurt::RmmResource{0} == mr && gpurt::RmmResource{1} != mr);

    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    return report("rmm_test");
}
