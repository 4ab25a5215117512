/* The caching allocator as a serving loop sees it: requests of varying sizes on a
 * stream, freed and reused, then statistics (torch.cuda.memory_stats), the summary
 * table (memory_summary) and empty_cache. */
#include "example.h"

int main(void) {
    gpurt_stream_t stream;
    gpurt_memory_stats_t st = GPURT_MEMORY_STATS_INIT;
    void *blocks[64];
    char *summary;
    size_t needed = 0, reserved_before;
    uint64_t reserved = 0;
    int round, i;
    require_gpu("allocator-stats");
    CHECK(gpurt_stream_from_pool(0, 0, &stream));
    for (round = 0; round < 100; round++) {
        for (i = 0; i < 64; i++) CHECK(gpurt_malloc((size_t)(1 + (round * 7 + i * 13) % 64) << 16, stream, &blocks[i]));
        for (i = 0; i < 64; i++) CHECK(gpurt_free(blocks[i]));
    }
    CHECK(gpurt_memory_stats(0, &st));
    printf("allocator-stats: %lld allocations served by %lld driver allocations; peak in use %lld bytes, reserved %lld\n",
           (long long)st.allocation.all.allocated, (long long)st.num_device_alloc,
           (long long)st.allocated_bytes.all.peak, (long long)st.reserved_bytes.all.current);
    CHECK(gpurt_memory_summary(0, NULL, 0, &needed));
    summary = (char *)malloc(needed);
    CHECK(gpurt_memory_summary(0, summary, needed, &needed));
    printf("%s\n", summary);
    free(summary);
    reserved_before = (size_t)st.reserved_bytes.all.current;
    CHECK(gpurt_empty_cache());
    CHECK(gpurt_memory_usage(0, NULL, NULL, &reserved, NULL));
    printf("allocator-stats: empty_cache released %zu bytes; %llu still reserved\n", reserved_before - (size_t)reserved,
           (unsigned long long)reserved);
    return reserved == 0 ? 0 : 1;
}
