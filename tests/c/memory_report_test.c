/* gpurt_memory_report: misuse refused with the caller's struct untouched; the driver's
 * total as gpurt_mem_get_info gives it; the local-memory reservation by the driver's
 * rule; each figure gpurt makes moves by exactly what was made — blocks of the default
 * pool, a user pool's block and its sleep (its memory counted asleep, not reserved), a
 * growable buffer's mappings (in the default pool's figures) — and back when they go. Without NVML's figure of the
 * process (the stand-in driver) `process` and `unattributed` read GPURT_MEMORY_UNKNOWN;
 * with it (a GPU) `unattributed` is the process's figure less what holds memory. A
 * device sleep gives back the local memory a grown stack size reserves (NVML's figure
 * drops by it on a GPU) and its wake restores the stack size; a driver that refuses
 * the shrink leaves the sleep standing.
 *
 *   memory_report_test */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static gpurt_memory_report_t report(void) {
    gpurt_memory_report_t r = GPURT_MEMORY_REPORT_INIT;
    EXPECT(gpurt_memory_report(0, &r), GPURT_SUCCESS);
    return r;
}

static uint64_t attributed(const gpurt_memory_report_t *r) {
    return r->local_memory + r->default_pool_reserved + r->user_pools_reserved + r->graph_pools_reserved + r->math_handles + r->modules +
           r->communicators;
}

static void misuse(void) {
    gpurt_memory_report_t r, before;
    memset(&r, 0xab, sizeof r);
    r.struct_size = sizeof(size_t); /* a struct of no version */
    before = r;
    EXPECT(gpurt_memory_report(0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_report(0, &r), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpurt_last_error_message(), "struct_size") != NULL, "the refusal names struct_size: %s", gpurt_last_error_message());
    CHECK(memcmp(&r, &before, sizeof r) == 0, "a refused call writes nothing");
    r.struct_size = sizeof r;
    before = r;
    EXPECT(gpurt_memory_report(99, &r), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(memcmp(&r, &before, sizeof r) == 0, "a refused device writes nothing");
}

typedef int (*limit_get_fn)(size_t *, int);
typedef int (*limit_set_fn)(int, size_t);
typedef void (*fail_nth_fn)(const char *, long);

/* The stack size grown as the driver grows it for a launch whose frame needs more (here
 * through the driver's own call), then a device sleep and its wake. */
static void local_memory_given_back(int real) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    limit_get_fn get_limit = NULL;
    limit_set_fn set_limit = NULL;
    fail_nth_fn fail_nth = NULL;
    size_t stack = 0, grown, now = 0;
    gpurt_memory_report_t before, big, asleep;
    *(void **)(&get_limit) = driver ? dlsym(driver, "cuCtxGetLimit") : NULL; /* POSIX: function pointers from dlsym */
    *(void **)(&set_limit) = driver ? dlsym(driver, "cuCtxSetLimit") : NULL;
    *(void **)(&fail_nth) = driver ? dlsym(driver, "stub_fail_nth") : NULL;
    CHECK(get_limit && set_limit, "the driver's limit calls");
    if (!get_limit || !set_limit) return;
    EXPECT(gpurt_set_device(0), GPURT_SUCCESS);
    CHECK(get_limit(&stack, 0) == 0 && stack > 0, "the stack size: %zu", stack);
    before = report();
    grown = stack * (2 + (size_t)(rand() % 3));
    CHECK(set_limit(0, grown) == 0, "the stack grown to %zu", grown);
    big = report();
    CHECK(big.local_memory == before.local_memory / stack * grown, "local memory at the grown stack: %llu",
          (unsigned long long)big.local_memory);
    EXPECT(gpurt_device_sleep(0, GPURT_SLEEP_DISCARD), GPURT_SUCCESS);
    asleep = report();
    CHECK(get_limit(&now, 0) == 0 && now == stack, "asleep, the stack size the context had (%zu, %zu before)", now, stack);
    CHECK(asleep.local_memory == before.local_memory, "asleep, the local memory of before: %llu", (unsigned long long)asleep.local_memory);
    if (big.process != GPURT_MEMORY_UNKNOWN && asleep.process != GPURT_MEMORY_UNKNOWN) {
        uint64_t freed = big.process - asleep.process, grew = big.local_memory - before.local_memory;
        CHECK(freed >= grew / 10 * 9, "NVML: the sleep gave back %.1f MiB of %.1f grown", freed / 1048576.0, grew / 1048576.0);
        printf("memory_report_test: a stack of %zu bytes (%zu by default) reserved %.1f MiB more; a device sleep gave back %.1f MiB\n", grown,
               stack, grew / 1048576.0, freed / 1048576.0);
    } else if (real) {
        printf("memory_report_test: no NVML figure: the local memory given back is checked by the stack size only\n");
    }
    EXPECT(gpurt_device_wake(0), GPURT_SUCCESS);
    CHECK(get_limit(&now, 0) == 0 && now == grown, "awake, the stack size of before the sleep (%zu, %zu)", now, grown);
    CHECK(report().local_memory == big.local_memory, "awake, its local memory");
    if (fail_nth) { /* the stand-in refuses the shrink: the sleep stands, the stack as it was */
        fail_nth("cuCtxSetLimit", 1);
        EXPECT(gpurt_device_sleep(0, GPURT_SLEEP_DISCARD), GPURT_SUCCESS);
        CHECK(get_limit(&now, 0) == 0 && now == grown, "a refused shrink keeps the stack size: %zu", now);
        fail_nth(NULL, 0);
        EXPECT(gpurt_device_wake(0), GPURT_SUCCESS);
    }
    CHECK(set_limit(0, stack) == 0, "the stack size put back");
}

int main(void) {
    int count = 0, real;
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT;
    gpurt_mem_pool_t pool = NULL;
    gpurt_vbuffer_t vb = NULL;
    gpurt_stream_t s = NULL;
    void *blocks[4] = {0}, *pooled = NULL;
    size_t total = 0, free_now = 0, granularity = 0, sizes = 0, pooled_size;
    gpurt_memory_report_t r0, r1, r2, r3, r4;
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("memory_report_test: skipped: no GPU (%s)\n", gpurt_last_error_message());
        return getenv("GPURT_REQUIRE_GPU") && strcmp(getenv("GPURT_REQUIRE_GPU"), "1") == 0 ? 1 : 0;
    }
    srand((unsigned)time(NULL));
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    real = strcmp(props.name, "Fake GPU") != 0;
    misuse();
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &s), GPURT_SUCCESS);

    r0 = report();
    EXPECT(gpurt_mem_get_info(0, &free_now, &total), GPURT_SUCCESS);
    CHECK(r0.device_total == total && r0.device_free > 0 && r0.device_free <= total, "the driver's total (%llu, %zu)",
          (unsigned long long)r0.device_total, total);
    CHECK(r0.local_memory > 0 && r0.local_memory % 1024 == 0, "local memory %llu", (unsigned long long)r0.local_memory);
    if (!real) CHECK(r0.local_memory == 1024, "the stand-in's 1 KiB stack on one SM of one thread: %llu", (unsigned long long)r0.local_memory);

    /* Blocks of the default pool: its live bytes move by their sizes exactly. */
    for (int i = 0; i < 4; i++) {
        size_t size = ((size_t)(rand() % 4096) + 1) * 512;
        sizes += size;
        EXPECT(gpurt_malloc(size, s, &blocks[i]), GPURT_SUCCESS);
    }
    r1 = report();
    CHECK(r1.default_pool_live - r0.default_pool_live == sizes, "the default pool's live bytes grew by %zu: %llu", sizes,
          (unsigned long long)(r1.default_pool_live - r0.default_pool_live));
    CHECK(r1.default_pool_reserved >= r1.default_pool_live, "reserved covers live");
    CHECK(r1.user_pools_live == r0.user_pools_live && r1.vbuffers_mapped == r0.vbuffers_mapped, "nothing else moved");

    /* A user pool's block, then the pool asleep: its memory leaves reserved for asleep. */
    pooled_size = ((size_t)(rand() % 8192) + 1) * 512;
    EXPECT(gpurt_mem_pool_create(0, &options, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(pool, pooled_size, s, &pooled), GPURT_SUCCESS);
    r2 = report();
    CHECK(r2.user_pools_live - r1.user_pools_live == pooled_size, "a user pool's live bytes: %llu for %zu",
          (unsigned long long)(r2.user_pools_live - r1.user_pools_live), pooled_size);
    CHECK(r2.user_pools_reserved >= r2.user_pools_live && r2.default_pool_live == r1.default_pool_live, "the default pool did not move");
    EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_DISCARD), GPURT_SUCCESS);
    r3 = report();
    CHECK(r3.user_pools_asleep > r2.user_pools_asleep, "the pool's memory counted asleep");
    CHECK(r2.user_pools_reserved - r3.user_pools_reserved == r3.user_pools_asleep - r2.user_pools_asleep,
          "what sleeps leaves reserved: %llu gone, %llu asleep", (unsigned long long)(r2.user_pools_reserved - r3.user_pools_reserved),
          (unsigned long long)(r3.user_pools_asleep - r2.user_pools_asleep));
    EXPECT(gpurt_mem_pool_wake(pool), GPURT_SUCCESS);
    CHECK(report().user_pools_reserved == r2.user_pools_reserved, "woken, reserved again");

    /* A growable buffer's mappings. */
    EXPECT(gpurt_vbuffer_create(0, 64u << 20, &vb), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_granularity(vb, &granularity), GPURT_SUCCESS);
    EXPECT(gpurt_vbuffer_map(vb, 0, 2 * granularity), GPURT_SUCCESS);
    r4 = report();
    CHECK(r4.vbuffers_mapped - r2.vbuffers_mapped == 2 * granularity, "a vbuffer's mapped bytes: %llu",
          (unsigned long long)(r4.vbuffers_mapped - r2.vbuffers_mapped));
    CHECK(r4.default_pool_live - r2.default_pool_live == 2 * granularity, "counted in the default pool's live bytes");

    if (r4.process == GPURT_MEMORY_UNKNOWN) {
        if (real) printf("memory_report_test: NVML gives no figure for this process (no NVML, or another PID namespace)\n");
        CHECK(r4.unattributed == GPURT_MEMORY_UNKNOWN, "unattributed unknown with the process's figure");
    } else {
        uint64_t held = attributed(&r4);
        CHECK(r4.unattributed == (r4.process > held ? r4.process - held : 0), "unattributed: the process's %llu less %llu",
              (unsigned long long)r4.process, (unsigned long long)held);
        CHECK(r4.process >= r4.default_pool_reserved + r4.user_pools_reserved, "NVML's figure covers the pools");
        printf("memory_report_test: process %.1f MiB: local memory %.1f, pools %.1f, vbuffers %.1f, math handles %.1f, modules %.1f, "
               "unattributed %.1f\n",
               r4.process / 1048576.0, r4.local_memory / 1048576.0,
               (r4.default_pool_reserved + r4.user_pools_reserved + r4.graph_pools_reserved) / 1048576.0, r4.vbuffers_mapped / 1048576.0,
               r4.math_handles / 1048576.0, r4.modules / 1048576.0, r4.unattributed / 1048576.0);
    }

    /* Everything goes: the live figures come back to the start. */
    EXPECT(gpurt_vbuffer_destroy(vb), GPURT_SUCCESS);
    EXPECT(gpurt_free(pooled), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
    for (int i = 0; i < 4; i++) EXPECT(gpurt_free(blocks[i]), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    r1 = report();
    CHECK(r1.default_pool_live == r0.default_pool_live && r1.user_pools_reserved == r0.user_pools_reserved &&
              r1.vbuffers_mapped == r0.vbuffers_mapped,
          "everything back: live %llu (%llu), user pools %llu (%llu), vbuffers %llu (%llu)", (unsigned long long)r1.default_pool_live,
          (unsigned long long)r0.default_pool_live, (unsigned long long)r1.user_pools_reserved, (unsigned long long)r0.user_pools_reserved,
          (unsigned long long)r1.vbuffers_mapped, (unsigned long long)r0.vbuffers_mapped);
    EXPECT(gpurt_stream_destroy(s), GPURT_SUCCESS);
    local_memory_given_back(real);
    printf("memory_report_test: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
