/* A capture begun outside gpurt (cuStreamBeginCapture on a gpurt stream's native
 * handle, as a framework's own graph capture does), with whole segments and with
 * expandable ones (the default): a cached block is handed out, a request that needs
 * new memory is refused with GPURT_ERROR_STREAM_CAPTURE, naming the capture, and the
 * capture survives (its graph ends well).
 *
 * Needs a device (the stub driver in CI); without one it says so and exits 0,
 * unless GPURT_REQUIRE_GPU=1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <gpurt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef int (*begin_capture_fn)(void *stream, int mode);
typedef int (*end_capture_fn)(void *stream, void **graph);

int main(void) {
    int count = 0;
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        const char *require = getenv("GPURT_REQUIRE_GPU");
        printf("foreign_capture_test: skipped: no device (%s)\n", gpurt_last_error_message());
        return require && strcmp(require, "1") == 0;
    }
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    begin_capture_fn begin_capture = NULL;
    end_capture_fn end_capture = NULL;
    *(void **)(&begin_capture) = cuda ? dlsym(cuda, "cuStreamBeginCapture_v2") : NULL; /* POSIX: function pointers from dlsym */
    *(void **)(&end_capture) = cuda ? dlsym(cuda, "cuStreamEndCapture") : NULL;
    CHECK(begin_capture && end_capture, "the driver's capture calls");
    if (!begin_capture || !end_capture) return 1;
    const char *configs[] = {"expandable_segments:False", ""};
    for (int c = 0; c < 2; c++) {
        EXPECT(gpurt_alloc_set_config(configs[c]), GPURT_SUCCESS);
        gpurt_stream_t stream = NULL;
        void *native = NULL, *cached = NULL, *again = NULL, *big = NULL, *graph = NULL;
        EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
        EXPECT(gpurt_stream_native(stream, &native), GPURT_SUCCESS);
        EXPECT(gpurt_malloc(2u << 20, stream, &cached), GPURT_SUCCESS);
        EXPECT(gpurt_free(cached), GPURT_SUCCESS);
        CHECK(begin_capture(native, 1 /* CU_STREAM_CAPTURE_MODE_THREAD_LOCAL */) == 0, "%s: capture begun", configs[c]);
        EXPECT(gpurt_malloc(2u << 20, stream, &again), GPURT_SUCCESS);
        CHECK(again == cached, "%s: the cached block is handed out during the capture", configs[c]);
        EXPECT(gpurt_malloc((size_t)3 << 30, stream, &big), GPURT_ERROR_STREAM_CAPTURE);
        CHECK(big == NULL && strstr(gpurt_last_error_message(), "capturing") != NULL, "%s: the refusal names the capture",
              configs[c]);
        CHECK(end_capture(native, &graph) == 0 && graph != NULL, "%s: the capture survived", configs[c]);
        EXPECT(gpurt_free(again), GPURT_SUCCESS);
        EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
        EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
        EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    }
    printf("foreign_capture_test: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
