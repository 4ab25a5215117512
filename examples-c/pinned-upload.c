/* Double-buffered upload: the host fills one pinned buffer while the other's copy
 * runs, as a loader feeding batches to the GPU does. The pinned pool keeps a buffer
 * from reuse until the copy that reads it is done, so the loop needs no events of
 * its own. Then checks the whole upload on the device. */
#include "example.h"
#include <string.h>

#define BATCH ((size_t)16 << 20)
#define BATCHES 16

int main(void) {
    gpurt_stream_t stream;
    gpurt_pinned_pool_t pool;
    gpurt_host_memory_stats_t st = GPURT_HOST_MEMORY_STATS_INIT;
    unsigned char *dev, *staging, *expected, *back;
    size_t b, i;
    require_gpu("pinned-upload");
    CHECK(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream));
    CHECK(gpurt_pinned_pool_default(&pool));
    CHECK(gpurt_malloc(BATCH * BATCHES, stream, (void **)&dev));
    expected = (unsigned char *)malloc(BATCH * BATCHES);
    back = (unsigned char *)malloc(BATCH * BATCHES);
    srand(777);
    for (b = 0; b < BATCHES; b++) {
        /* Two buffers in flight at most: a freed buffer is reused once its copy is done. */
        CHECK(gpurt_pinned_malloc(pool, BATCH, (void **)&staging));
        for (i = 0; i < BATCH; i++) staging[i] = expected[b * BATCH + i] = (unsigned char)rand();
        CHECK(gpurt_memcpy_async(dev + b * BATCH, staging, BATCH, stream));
        CHECK(gpurt_pinned_free(staging)); /* safe: gpurt saw the copy that reads it */
    }
    CHECK(gpurt_memcpy_dtoh_staged(back, dev, BATCH * BATCHES, stream));
    CHECK(gpurt_pinned_stats(pool, &st));
    printf("pinned-upload: %d batches of %zu MiB through %lld pinned allocations from the driver\n", BATCHES, BATCH >> 20,
           (long long)st.num_host_alloc);
    if (memcmp(expected, back, BATCH * BATCHES) != 0) {
        printf("pinned-upload: FAILED: the device does not hold what was uploaded\n");
        return 1;
    }
    printf("pinned-upload: %zu bytes checked\n", BATCH * BATCHES);
    free(expected);
    free(back);
    CHECK(gpurt_free(dev));
    return 0;
}
