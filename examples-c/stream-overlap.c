/* Copies overlapping on two streams, timed with events: uploads 8 chunks of 32 MiB
 * from pinned memory, alternating between two streams, and compares the time with
 * the same copies on one stream. Then checks every byte came back. */
#include "example.h"
#include <string.h>

#define CHUNKS 8
#define CHUNK ((size_t)32 << 20)

static float upload(gpurt_stream_t *streams, int n_streams, void *dev, const unsigned char *host) {
    gpurt_event_t start, stop;
    float ms = 0;
    int i;
    CHECK(gpurt_event_create(0, 0, &start));
    CHECK(gpurt_event_create(0, 0, &stop));
    CHECK(gpurt_event_record(start, streams[0]));
    for (i = 1; i < n_streams; i++) CHECK(gpurt_stream_wait_event(streams[i], start));
    for (i = 0; i < CHUNKS; i++)
        CHECK(gpurt_memcpy_async((char *)dev + i * CHUNK, host + i * CHUNK, CHUNK, streams[i % n_streams]));
    for (i = 1; i < n_streams; i++) CHECK(gpurt_stream_wait_stream(streams[0], streams[i]));
    CHECK(gpurt_event_record(stop, streams[0]));
    CHECK(gpurt_event_synchronize(stop));
    CHECK(gpurt_event_elapsed_time(start, stop, &ms));
    CHECK(gpurt_event_destroy(start));
    CHECK(gpurt_event_destroy(stop));
    return ms;
}

int main(void) {
    gpurt_stream_t streams[2];
    gpurt_pinned_pool_t pool;
    unsigned char *host, *back;
    void *dev;
    size_t i;
    float one, two;
    require_gpu("stream-overlap");
    CHECK(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &streams[0]));
    CHECK(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &streams[1]));
    CHECK(gpurt_pinned_pool_default(&pool));
    CHECK(gpurt_pinned_malloc(pool, CHUNKS * CHUNK, (void **)&host));
    CHECK(gpurt_pinned_malloc(pool, CHUNKS * CHUNK, (void **)&back));
    CHECK(gpurt_malloc(CHUNKS * CHUNK, streams[0], &dev));
    CHECK(gpurt_record_stream(dev, streams[1]));
    srand(12345);
    for (i = 0; i < CHUNKS * CHUNK; i++) host[i] = (unsigned char)rand();
    upload(streams, 1, dev, host); /* warm-up */
    one = upload(streams, 1, dev, host);
    two = upload(streams, 2, dev, host);
    CHECK(gpurt_memcpy(back, dev, CHUNKS * CHUNK, streams[0]));
    printf("stream-overlap: %d x %zu MiB uploads: one stream %.2f ms (%.1f GB/s), two streams %.2f ms (%.1f GB/s)\n",
           CHUNKS, CHUNK >> 20, one, CHUNKS * CHUNK / one / 1e6, two, CHUNKS * CHUNK / two / 1e6);
    if (memcmp(host, back, CHUNKS * CHUNK) != 0) {
        printf("stream-overlap: FAILED: the data did not come back intact\n");
        return 1;
    }
    printf("stream-overlap: %zu bytes checked\n", CHUNKS * CHUNK);
    CHECK(gpurt_free(dev));
    CHECK(gpurt_pinned_free(host));
    CHECK(gpurt_pinned_free(back));
    CHECK(gpurt_stream_destroy(streams[0]));
    CHECK(gpurt_stream_destroy(streams[1]));
    return 0;
}
