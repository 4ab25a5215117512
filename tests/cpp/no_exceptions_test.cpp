// gpurt.hpp with GPURT_CPP_NO_EXCEPTIONS, built with -fno-exceptions: every fallible
// call returns gpurt::Result<T>, objects come from create(), and errors carry the C
// layer's status and message.
#define GPURT_CPP_NO_EXCEPTIONS
#include <gpurt.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

#include "check.hpp"

int main() {
    gpurt::Result<int> count = gpurt::Device::count();
    CHECK(count.ok());
    if (gpurt_init() != GPURT_SUCCESS || count.value() == 0) {
        gpurt::Result<gpurt::Stream> s = gpurt::Stream::create();
        CHECK(!s.ok() && !s && std::strstr(s.error().what(), "gpurt_stream_create") != nullptr);
        CHECK(s.error().status() == GPURT_ERROR_NO_DRIVER || s.error().status() == GPURT_ERROR_NO_DEVICE);
        gpurt::Result<void> sync = gpurt::Device(0).synchronize();
        CHECK(!sync.ok() && sync.error().status() == s.error().status());
        std::printf("no_exceptions_test: no device: errors as results\n");
    } else {
        gpurt::Result<gpurt::Stream> s = gpurt::Stream::create(0);
        CHECK(s.ok() && s.value());
        gpurt::Result<gpurt::DeviceBuffer<float>> buf = gpurt::DeviceBuffer<float>::create(1000, s.value());
        CHECK(buf.ok() && buf.value().size() == 1000);
        std::vector<float> host(1000, 1.5f);
        CHECK(buf.value().copy_from(host, s.value()).ok());
        gpurt::Result<void> too_many = buf.value().copy_from(host.data(), 1001, s.value());
        CHECK(!too_many.ok() && too_many.error().status() == GPURT_ERROR_INVALID_ARGUMENT);
        auto copies = gpurt::comm::broadcast(buf.value(), 0, {0, 0});
        CHECK(copies.ok() && copies.value().size() == 2 && copies.value()[1].size() == 1000);
        auto mismatched = gpurt::comm::gather<float>({&buf.value()}, {0, 0}, 0);
        CHECK(!mismatched.ok() && mismatched.error().status() == GPURT_ERROR_INVALID_ARGUMENT);
        gpurt::Result<gpurt::DeviceBuffer<double>> huge = gpurt::DeviceBuffer<double>::create(SIZE_MAX / 4, s.value());
        CHECK(!huge.ok() && huge.error().status() == GPURT_ERROR_OUT_OF_MEMORY);
        CHECK(std::strstr(huge.error().what(), "tried to allocate") != nullptr);
        int cublas_version = 0;
        bool have_cublas = gpurt_math_library_version(GPURT_MATH_CUBLAS, &cublas_version) == GPURT_SUCCESS;
        gpurt::Result<void *> blas = gpurt::blas::handle(s.value());
        CHECK(blas.ok() == have_cublas && (have_cublas ? blas.value() != nullptr : blas.error().status() == GPURT_ERROR_NOT_SUPPORTED));
        gpurt::Result<gpurt::blas::LtHandle> lt = gpurt::blas::lt_handle(s.value());
        CHECK(lt.ok() == have_cublas);
        gpurt::Result<gpurt::Event> e = gpurt::Event::create(0);
        CHECK(e.ok() && e.value().record(s.value()).ok() && e.value().synchronize().ok());
        gpurt::Result<bool> done = e.value().query();
        CHECK(done.ok() && done.value());
        CHECK(s.value().synchronize().ok());
        std::printf("no_exceptions_test: with a device: results carry values and errors\n");
    }
    return report("no_exceptions_test");
}
