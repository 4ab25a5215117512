/* Growable virtual buffers: misuse refused with nothing changed (zero and unaligned
 * sizes, ranges past the end, overlapping maps, unmapping what is not mapped or only
 * part of a mapping, NULL and wrong-kind handles); a buffer that grows at the same
 * address keeps its bytes; mapped bytes count in the device's statistics and under the
 * per-process memory fraction (a map past it is refused, nothing changes); a device
 * sleep gives its memory back and a wake maps it again at the same address (its bytes
 * kept with an offload); a vbuffer destroyed asleep; an empty one destroyed during a
 * capture, which survives; every byte given back. On a GPU, fresh random bytes checked exact across growth.
 *
 *   vbuffer_test */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static int real;

static int64_t allocated_now(void) {
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    EXPECT(gpurt_memory_stats(0, &stats), GPURT_SUCCESS);
    return stats.allocated_bytes.all.current;
}

/* Writes fresh bytes to [at, at + n) of the vbuffer through `s`, and checks that they come back. */
static void fill_and_check(unsigned char *at, size_t n, uint64_t seed, gpurt_stream_t s, unsigned char *host, unsigned char *back) {
    size_t wrong = 0, i;
    fill_pattern(host, n, seed);
    EXPECT(gpurt_memcpy_async(at, host, n, s), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(back, at, n, s), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    for (i = 0; real && i < n; i++) wrong += back[i] != host[i];
    CHECK(wrong == 0, "%zu of %zu bytes differ", wrong, n);
}

/* A vbuffer with nothing mapped goes without a wait for the device, which would
 * invalidate a capture under way (any thread's): the capture ends with its graph. */
static void an_empty_vbuffer_goes_during_a_capture(void *lib, gpurt_stream_t s, size_t g) {
    int (*begin_capture)(void *, int) = NULL, (*end_capture)(void *, void **) = NULL, (*graph_destroy)(void *) = NULL;
    void *native = NULL, *graph = NULL;
    gpurt_vbuffer_t vb = NULL;
    *(void **)(&begin_capture) = lib ? dlsym(lib, "cuStreamBeginCapture_v2") : NULL;
    *(void **)(&end_capture) = lib ? dlsym(lib, "cuStreamEndCapture") : NULL;
    *(void **)(&graph_destroy) = lib ? dlsym(lib, "cuGraphDestroy") : NULL;
    CHECK(begin_capture && end_capture && graph_destroy, "the driver's capture calls");
    if (!begin_capture || !end_capture || !graph_destroy) return;
    EXPECT(gpurt_vbuffer_create(0, 4 * g, &vb), GPURT_SUCCESS);
    EXPECT(gpurt_stream_native(s, &native), GPURT_SUCCESS);
    CHECK(begin_capture(native, 2 /* relaxed */) == 0, "capture begun");
    EXPECT(gpurt_vbuffer_destroy(vb), GPURT_SUCCESS);
    CHECK(end_capture(native, &graph) == 0 && graph != NULL, "the capture outlived the empty vbuffer's destruction");
    if (graph) CHECK(graph_destroy(graph) == 0, "graph destroyed");
}

int main(void) {
    int count = 0;
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_vbuffer_t vb = NULL;
    gpurt_stream_t s = NULL;
    unsigned char *base = NULL, *again = NULL, *host, *back, *first;
    size_t g = 0, mapped = 1, i, wrong = 0;
    int64_t before;
    long device0 = 0, host0 = 0, streams0 = 0, events0 = 0, device1 = 0;
    void (*stub_live)(long *, long *, long *, long *) = NULL;
    void *lib;
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("vbuffer_test: skipped: no GPU (%s)\n", gpurt_last_error_message());
        return getenv("GPURT_REQUIRE_GPU") && strcmp(getenv("GPURT_REQUIRE_GPU"), "1") == 0 ? 1 : 0;
    }
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    real = strcmp(props.name, "Fake GPU") != 0;
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    *(void **)(&stub_live) = lib ? dlsym(lib, "stub_live") : NULL; /* POSIX: function pointers from dlsym */
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s), GPURT_SUCCESS);
    if (stub_live) stub_live(&device0, &host0, &streams0, &events0);
    before = allocated_now();

    EXPECT(gpurt_vbuffer_create(0, 0, &vb), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_vbuffer_create(0, 1, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_vbuffer_create(99, 1, &vb), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_vbuffer_create(0, (size_t)-1, &vb), GPURT_ERROR_OUT_OF_MEMORY);
    EXPECT(gpurt_vbuffer_map(NULL, 0, 1), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_vbuffer_map((gpurt_vbuffer_t)s, 0, 1), GPURT_ERROR_INVALID_HANDLE); /* wrong kind */
    EXPECT(gpurt_vbuffer_destroy(NULL), GPURT_ERROR_INVALID_HANDLE);

    /* 64 MiB of addresses (rounded up), nothing mapped. */
    EXPECT(gpurt_vbuffer_create(0, (64u << 20) - 100, &vb), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_granularity(vb, &g), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_address(vb, (void **)&base), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_mapped_bytes(vb, &mapped), GPURT_SUCCESS);
    CHECK(g >= 4096 && (64u << 20) % g == 0 && base != NULL && mapped == 0, "granularity %zu, base %p, mapped %zu", g, (void *)base, mapped);
    CHECK(allocated_now() == before, "reserving counted %lld bytes", (long long)(allocated_now() - before));
    host = malloc(8 * g);
    back = malloc(8 * g);
    first = malloc(2 * g);

    /* Misuse: refused, nothing mapped. */
    EXPECT(gpurt_vbuffer_map(vb, 0, 0), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_vbuffer_map(vb, 1, g), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_vbuffer_map(vb, 0, g + 1), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_vbuffer_map(vb, 64u << 20, g), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_vbuffer_map(vb, (size_t)-1 - g + 1, g), GPURT_ERROR_INVALID_ARGUMENT); /* offset + bytes overflows */
    EXPECT(gpurt_vbuffer_unmap(vb, 0, g, s), GPURT_ERROR_INVALID_ARGUMENT);             /* not mapped */
    EXPECT(gpurt_vbuffer_mapped_bytes(vb, &mapped), GPURT_SUCCESS);
    CHECK(mapped == 0, "refused maps mapped %zu bytes", mapped);

    /* Grow: 2 granules, then 3 more after them; the first bytes stay where they were. */
    EXPECT(gpurt_vbuffer_map(vb, 0, 2 * g), GPURT_SUCCESS);
    fill_and_check(base, 2 * g, 11, s, host, back);
    memcpy(first, host, 2 * g);
    EXPECT(gpurt_vbuffer_map(vb, g, g), GPURT_ERROR_INVALID_ARGUMENT);      /* overlaps */
    EXPECT(gpurt_vbuffer_map(vb, 0, 4 * g), GPURT_ERROR_INVALID_ARGUMENT);  /* overlaps */
    EXPECT(gpurt_vbuffer_map(vb, 2 * g, 3 * g), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_address(vb, (void **)&again), GPURT_SUCCESS);
    CHECK(again == base, "the base moved from %p to %p", (void *)base, (void *)again);
    fill_and_check(base + 2 * g, 3 * g, 12, s, host, back);
    EXPECT(gpurt_memcpy_async(back, base, 2 * g, s), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    for (i = 0; real && i < 2 * g; i++) wrong += back[i] != first[i];
    CHECK(wrong == 0, "growing changed %zu of the first bytes", wrong);
    EXPECT(gpurt_vbuffer_mapped_bytes(vb, &mapped), GPURT_SUCCESS);
    CHECK(mapped == 5 * g, "mapped %zu, expected %zu", mapped, 5 * g);
    CHECK(allocated_now() == before + (int64_t)(5 * g), "statistics count %lld bytes, mapped %zu", (long long)(allocated_now() - before), 5 * g);

    /* The per-process memory fraction caps mapped bytes too: refused, nothing changes. */
    EXPECT(gpurt_set_per_process_memory_fraction(1e-9, 0), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_map(vb, 8 * g, g), GPURT_ERROR_OUT_OF_MEMORY);
    EXPECT(gpurt_set_per_process_memory_fraction(1.0, 0), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_mapped_bytes(vb, &mapped), GPURT_SUCCESS);
    CHECK(mapped == 5 * g, "a refused map changed the mapped bytes to %zu", mapped);

    /* Shrink: whole mappings only, after the stream's work. */
    EXPECT(gpurt_vbuffer_unmap(vb, 2 * g, g, s), GPURT_ERROR_INVALID_ARGUMENT);     /* cuts [2g, 5g) */
    EXPECT(gpurt_vbuffer_unmap(vb, 0, 6 * g, s), GPURT_ERROR_INVALID_ARGUMENT);     /* [5g, 6g) not mapped */
    EXPECT(gpurt_vbuffer_unmap(vb, 2 * g, 3 * g, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_vbuffer_unmap(vb, 2 * g, 3 * g, s), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_mapped_bytes(vb, &mapped), GPURT_SUCCESS);
    CHECK(mapped == 2 * g, "after unmapping 3 granules, %zu mapped", mapped);
    CHECK(allocated_now() == before + (int64_t)(2 * g), "statistics count %lld bytes after the unmap", (long long)(allocated_now() - before));
    EXPECT(gpurt_vbuffer_map(vb, 4 * g, g), GPURT_SUCCESS); /* a hole between mappings is fine */
    EXPECT(gpurt_vbuffer_unmap(vb, 0, 5 * g, s), GPURT_ERROR_INVALID_ARGUMENT); /* [2g, 4g) is not mapped */

    /* A device sleep takes the vbuffer: memory given back, bytes kept with an offload. */
    fill_and_check(base, 2 * g, 21, s, host, back);
    memcpy(first, host, 2 * g);
    EXPECT(gpurt_device_sleep(0, GPURT_SLEEP_OFFLOAD), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_mapped_bytes(vb, &mapped), GPURT_SUCCESS);
    CHECK(mapped == 0 && allocated_now() == before, "asleep: %zu mapped, %lld counted", mapped, (long long)(allocated_now() - before));
    EXPECT(gpurt_vbuffer_map(vb, 6 * g, g), GPURT_ERROR_INVALID_ARGUMENT); /* asleep */
    EXPECT(gpurt_vbuffer_unmap(vb, 0, 2 * g, s), GPURT_ERROR_INVALID_ARGUMENT);
    if (stub_live) {
        stub_live(&device1, &host0, &streams0, &events0);
        CHECK(device1 == device0, "asleep, the stub driver holds %ld device bytes, %ld before", device1, device0);
    }
    EXPECT(gpurt_device_wake(0), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_address(vb, (void **)&again), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_mapped_bytes(vb, &mapped), GPURT_SUCCESS);
    CHECK(again == base && mapped == 3 * g && allocated_now() == before + (int64_t)(3 * g), "awake again: base %p, %zu mapped", (void *)again, mapped);
    EXPECT(gpurt_memcpy_async(back, base, 2 * g, s), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    for (i = 0, wrong = 0; real && i < 2 * g; i++) wrong += back[i] != first[i];
    CHECK(wrong == 0, "%zu bytes changed across the offloading sleep", wrong);
    EXPECT(gpurt_device_sleep(0, GPURT_SLEEP_DISCARD), GPURT_SUCCESS);
    EXPECT(gpurt_device_wake(0), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_mapped_bytes(vb, &mapped), GPURT_SUCCESS);
    CHECK(mapped == 3 * g, "after a discarding sleep, %zu mapped", mapped);
    EXPECT(gpurt_device_sleep(0, GPURT_SLEEP_OFFLOAD), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_destroy(vb), GPURT_SUCCESS); /* asleep: its bytes are dropped */
    EXPECT(gpurt_device_wake(0), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_destroy(vb), GPURT_ERROR_INVALID_HANDLE);
    CHECK(allocated_now() == before, "destroy left %lld bytes counted", (long long)(allocated_now() - before));
    if (stub_live) {
        stub_live(&device1, &host0, &streams0, &events0);
        CHECK(device1 == device0, "the stub driver holds %ld device bytes, %ld before", device1, device0);
    }
    an_empty_vbuffer_goes_during_a_capture(lib, s, g);
    EXPECT(gpurt_stream_destroy(s), GPURT_SUCCESS);
    free(host);
    free(back);
    free(first);
    printf("vbuffer_test: granularity %zu; %d checks, %d failures\n", g, checks, failures);
    return failures != 0;
}
