/* Expandable segments on a device without virtual memory management (the stub driver
 * with STUB_CUDA_NO_VMM=1, which this test sets, as it sets GPURT_ALLOC_CONF=
 * expandable_segments:True before its first call): the process's configuration falls
 * back to whole segments silently, as PyTorch's does there; a pool that inherits it
 * allocates alike; a pool's own expandable_segments:True is refused with
 * GPURT_ERROR_INVALID_ARGUMENT, and nothing is left behind.
 *
 * Needs the stub driver (its device "Fake GPU"): a real device maps memory, so
 * elsewhere it says so and exits 0 (skipped), GPURT_REQUIRE_GPU notwithstanding.
 */
#define _GNU_SOURCE
#include <gpurt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define MIB (1ull << 20)

static uint64_t reserved_now(void) {
    uint64_t reserved = 0;
    EXPECT(gpurt_memory_usage(0, NULL, NULL, &reserved, NULL), GPURT_SUCCESS);
    return reserved;
}

int main(void) {
    setenv("GPURT_ALLOC_CONF", "expandable_segments:True", 1);
    setenv("STUB_CUDA_NO_VMM", "1", 1);
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_device_properties_init(&props);
    if (gpurt_device_get_properties(0, &props) != GPURT_SUCCESS || strcmp(props.name, "Fake GPU") != 0) {
        printf("no_vmm_test: skipped: needs the stub driver's device without virtual memory management (%s)\n",
               gpurt_last_error_message());
        return 0;
    }

    /* The default pool: a 5 MiB request takes a whole 20 MiB segment (PyTorch's size
     * for 1-10 MiB), where an expandable segment would map 6 MiB. */
    gpurt_stream_t stream = NULL;
    EXPECT(gpurt_stream_default(0, &stream), GPURT_SUCCESS);
    void *a = NULL;
    EXPECT(gpurt_malloc(5 * MIB, stream, &a), GPURT_SUCCESS);
    CHECK(reserved_now() == 20 * MIB, "reserved %llu MiB, not one whole segment", (unsigned long long)(reserved_now() / MIB));

    /* A pool inheriting the process's configuration allocates alike. */
    gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT;
    EXPECT(gpurt_mem_pool_options_init(&options), GPURT_SUCCESS);
    options.config = "max_split_size_mb:64";
    gpurt_mem_pool_t inherits = NULL;
    EXPECT(gpurt_mem_pool_create(0, &options, &inherits), GPURT_SUCCESS);
    void *b = NULL;
    EXPECT(gpurt_mem_pool_malloc(inherits, 5 * MIB, stream, &b), GPURT_SUCCESS);
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    EXPECT(gpurt_mem_pool_stats(inherits, &stats), GPURT_SUCCESS);
    CHECK(stats.reserved_bytes.all.current == (int64_t)(20 * MIB), "the inheriting pool reserved %lld bytes",
          (long long)stats.reserved_bytes.all.current);

    /* A pool's own request cannot be met: refused, naming why, and no pool made. */
    options.config = "expandable_segments:True";
    gpurt_mem_pool_t asks = NULL;
    EXPECT(gpurt_mem_pool_create(0, &options, &asks), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(asks == NULL, "a refused pool was returned");
    CHECK(strstr(gpurt_last_error_message(), "virtual memory management") != NULL, "the refusal does not say why");

    EXPECT(gpurt_free(b), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(inherits), GPURT_SUCCESS);
    EXPECT(gpurt_free(a), GPURT_SUCCESS);
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    CHECK(reserved_now() == 0, "memory left reserved");
    printf("no_vmm_test: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
