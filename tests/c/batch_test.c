/* gpurt_memcpy_batch_async: misuse refused with nothing queued (NULL arrays, too
 * many copies, NULL pointers, overlapping destinations, a copy over its own source, a
 * bad stream); 10 000 copies of 16 KiB from device to pinned memory and back, fresh
 * random bytes checked exact on a GPU; on the legacy stream too. gpurt's copy kernel
 * takes batches the device reaches (device and pinned memory), the driver's batch
 * call the others (pageable memory): the stand-in driver counts which ran; on a GPU,
 * unaligned copies across a mapping's end and into pageable memory, bytes exact. The
 * timings, beside a loop and the driver's own call, are gpu/batch_bench.c's.
 *
 *   batch_test */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define COPIES 10000
#define BYTES ((size_t)16 << 10)

static int real;

int main(void) {
    int count = 0, i, r;
    gpurt_stream_t stream = NULL, legacy = NULL;
    gpurt_pinned_pool_t pinned = NULL;
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    unsigned char *device = NULL, *host = NULL, *want = NULL;
    void **dsts = malloc(COPIES * sizeof(void *)), **back = malloc(COPIES * sizeof(void *));
    const void **srcs = malloc(COPIES * sizeof(void *)), **from = malloc(COPIES * sizeof(void *));
    size_t *sizes = malloc(COPIES * sizeof(size_t));
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("batch_test: skipped: no GPU (%s)\n", gpurt_last_error_message());
        return getenv("GPURT_REQUIRE_GPU") && strcmp(getenv("GPURT_REQUIRE_GPU"), "1") == 0 ? 1 : 0;
    }
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    real = strcmp(props.name, "Fake GPU") != 0;
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_default(0, &legacy), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_pool_default(&pinned), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(COPIES * BYTES, stream, (void **)&device), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_malloc(pinned, COPIES * BYTES, (void **)&host), GPURT_SUCCESS);
    want = malloc(COPIES * BYTES);
    /* Device block i goes to host slot COPIES-1-i: a permutation, so that order shows. */
    for (i = 0; i < COPIES; i++) {
        dsts[i] = host + (size_t)(COPIES - 1 - i) * BYTES;
        srcs[i] = device + (size_t)i * BYTES;
        back[i] = device + (size_t)i * BYTES;
        from[i] = host + (size_t)(COPIES - 1 - i) * BYTES;
        sizes[i] = BYTES;
    }

    /* Misuse: refused, nothing queued. */
    EXPECT(gpurt_memcpy_batch_async(NULL, srcs, sizes, 3, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memcpy_batch_async(dsts, NULL, sizes, 3, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memcpy_batch_async(dsts, srcs, NULL, 3, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memcpy_batch_async(NULL, NULL, NULL, 0, stream), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_batch_async(dsts, srcs, sizes, (size_t)1 << 21, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memcpy_batch_async(dsts, srcs, sizes, 3, NULL), GPURT_ERROR_INVALID_HANDLE);
    {
        void *d2[2] = {host, host + BYTES / 2};
        const void *s2[2] = {device, device + BYTES};
        size_t z2[2] = {BYTES, BYTES};
        EXPECT(gpurt_memcpy_batch_async(d2, s2, z2, 2, stream), GPURT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(gpurt_last_error_message(), "copies 0 and 1") != NULL, "the refusal names the copies: %s", gpurt_last_error_message());
        d2[1] = device + BYTES / 2;
        s2[1] = device;
        EXPECT(gpurt_memcpy_batch_async(d2 + 1, s2 + 1, z2, 1, stream), GPURT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(gpurt_last_error_message(), "own source") != NULL, "an overlap with its own source is named: %s", gpurt_last_error_message());
        d2[1] = NULL;
        EXPECT(gpurt_memcpy_batch_async(d2, s2, z2, 2, stream), GPURT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(gpurt_last_error_message(), "copy 1") != NULL, "a NULL pointer names its copy: %s", gpurt_last_error_message());
        z2[1] = 0; /* a copy of nothing may name NULL */
        EXPECT(gpurt_memcpy_batch_async(d2, s2, z2, 2, stream), GPURT_SUCCESS);
    }

    /* Exact bytes: device -> pinned (permuted) -> device, on a stream and on the legacy stream. */
    for (r = 0; r < 2; r++) {
        gpurt_stream_t on = r == 0 ? stream : legacy;
        unsigned char *staged = malloc(COPIES * BYTES), *got = malloc(COPIES * BYTES);
        fill_pattern(staged, COPIES * BYTES, 900 + (uint64_t)r);
        EXPECT(gpurt_memcpy(device, staged, COPIES * BYTES, on), GPURT_SUCCESS);
        for (i = 0; i < COPIES; i++) memcpy(want + (size_t)(COPIES - 1 - i) * BYTES, staged + (size_t)i * BYTES, BYTES);
        EXPECT(gpurt_memcpy_batch_async(dsts, srcs, sizes, COPIES, on), GPURT_SUCCESS);
        EXPECT(gpurt_stream_synchronize(on), GPURT_SUCCESS);
        CHECK(!real || memcmp(host, want, COPIES * BYTES) == 0, "%s: the pinned copies differ", r == 0 ? "a stream" : "the legacy stream");
        EXPECT(gpurt_memset_async(device, 0, 1, COPIES * BYTES, on), GPURT_SUCCESS);
        EXPECT(gpurt_memcpy_batch_async(back, from, sizes, COPIES, on), GPURT_SUCCESS);
        EXPECT(gpurt_memcpy(got, device, COPIES * BYTES, on), GPURT_SUCCESS);
        CHECK(!real || memcmp(got, staged, COPIES * BYTES) == 0, "%s: the device's bytes after the copies back differ", r == 0 ? "a stream" : "the legacy stream");
        free(staged);
        free(got);
    }

    /* Which path ran: the stand-in driver counts the kernel's launches and its batch calls. */
    {
        void (*counts)(long *, long *) = NULL;
        void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        long launches0, batches0, launches1, batches1;
        *(void **)(&counts) = driver ? dlsym(driver, "stub_batch_counts") : NULL; /* POSIX: function pointers from dlsym */
        if (counts) {
            void **paged = malloc(COPIES * sizeof(void *));
            unsigned char *pageable = malloc(COPIES * BYTES);
            for (i = 0; i < COPIES; i++) paged[i] = pageable + (size_t)i * BYTES;
            counts(&launches0, &batches0);
            EXPECT(gpurt_memcpy_batch_async(dsts, srcs, sizes, COPIES, stream), GPURT_SUCCESS);
            counts(&launches1, &batches1);
            CHECK(launches1 - launches0 == (COPIES + 1359) / 1360 && batches1 == batches0,
                  "device to pinned: %ld kernel launches (want %d), %ld driver batches (want 0)", launches1 - launches0, (COPIES + 1359) / 1360,
                  batches1 - batches0);
            EXPECT(gpurt_memcpy_batch_async(paged, srcs, sizes, COPIES, stream), GPURT_SUCCESS);
            counts(&launches0, &batches0);
            CHECK(launches0 == launches1 && batches0 - batches1 == 1, "device to pageable: %ld kernel launches (want 0), %ld driver batches (want 1)",
                  launches0 - launches1, batches0 - batches1);
            EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
            free(paged);
            free(pageable);
        }
    }

    /* Unaligned copies (the kernel's byte loop), some across the end of a 20 MiB mapping,
     * into pinned memory (the kernel) and pageable memory (the driver's call). */
    if (real) {
        enum { ODD = 30000, ODD_BYTES = 1001 };
        unsigned char *staged = malloc((size_t)ODD * ODD_BYTES + 7), *pageable = malloc((size_t)ODD * ODD_BYTES + 7);
        void **to_pinned = malloc(ODD * sizeof(void *)), **to_pageable = malloc(ODD * sizeof(void *));
        const void **odd_srcs = malloc(ODD * sizeof(void *));
        size_t *odd_sizes = malloc(ODD * sizeof(size_t));
        fill_pattern(staged, (size_t)ODD * ODD_BYTES + 7, 77);
        EXPECT(gpurt_memcpy(device, staged, (size_t)ODD * ODD_BYTES + 7, stream), GPURT_SUCCESS);
        for (i = 0; i < ODD; i++) {
            odd_srcs[i] = device + 3 + (size_t)i * ODD_BYTES;
            to_pinned[i] = host + 5 + (size_t)i * ODD_BYTES;
            to_pageable[i] = pageable + 5 + (size_t)i * ODD_BYTES;
            odd_sizes[i] = ODD_BYTES;
        }
        EXPECT(gpurt_memcpy_batch_async(to_pinned, odd_srcs, odd_sizes, ODD, stream), GPURT_SUCCESS);
        EXPECT(gpurt_memcpy_batch_async(to_pageable, odd_srcs, odd_sizes, ODD, stream), GPURT_SUCCESS);
        EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
        CHECK(memcmp(host + 5, staged + 3, (size_t)ODD * ODD_BYTES) == 0, "unaligned copies into pinned memory differ");
        CHECK(memcmp(pageable + 5, staged + 3, (size_t)ODD * ODD_BYTES) == 0, "unaligned copies into pageable memory differ");
        free(staged);
        free(pageable);
        free(to_pinned);
        free(to_pageable);
        free(odd_srcs);
        free(odd_sizes);
    }

    EXPECT(gpurt_free(device), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_free(host), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    free(want);
    free(dsts);
    free(back);
    free(srcs);
    free(from);
    free(sizes);
    printf("batch_test: %d checks, %d failed (%s)\n", checks, failures, real ? props.name : "stub driver: no byte checks");
    return failures == 0 ? 0 : 1;
}
