/* Misuse of gpurt through its C ABI: NULL out-pointers, NULL / garbage / destroyed /
 * wrong-kind handles, bad ordinals and enum values. Every case must return its
 * documented status and set a message; none may crash. Runs with and without a
 * GPU: without one it also checks the no-driver behaviour. Valid C99 and C++17, so
 * the consumer tests build it both ways. */
#define _POSIX_C_SOURCE 200112L /* posix_memalign */
#include <gpurt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0, checks = 0;

#define EXPECT(call, expected)                                                              \
    do {                                                                                    \
        gpurt_status_t got_ = (call);                                                       \
        checks++;                                                                           \
        if (got_ != (expected)) {                                                           \
            failures++;                                                                     \
            printf("FAIL %s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, #call, \
                   gpurt_status_string(got_), gpurt_status_string(expected),                \
                   gpurt_last_error_message());                                             \
        } else if ((expected) != GPURT_SUCCESS && (expected) != GPURT_ERROR_NOT_READY &&    \
                   gpurt_last_error_message()[0] == '\0') {                                 \
            failures++;                                                                     \
            printf("FAIL %s:%d: %s set no error message\n", __FILE__, __LINE__, #call);     \
        }                                                                                   \
    } while (0)

#define EXPECT_TRUE(cond)                                                                   \
    do {                                                                                    \
        checks++;                                                                           \
        if (!(cond)) {                                                                      \
            failures++;                                                                     \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                          \
        }                                                                                   \
    } while (0)

static int log_calls = 0;
static void on_log(int level, const char *message, void *user) {
    (void)level;
    if (user == (void *)&log_calls && message != NULL) log_calls++;
}

static void check_general(void) {
    int value = 0, i;
    EXPECT_TRUE(gpurt_version() == GPURT_VERSION);
    for (i = -1; i < 20; i++) EXPECT_TRUE(gpurt_status_string(i) != NULL);
    EXPECT_TRUE(strcmp(gpurt_status_string(GPURT_ERROR_INVALID_HANDLE), "invalid handle") == 0);
    EXPECT(gpurt_device_count(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "gpurt_device_count") != NULL);
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "count") != NULL);
    EXPECT(gpurt_is_available(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_is_initialized(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_get_device(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_last_cuda_error(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_last_cuda_error(&value), GPURT_SUCCESS);
    EXPECT(gpurt_set_sync_debug_mode(7), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_set_sync_debug_mode(GPURT_SYNC_DEBUG_ERROR), GPURT_SUCCESS);
    EXPECT(gpurt_get_sync_debug_mode(&value), GPURT_SUCCESS);
    EXPECT_TRUE(value == GPURT_SYNC_DEBUG_ERROR);
    EXPECT(gpurt_set_sync_debug_mode(GPURT_SYNC_DEBUG_OFF), GPURT_SUCCESS);
    EXPECT(gpurt_set_log_level(9), GPURT_ERROR_INVALID_ARGUMENT);
    /* The log callback receives messages (debug level logs every failure). */
    EXPECT(gpurt_set_log_callback(on_log, &log_calls), GPURT_SUCCESS);
    EXPECT(gpurt_set_log_level(4), GPURT_SUCCESS);
    EXPECT(gpurt_device_count(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_set_log_level(0), GPURT_SUCCESS);
    EXPECT(gpurt_set_log_callback(NULL, NULL), GPURT_SUCCESS);
    EXPECT_TRUE(log_calls >= 1);
}

static void check_device_handles(int count) {
    gpurt_device_t device = NULL;
    int ordinal = -7;
    EXPECT(gpurt_device_get_ordinal(NULL, &ordinal), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_device_get_ordinal((gpurt_device_t)(uintptr_t)0x1234, &ordinal), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_device_get(0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    if (count > 0) {
        EXPECT(gpurt_device_get(count, &device), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_device_get(0, &device), GPURT_SUCCESS);
        EXPECT(gpurt_device_get_ordinal(device, NULL), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_device_get_ordinal(device, &ordinal), GPURT_SUCCESS);
        EXPECT_TRUE(ordinal == 0);
    }
}

/* Random numbers: seeds and states round-trip; every bad argument is refused before
 * anything is drawn, and leaves the generator's state as it was. */
static void check_random(gpurt_stream_t stream) {
    gpurt_generator_t gen = NULL;
    gpurt_rng_state_t state = {0, 0}, after = {0, 0}, resumed = {123, 456};
    uint64_t seed = 0;
    void *out = NULL;
    EXPECT(gpurt_rng_initial_seed(0, &seed), GPURT_SUCCESS);
    EXPECT_TRUE(seed == GPURT_RNG_DEFAULT_SEED);
    EXPECT(gpurt_rng_manual_seed(0, 42), GPURT_SUCCESS);
    EXPECT(gpurt_rng_get_state(NULL, &state), GPURT_SUCCESS);
    EXPECT_TRUE(state.seed == 42 && state.offset == 0);
    EXPECT(gpurt_rng_seed(0, &seed), GPURT_SUCCESS);
    EXPECT(gpurt_rng_initial_seed(0, &state.seed), GPURT_SUCCESS);
    EXPECT_TRUE(state.seed == seed);
    EXPECT(gpurt_rng_manual_seed_all(7), GPURT_SUCCESS);
    EXPECT(gpurt_rng_manual_seed(99, 7), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_rng_seed(0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_rng_get_state(NULL, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_rng_set_state(NULL, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_generator_create(0, 5, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_generator_create(0, 5, &gen), GPURT_SUCCESS);
    EXPECT(gpurt_rng_set_state(gen, &resumed), GPURT_SUCCESS);
    EXPECT(gpurt_rng_get_state(gen, &after), GPURT_SUCCESS);
    EXPECT_TRUE(after.seed == 123 && after.offset == 456);
    EXPECT(gpurt_rng_get_state((gpurt_generator_t)stream, &after), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_malloc(4096, stream, &out), GPURT_SUCCESS);
    EXPECT(gpurt_random_uniform(gen, NULL, 16, GPURT_DTYPE_F32, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_random_uniform(gen, out, 0, GPURT_DTYPE_F32, stream), GPURT_SUCCESS);
    EXPECT(gpurt_random_uniform(gen, out, 16, 77, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_random_uniform(gen, out, 16, GPURT_DTYPE_I32, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_random_uniform(gen, (char *)out + 2, 16, GPURT_DTYPE_F32, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_random_uniform(gen, out, SIZE_MAX, GPURT_DTYPE_F32, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_random_uniform(gen, out, 16, GPURT_DTYPE_F32, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_random_uniform((gpurt_generator_t)stream, out, 16, GPURT_DTYPE_F32, stream), GPURT_ERROR_INVALID_HANDLE);
    /* An empty fill checks its handles and dtype too: a wrong-kind, forged or (below)
     * destroyed generator, or no stream, is refused whatever the count. */
    EXPECT(gpurt_random_uniform((gpurt_generator_t)stream, NULL, 0, GPURT_DTYPE_F32, stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_random_normal((gpurt_generator_t)(uintptr_t)0x5a5a5a5a5a5aull, NULL, 0, GPURT_DTYPE_F32, 0.0, 1.0, stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_random_integers((gpurt_generator_t)stream, NULL, 0, GPURT_DTYPE_I32, 0, 10, stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_random_bernoulli((gpurt_generator_t)stream, NULL, 0, GPURT_DTYPE_F32, 0.5, stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_random_permutation((gpurt_generator_t)stream, NULL, 0, GPURT_DTYPE_I64, stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_random_uniform(gen, NULL, 0, GPURT_DTYPE_F32, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_random_uniform(gen, NULL, 0, 77, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_random_uniform(NULL, NULL, 0, GPURT_DTYPE_F32, stream), GPURT_SUCCESS);
    EXPECT(gpurt_random_permutation(gen, NULL, 0, GPURT_DTYPE_I32, stream), GPURT_SUCCESS);
    EXPECT(gpurt_random_normal(gen, out, 16, GPURT_DTYPE_F32, 0.0, -1.0, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_random_integers(gen, out, 16, GPURT_DTYPE_I32, 5, 5, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_random_integers(gen, out, 16, GPURT_DTYPE_I32, 0, (int64_t)1 << 40, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_random_integers(gen, out, 16, GPURT_DTYPE_F32, 0, 10, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_random_bernoulli(gen, out, 16, GPURT_DTYPE_F32, 1.5, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_random_permutation(gen, out, 16, GPURT_DTYPE_F32, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_random_permutation(gen, NULL, 16, GPURT_DTYPE_I64, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_rng_get_state(gen, &after), GPURT_SUCCESS);
    EXPECT_TRUE(after.seed == 123 && after.offset == 456);
    EXPECT(gpurt_free(out), GPURT_SUCCESS);
    EXPECT(gpurt_generator_destroy(gen), GPURT_SUCCESS);
    EXPECT(gpurt_generator_destroy(gen), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_rng_get_state(gen, &after), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_random_uniform(gen, NULL, 0, GPURT_DTYPE_F32, stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_random_normal(gen, NULL, 0, GPURT_DTYPE_F32, 0.0, 1.0, stream), GPURT_ERROR_INVALID_HANDLE);
}

/* NVML telemetry: argument checks first; on the stub (no NVML) a clear refusal,
 * on a GPU readings within physical bounds (gpu/compare_telemetry.py checks them
 * against nvidia-smi). */
static void check_telemetry(const gpurt_device_properties_t *props) {
    gpurt_telemetry_t t = GPURT_TELEMETRY_INIT;
    gpurt_process_t processes[8];
    size_t count = 0;
    gpurt_status_t s;
    EXPECT(gpurt_device_telemetry(0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_device_processes(0, NULL, 8, &count), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_device_processes(0, processes, 8, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_device_telemetry(99, &t), GPURT_ERROR_INVALID_ARGUMENT);
    s = gpurt_device_telemetry(0, &t);
    if (strcmp(props->name, "Fake GPU") == 0) {
        EXPECT_TRUE(s == GPURT_ERROR_NOT_SUPPORTED && strstr(gpurt_last_error_message(), "libnvidia-ml.so.1") != NULL);
        return;
    }
    EXPECT_TRUE(s == GPURT_SUCCESS);
    EXPECT_TRUE(t.memory_total >= props->total_memory && t.memory_used + t.memory_free <= t.memory_total + (1u << 20));
    EXPECT_TRUE(t.temperature_c > 0 && t.temperature_c < 120);
    EXPECT_TRUE(t.power_draw_mw > 0 && t.power_limit_mw > 0);
    EXPECT_TRUE(t.sm_clock_mhz > 0 && t.memory_clock_mhz > 0);
    EXPECT_TRUE(t.gpu_utilization >= 0 && t.gpu_utilization <= 100);
    EXPECT(gpurt_device_processes(0, processes, 8, &count), GPURT_SUCCESS);
    EXPECT(gpurt_device_processes(0, NULL, 0, &count), GPURT_SUCCESS);
}

/* bfloat16 support follows the compute capability; the architecture list is NVRTC's
 * (absent beside the stub driver) and holds the device's own on a GPU. */
static void check_arch_queries(const gpurt_device_properties_t *props) {
    int supported = -1, archs[128], own = 0;
    size_t count = 0, i;
    gpurt_status_t s;
    EXPECT(gpurt_device_bf16_supported(0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_device_bf16_supported(0, &supported), GPURT_SUCCESS);
    EXPECT_TRUE(supported == (props->major >= 8));
    EXPECT(gpurt_arch_list(NULL, 4, &count), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_arch_list(archs, 128, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    s = gpurt_arch_list(archs, 128, &count);
    if (strcmp(props->name, "Fake GPU") == 0) {
        EXPECT_TRUE(s == GPURT_SUCCESS || s == GPURT_ERROR_NOT_SUPPORTED);
        return;
    }
    EXPECT_TRUE(s == GPURT_SUCCESS && count > 0 && count <= 128);
    for (i = 0; i < count && i < 128; i++) own |= archs[i] == props->major * 10 + props->minor;
    EXPECT_TRUE(own);
}

/* Pool bookkeeping: a returned pooled event comes back under a new handle (the old
 * one stays invalid); pooled streams are handed out round-robin, 32 per priority. */
static void check_pools(void) {
    gpurt_event_t first = NULL, second = NULL;
    gpurt_stream_t streams[GPURT_STREAM_POOL_SIZE + 1];
    void *native_first = NULL, *native_second = NULL;
    int i, distinct = 1;
    EXPECT(gpurt_event_pool_get(0, &first), GPURT_SUCCESS);
    EXPECT(gpurt_event_native(first, &native_first), GPURT_SUCCESS);
    EXPECT(gpurt_event_destroy(first), GPURT_SUCCESS);
    EXPECT(gpurt_event_pool_get(0, &second), GPURT_SUCCESS);
    EXPECT(gpurt_event_native(second, &native_second), GPURT_SUCCESS);
    EXPECT_TRUE(native_first == native_second);
    EXPECT_TRUE(first != second);
    EXPECT(gpurt_event_query(first), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_event_destroy(second), GPURT_SUCCESS);
    for (i = 0; i <= GPURT_STREAM_POOL_SIZE; i++) EXPECT(gpurt_stream_from_pool(0, 1, &streams[i]), GPURT_SUCCESS);
    for (i = 1; i < GPURT_STREAM_POOL_SIZE; i++) distinct &= streams[i] != streams[0];
    EXPECT_TRUE(distinct);
    EXPECT_TRUE(streams[GPURT_STREAM_POOL_SIZE] == streams[0]);
    EXPECT(gpurt_stream_destroy(streams[0]), GPURT_SUCCESS); /* a no-op for pooled streams */
    EXPECT(gpurt_stream_query(streams[0]), GPURT_SUCCESS);
}

static void check_stream_event_handles(int count) {
    gpurt_stream_t stream = NULL, null_stream = NULL;
    gpurt_event_t event = NULL, null_event = NULL;
    int value = 0;
    EXPECT(gpurt_stream_query(null_stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_stream_destroy(null_stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_event_record(null_event, null_stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_event_query((gpurt_event_t)(uintptr_t)0xdeadbeef), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_stream_create(0, 0, 0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_stream_pop(), GPURT_ERROR_INVALID_ARGUMENT);
    if (count == 0) return;
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    EXPECT(gpurt_event_create(0, GPURT_EVENT_DISABLE_TIMING, &event), GPURT_SUCCESS);
    EXPECT(gpurt_stream_query((gpurt_stream_t)(void *)event), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_event_destroy((gpurt_event_t)(void *)stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_event_record(event, stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_wait_event(stream, event), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_query(stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_get_device(stream, &value), GPURT_SUCCESS);
    EXPECT_TRUE(value == 0);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_event_record(event, stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_event_destroy(event), GPURT_SUCCESS);
    EXPECT(gpurt_event_destroy(event), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_event_create(0, 0x40, &event), GPURT_ERROR_INVALID_ARGUMENT);
    check_pools();
}

static void check_without_gpu(gpurt_status_t expected) {
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    size_t free_bytes = 0, total_bytes = 0;
    int value = 0;
    gpurt_device_t device = NULL;
    EXPECT(gpurt_is_available(&value), GPURT_SUCCESS);
    EXPECT_TRUE(value == 0);
    EXPECT(gpurt_init(), expected);
    EXPECT(gpurt_set_device(0), expected);
    EXPECT(gpurt_get_device(&value), expected);
    EXPECT(gpurt_device_get(0, &device), expected);
    EXPECT(gpurt_device_get_properties(0, &props), expected);
    EXPECT(gpurt_mem_get_info(0, &free_bytes, &total_bytes), expected);
    EXPECT(gpurt_device_synchronize(0), expected);
    EXPECT(gpurt_device_can_access_peer(0, 1, &value), expected);
    EXPECT(gpurt_device_enable_peer_access(0, 1), expected);
    EXPECT(gpurt_device_tf32_supported(0, &value), expected);
}

static void check_with_gpu(int count) {
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_device_properties_t bad;
    int value = -1;
    EXPECT(gpurt_init(), GPURT_SUCCESS);
    EXPECT(gpurt_set_device(count), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "does not exist") != NULL);
    EXPECT(gpurt_set_device(-5), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_device_get_properties(count + 3, &props), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_device_get_properties(0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    memset(&bad, 0, sizeof bad);
    EXPECT(gpurt_device_get_properties(0, &bad), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    EXPECT_TRUE(props.name[0] != '\0' && props.major > 0 && props.total_memory > 0);
    EXPECT(gpurt_mem_get_info(0, NULL, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_device_enable_peer_access(0, 0), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_set_device(0), GPURT_SUCCESS);
    EXPECT(gpurt_get_device(&value), GPURT_SUCCESS);
    EXPECT_TRUE(value == 0);
    EXPECT(gpurt_set_sync_debug_mode(GPURT_SYNC_DEBUG_ERROR), GPURT_SUCCESS);
    EXPECT(gpurt_device_synchronize(0), GPURT_ERROR_SYNCHRONIZING_CALL);
    EXPECT(gpurt_set_sync_debug_mode(GPURT_SYNC_DEBUG_OFF), GPURT_SUCCESS);
    EXPECT(gpurt_device_synchronize(GPURT_CURRENT_DEVICE), GPURT_SUCCESS);
    check_telemetry(&props);
    check_arch_queries(&props);
}

/* Staged pageable copies: argument checks, and a multi-chunk round trip whose bytes
 * are checked where a real device holds them. */
static void check_staged_copies(gpurt_stream_t stream) {
    size_t bytes = (9u << 20) + 5, i;
    unsigned char *src = (unsigned char *)malloc(bytes), *dst = (unsigned char *)malloc(bytes);
    void *dev = NULL;
    gpurt_host_memory_stats_t before = GPURT_HOST_MEMORY_STATS_INIT, after = GPURT_HOST_MEMORY_STATS_INIT;
    gpurt_pinned_pool_t def = NULL;
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    EXPECT(gpurt_pinned_pool_default(&def), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(bytes, stream, &dev), GPURT_SUCCESS);
    for (i = 0; i < bytes; i++) {
        src[i] = (unsigned char)(i * 131u + 7u);
        dst[i] = 0;
    }
    EXPECT(gpurt_memcpy_htod_staged(NULL, src, 8, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memcpy_htod_staged(dev, NULL, 8, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memcpy_htod_staged(dev, src, 8, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_memcpy_dtoh_staged(dst, dev, 8, (gpurt_stream_t)def), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_memcpy_htod_staged(NULL, NULL, 0, stream), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_stats(def, &before), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_htod_staged(dev, src, bytes, stream), GPURT_SUCCESS);
    EXPECT(gpurt_set_sync_debug_mode(GPURT_SYNC_DEBUG_ERROR), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_dtoh_staged(dst, dev, bytes, stream), GPURT_ERROR_SYNCHRONIZING_CALL);
    EXPECT(gpurt_set_sync_debug_mode(GPURT_SYNC_DEBUG_OFF), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_dtoh_staged(dst, dev, bytes, stream), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_stats(def, &after), GPURT_SUCCESS);
    EXPECT_TRUE(after.allocations.current == before.allocations.current);
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    if (strcmp(props.name, "Fake GPU") != 0) { /* the stub driver moves no bytes */
        EXPECT_TRUE(memcmp(src, dst, bytes) == 0);
    }
    EXPECT(gpurt_free(dev), GPURT_SUCCESS);
    free(src);
    free(dst);
}

/* Sizes and counts at the limits of size_t: each is refused with a status and a
 * message before any rounding wraps, any allocation aborts the process or any array
 * is read past its end; no statistic changes. */
static void check_sizes(gpurt_stream_t stream) {
    static const size_t huge[] = {SIZE_MAX, SIZE_MAX - 4095, ((size_t)1 << 63) + 1, (size_t)1 << 62};
    static const char ptx[] = ".version 7.0\n.target sm_50\n.address_size 64\n";
    const char *names[] = {"a"};
    const char *options[] = {"-default-device"};
    const void *inputs[1];
    char host[64];
    void *p = NULL, *dev = NULL;
    gpurt_memory_stats_t before = GPURT_MEMORY_STATS_INIT, after = GPURT_MEMORY_STATS_INIT;
    gpurt_host_memory_stats_t pinned_before = GPURT_HOST_MEMORY_STATS_INIT, pinned_after = GPURT_HOST_MEMORY_STATS_INIT;
    gpurt_pinned_pool_t def = NULL;
    gpurt_module_t module = NULL;
    gpurt_program_t program = NULL;
    size_t i;
    int round;
    inputs[0] = host;
    EXPECT(gpurt_malloc(4096, stream, &dev), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_pool_default(&def), GPURT_SUCCESS);
    for (round = 0; round < 2; round++) { /* separate segments, then expandable ones */
        EXPECT(gpurt_alloc_set_config(round == 0 ? "expandable_segments:False" : "expandable_segments:True"), GPURT_SUCCESS);
        EXPECT(gpurt_memory_stats(0, &before), GPURT_SUCCESS);
        for (i = 0; i < sizeof huge / sizeof huge[0]; i++) {
            p = NULL;
            EXPECT(gpurt_malloc_device(0, huge[i], &p), GPURT_ERROR_OUT_OF_MEMORY);
            EXPECT_TRUE(p == NULL && strstr(gpurt_last_error_message(), "tried to allocate") != NULL);
            EXPECT_TRUE(strstr(gpurt_last_error_message(), "allocate -") == NULL);
            EXPECT(gpurt_malloc(huge[i], stream, &p), GPURT_ERROR_OUT_OF_MEMORY);
            EXPECT_TRUE(gpurt_torch_alloc((ptrdiff_t)(huge[i] >> 1) + 1, 0, NULL) == NULL);
            EXPECT_TRUE(gpurt_cupy_malloc(0, huge[i], 0) == 0);
        }
        EXPECT_TRUE(gpurt_torch_alloc(-1, 0, NULL) == NULL);
        EXPECT(gpurt_memory_stats(0, &after), GPURT_SUCCESS);
        EXPECT_TRUE(memcmp(&before, &after, sizeof before) == 0);
    }
    EXPECT(gpurt_alloc_set_config(""), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_stats(def, &pinned_before), GPURT_SUCCESS);
    for (i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        EXPECT(gpurt_pinned_malloc(def, huge[i], &p), GPURT_ERROR_OUT_OF_MEMORY);
        EXPECT(gpurt_memcpy_dtoh_staged(host, dev, huge[i], stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_memcpy_htod_staged(dev, host, huge[i], stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_memcpy_async(dev, host, huge[i], stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_memcpy(host, dev, huge[i], stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_memcpy_peer_async(dev, 0, dev, 0, huge[i], stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_memset_async(dev, 0, 4, huge[i] / 2, stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_memcpy_2d_async(dev, huge[i] / 2, host, 64, 8, 4, stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_memcpy_2d_async(dev, 64, host, 64, 8, huge[i], stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_host_register(host, huge[i], 0), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_module_load_data(ptx, huge[i], &module), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_rtc_compile("__global__ void k() {}", options, huge[i], &program), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_rtc_get_kernel("__global__ void k() {}", "k", options, huge[i], NULL), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_elementwise("out = a", names, inputs, huge[i], GPURT_DTYPE_F32, 4, dev, stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_elementwise("out = a", names, inputs, 1, GPURT_DTYPE_F32, huge[i], dev, stream), GPURT_ERROR_INVALID_ARGUMENT);
    }
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "count") != NULL);
    EXPECT(gpurt_pinned_stats(def, &pinned_after), GPURT_SUCCESS);
    EXPECT_TRUE(memcmp(&pinned_before, &pinned_after, sizeof pinned_before) == 0);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_free(dev), GPURT_SUCCESS);
}

/* Empty requests: every entry point that takes a size or a count checks its handles,
 * pointers and other arguments before it returns early for 0. A destroyed stream, a
 * wrong-kind handle (a pinned pool's as a stream, a stream's as a pool or a file) and
 * a NULL out-parameter are refused at 0 as at any size; with good arguments 0 succeeds,
 * allocating nothing. */
static void check_empty_requests(gpurt_stream_t stream) {
    const char *names[] = {"a"};
    const void *inputs[1];
    char host[64];
    void *p = (void *)1, *dev = NULL;
    gpurt_stream_t stale = NULL, wrong = NULL;
    gpurt_pinned_pool_t def = NULL;
    gpurt_mem_pool_t pool = NULL;
    gpurt_memory_stats_t before = GPURT_MEMORY_STATS_INIT, after = GPURT_MEMORY_STATS_INIT;
    int bad;
    inputs[0] = host;
    EXPECT(gpurt_malloc(4096, stream, &dev), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_pool_default(&def), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_create(0, NULL, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, 0, 0, &stale), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(stale), GPURT_SUCCESS);
    wrong = (gpurt_stream_t)def;
    EXPECT(gpurt_memory_stats(0, &before), GPURT_SUCCESS);
    for (bad = 0; bad < 2; bad++) {
        gpurt_stream_t s = bad ? wrong : stale;
        EXPECT(gpurt_malloc(0, s, &p), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_mem_pool_malloc(pool, 0, s, &p), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_memcpy_async(dev, host, 0, s), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_memcpy(host, dev, 0, s), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_memcpy_peer_async(dev, 0, dev, 0, 0, s), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_memset_async(dev, 0, 4, 0, s), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_memcpy_2d_async(dev, 64, host, 64, 0, 0, s), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_memcpy_htod_staged(dev, host, 0, s), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_memcpy_dtoh_staged(host, dev, 0, s), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_elementwise("out = a", names, inputs, 1, GPURT_DTYPE_F32, 0, dev, s), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_random_uniform(NULL, dev, 0, GPURT_DTYPE_F32, s), GPURT_ERROR_INVALID_HANDLE);
    }
    EXPECT(gpurt_mem_pool_malloc((gpurt_mem_pool_t)stream, 0, stream, &p), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_pinned_malloc((gpurt_pinned_pool_t)stream, 0, &p), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_gds_read((gpurt_gds_file_t)stream, dev, 0, 0, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_gds_write((gpurt_gds_file_t)stream, dev, 0, 0, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_gds_read_async((gpurt_gds_file_t)stream, dev, 0, 0, stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_gds_write_async((gpurt_gds_file_t)stream, dev, 0, 0, stream), GPURT_ERROR_INVALID_HANDLE);
    /* NULL out-parameters and bad values, at 0. */
    EXPECT(gpurt_malloc(0, stream, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_malloc_device(0, 0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_malloc_device(99, 0, &p), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_malloc(pool, 0, stream, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_pinned_malloc(def, 0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memset_async(dev, 0, 3, 0, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memcpy_peer_async(dev, 99, dev, 0, 0, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_elementwise("out = a", names, inputs, 1, 77, 0, dev, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_elementwise(NULL, names, inputs, 1, GPURT_DTYPE_F32, 0, dev, stream), GPURT_ERROR_INVALID_ARGUMENT);
    /* Good arguments: 0 succeeds and allocates nothing. */
    EXPECT(gpurt_malloc(0, stream, &p), GPURT_SUCCESS);
    EXPECT_TRUE(p == NULL);
    EXPECT(gpurt_mem_pool_malloc(pool, 0, stream, &p), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(dev, host, 0, stream), GPURT_SUCCESS);
    EXPECT(gpurt_memset_async(dev, 0, 4, 0, stream), GPURT_SUCCESS);
    EXPECT(gpurt_elementwise("out = a", names, inputs, 1, GPURT_DTYPE_F32, 0, dev, stream), GPURT_SUCCESS);
    EXPECT(gpurt_memory_stats(0, &after), GPURT_SUCCESS);
    EXPECT_TRUE(before.allocation.all.current == after.allocation.all.current);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
    EXPECT(gpurt_free(dev), GPURT_SUCCESS);
}

/* Modules, kernels and NVRTC: bad images, unknown names and attributes, bad launch
 * shapes, stale kernel handles after unload. The PTX is real, for the GPU run. */
/* Allocation for raw CUstreams (RMM's path): argument checks, exact statistics, frees
 * in another stream's order, uses recorded on another, double frees refused. */
static void check_native_streams(gpurt_stream_t stream) {
    void *native = NULL, *p = NULL, *q = NULL;
    uint64_t before = 0, during = 0, after = 0;
    EXPECT(gpurt_stream_native(stream, &native), GPURT_SUCCESS);
    EXPECT(gpurt_memory_usage(0, &before, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_malloc_native(0, 1 << 20, native, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_malloc_native(99, 1 << 20, native, &p), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_malloc_native(0, (size_t)-1, native, &p), GPURT_ERROR_OUT_OF_MEMORY);
    EXPECT(gpurt_malloc_native(0, 1 << 20, native, &p), GPURT_SUCCESS);
    EXPECT(gpurt_malloc_native(GPURT_CURRENT_DEVICE, 4096, NULL, &q), GPURT_SUCCESS);
    EXPECT_TRUE(p != NULL && q != NULL && p != q);
    EXPECT(gpurt_memory_usage(0, &during, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT_TRUE(during == before + (1 << 20) + 4096);
    EXPECT(gpurt_record_stream_native(q, native), GPURT_SUCCESS); /* PyTorch's Tensor.record_stream */
    EXPECT(gpurt_free_native(p, NULL), GPURT_SUCCESS); /* reuse waits for the legacy stream */
    EXPECT(gpurt_free_native(q, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_free_native(q, native), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_record_stream_native(q, native), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "live") != NULL || strstr(gpurt_last_error_message(), "freed") != NULL);
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "already freed") != NULL);
    EXPECT(gpurt_free_native(NULL, native), GPURT_SUCCESS);
    EXPECT(gpurt_memory_usage(0, &after, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT_TRUE(after == before);
}

/* A user upstream over host memory (the pool never touches its segments' bytes):
 * `context` counts the live segments; a NULL context makes it fail. */
static void *user_alloc(size_t size, int device, void *stream, void *context) {
    void *p = NULL;
    (void)device;
    (void)stream;
    if (context == NULL || posix_memalign(&p, 512, size) != 0) return NULL;
    ++*(int *)context;
    return p;
}

static void user_free(void *p, size_t size, int device, void *stream, void *context) {
    (void)size;
    (void)device;
    (void)stream;
    --*(int *)context;
    free(p);
}

/* torch.cuda.MemPool's use_on_oom: an allocation elsewhere that runs out of memory is
   served from such a pool's cache; a pool without the option is not asked. `failing`
   describes a pool whose upstream refuses every allocation. */
static void check_use_on_oom(gpurt_stream_t stream, gpurt_mem_pool_options_t *failing) {
    gpurt_mem_pool_options_t spare_options = GPURT_MEM_POOL_OPTIONS_INIT;
    gpurt_mem_pool_t spare = NULL, plain = NULL, refusing = NULL;
    void *cached = NULL, *p = NULL;
    failing->user_context = NULL;
    EXPECT(gpurt_mem_pool_create(0, failing, &refusing), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_create(0, NULL, &plain), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(plain, 3u << 20, stream, &cached), GPURT_SUCCESS);
    EXPECT(gpurt_free(cached), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(refusing, 3u << 20, stream, &p), GPURT_ERROR_OUT_OF_MEMORY); /* plain is not asked */
    spare_options.config = "use_on_oom:True";
    EXPECT(gpurt_mem_pool_create(0, &spare_options, &spare), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(spare, 3u << 20, stream, &cached), GPURT_SUCCESS);
    EXPECT(gpurt_free(cached), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(refusing, 3u << 20, stream, &p), GPURT_SUCCESS);
    EXPECT_TRUE(p == cached); /* the spare pool's cached block */
    EXPECT(gpurt_mem_pool_destroy(spare), GPURT_ERROR_INVALID_ARGUMENT); /* it holds the block */
    EXPECT(gpurt_free(p), GPURT_SUCCESS);                              /* found in its pool */
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(spare), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(plain), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(refusing), GPURT_SUCCESS);
    spare_options.config = "use_on_oom:maybe";
    EXPECT(gpurt_mem_pool_create(0, &spare_options, &spare), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_alloc_set_config("use_on_oom:True"), GPURT_ERROR_INVALID_ARGUMENT); /* a pool's own option */
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "pool's own") != NULL);
}

/* torch.cuda.MemPool's no_split: each allocation a segment of its own, never split. */
static void check_no_split(gpurt_stream_t stream) {
    gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT;
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    gpurt_mem_pool_t pool = NULL;
    void *a = NULL, *b = NULL;
    options.config = "no_split:True";
    EXPECT(gpurt_mem_pool_create(0, &options, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(pool, 512, stream, &a), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(pool, 512, stream, &b), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_stats(pool, &stats), GPURT_SUCCESS);
    EXPECT_TRUE(stats.segment.all.current == 2 && stats.inactive_split.all.current == 0);
    EXPECT(gpurt_free(a), GPURT_SUCCESS);
    EXPECT(gpurt_free(b), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
    EXPECT(gpurt_alloc_set_config("no_split:True"), GPURT_ERROR_INVALID_ARGUMENT); /* a pool's own option */
}

static void check_user_upstream(gpurt_stream_t stream) {
    gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT;
    gpurt_mem_pool_t pool = NULL;
    int segments = 0;
    void *p = NULL;
    options.upstream = GPURT_UPSTREAM_USER;
    EXPECT(gpurt_mem_pool_create(0, &options, &pool), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "user_alloc") != NULL);
    options.user_alloc = user_alloc;
    options.user_free = user_free;
    options.config = "expandable_segments:True";
    EXPECT(gpurt_mem_pool_create(0, &options, &pool), GPURT_ERROR_INVALID_ARGUMENT);
    options.config = NULL;
    EXPECT(gpurt_mem_pool_create(0, &options, &pool), GPURT_SUCCESS); /* context NULL: every alloc fails */
    EXPECT(gpurt_mem_pool_malloc(pool, 3u << 20, stream, &p), GPURT_ERROR_OUT_OF_MEMORY);
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "user upstream") != NULL);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
    options.user_context = &segments;
    EXPECT(gpurt_mem_pool_create(0, &options, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(pool, 3u << 20, stream, &p), GPURT_SUCCESS);
    EXPECT_TRUE(segments == 1);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
    EXPECT_TRUE(segments == 0);
    check_use_on_oom(stream, &options);
    check_no_split(stream);
}

/* A pushed pool with a filter serves what the filter accepts; the rest falls through. */
static int large_only(size_t size, int device, void *stream, void *threshold) {
    (void)device;
    (void)stream;
    return size >= *(size_t *)threshold;
}

static void check_filtered_push(gpurt_stream_t stream) {
    gpurt_mem_pool_t pool = NULL, def = NULL;
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    size_t threshold = 1u << 20;
    void *big = NULL, *small = NULL;
    EXPECT(gpurt_mem_pool_create(0, NULL, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_default(0, &def), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_push_filtered(pool, NULL, &threshold), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_push_filtered(def, large_only, &threshold), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_push_filtered(pool, large_only, &threshold), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(2u << 20, stream, &big), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(4096, stream, &small), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_pop(), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_stats(pool, &stats), GPURT_SUCCESS);
    EXPECT_TRUE(stats.allocation.all.current == 1 && stats.allocated_bytes.all.current == (2 << 20));
    EXPECT(gpurt_free(big), GPURT_SUCCESS);
    EXPECT(gpurt_free(small), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
}

/* Managed memory: flags, ranges and advice checked; blocks freed like any other;
 * pools over managed memory and over the driver's stream-ordered pool. */
static void check_managed(gpurt_stream_t stream) {
    gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT;
    gpurt_mem_pool_t pool = NULL;
    uint64_t before = 0, during = 0, after = 0;
    void *p = NULL, *q = NULL;
    int i;
    EXPECT(gpurt_memory_usage(0, &before, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_malloc_managed(4096, 0, &p), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_malloc_managed(4096, GPURT_MEM_ATTACH_GLOBAL | GPURT_MEM_ATTACH_HOST, &p), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_malloc_managed(4096, GPURT_MEM_ATTACH_GLOBAL, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_malloc_managed(4096, GPURT_MEM_ATTACH_GLOBAL, &p), GPURT_SUCCESS);
    EXPECT(gpurt_malloc_managed(4096, GPURT_MEM_ATTACH_HOST, &q), GPURT_SUCCESS);
    EXPECT(gpurt_memory_usage(0, &during, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT_TRUE(p != NULL && q != NULL && during == before + 2 * 4096);
    EXPECT(gpurt_mem_prefetch_async(p, 4096, 0, stream), GPURT_SUCCESS);
    EXPECT(gpurt_mem_prefetch_async(p, 4096, GPURT_DEVICE_HOST, stream), GPURT_SUCCESS);
    EXPECT(gpurt_mem_prefetch_async(NULL, 4096, 0, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_prefetch_async(p, 0, 0, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_prefetch_async(p, (size_t)-1, 0, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_advise(p, (size_t)-1, GPURT_MEM_ADVISE_SET_READ_MOSTLY, 0), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_prefetch_async(p, 4096, 99, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_prefetch_async(p, 4096, 0, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_mem_advise(p, 4096, GPURT_MEM_ADVISE_SET_READ_MOSTLY, 0), GPURT_SUCCESS);
    EXPECT(gpurt_mem_advise(p, 4096, GPURT_MEM_ADVISE_SET_PREFERRED_LOCATION, GPURT_DEVICE_HOST), GPURT_SUCCESS);
    EXPECT(gpurt_mem_advise(p, 4096, 0, 0), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_advise(p, 4096, 7, 0), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    EXPECT(gpurt_free(q), GPURT_SUCCESS);
    EXPECT(gpurt_free(q), GPURT_ERROR_INVALID_ARGUMENT);
    /* Managed memory and the driver's stream-ordered pool as upstreams, under the
     * process's plain and then expandable segments: whole segments either way; the
     * pool's own request for expandable segments is refused. */
    for (i = 0; i < 4; i++) {
        options.upstream = i % 2 == 0 ? GPURT_UPSTREAM_MANAGED : GPURT_UPSTREAM_ASYNC;
        EXPECT(gpurt_alloc_set_config(i < 2 ? "expandable_segments:False" : "expandable_segments:True"), GPURT_SUCCESS);
        options.config = NULL;
        EXPECT(gpurt_mem_pool_create(0, &options, &pool), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_malloc(pool, 1 << 20, stream, &p), GPURT_SUCCESS);
        EXPECT(gpurt_free(p), GPURT_SUCCESS);
        EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
        options.config = "expandable_segments:True";
        EXPECT(gpurt_mem_pool_create(0, &options, &pool), GPURT_ERROR_INVALID_ARGUMENT);
    }
    EXPECT(gpurt_alloc_set_config("expandable_segments:False"), GPURT_SUCCESS);
    EXPECT(gpurt_memory_usage(0, &after, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT_TRUE(after == before);
}

/* Memory pools: bad options, wrong handles, limits, routing by push/pop, refusals
 * that change nothing, per-pool figures against the device's. */
static void check_mem_pools(gpurt_stream_t stream) {
    gpurt_mem_pool_t pool = NULL, def = NULL, def_again = NULL, wrong_kind = (gpurt_mem_pool_t)stream;
    gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT, zeroed;
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    uint64_t used = 0, free_bytes = 0, total = 0, blocks = 0, before = 0, after = 0;
    void *p = NULL, *q = NULL, *r = NULL;
    int device = -1;
    EXPECT(gpurt_mem_pool_create(0, NULL, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_create(99, NULL, &pool), GPURT_ERROR_INVALID_ARGUMENT);
    memset(&zeroed, 0, sizeof zeroed);
    EXPECT(gpurt_mem_pool_create(0, &zeroed, &pool), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "GPURT_MEM_POOL_OPTIONS_INIT") != NULL);
    options.upstream = 42;
    EXPECT(gpurt_mem_pool_create(0, &options, &pool), GPURT_ERROR_INVALID_ARGUMENT);
    options.upstream = GPURT_UPSTREAM_DRIVER;
    options.config = "expandable_segments:Maybe";
    EXPECT(gpurt_mem_pool_create(0, &options, &pool), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(pool == NULL);
    options.config = "max_split_size_mb:64";
    options.limit_bytes = 64u << 20;
    EXPECT(gpurt_mem_pool_create(0, &options, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_get_device(pool, &device), GPURT_SUCCESS);
    EXPECT_TRUE(device == 0);
    EXPECT(gpurt_mem_pool_default(0, &def), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_default(GPURT_CURRENT_DEVICE, &def_again), GPURT_SUCCESS);
    EXPECT_TRUE(def == def_again && def != pool);
    EXPECT(gpurt_mem_pool_destroy(def), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_destroy(NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_mem_pool_destroy(wrong_kind), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_mem_pool_push(wrong_kind), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_mem_pool_pop(), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_usage(0, &before, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(pool, 1 << 20, stream, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_malloc(pool, 1 << 20, NULL, &p), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_mem_pool_malloc(pool, 100u << 20, stream, &p), GPURT_ERROR_OUT_OF_MEMORY);
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "limit") != NULL);
    EXPECT(gpurt_mem_pool_malloc(pool, 1 << 20, stream, &p), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_push(pool), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(4096, stream, &q), GPURT_SUCCESS); /* routed to the pool */
    EXPECT(gpurt_mem_pool_push(def), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(4096, stream, &r), GPURT_SUCCESS); /* back to the default pool */
    EXPECT(gpurt_mem_pool_pop(), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_pop(), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_usage(pool, &used, &free_bytes, &total, &blocks), GPURT_SUCCESS);
    EXPECT_TRUE(used == (1u << 20) + 4096 && total >= used && free_bytes == total - used);
    EXPECT(gpurt_mem_pool_usage(pool, NULL, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_stats(pool, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_stats(pool, &stats), GPURT_SUCCESS);
    EXPECT_TRUE(stats.allocation.all.current == 2 && stats.num_ooms == 1);
    EXPECT(gpurt_memory_stats(0, &stats), GPURT_SUCCESS); /* the device: the sum over its pools */
    EXPECT_TRUE(stats.allocated_bytes.all.current == (int64_t)(before + (1u << 20) + 2 * 4096));
    {   /* A caller compiled before the sleep figures: served what it knows, the rest untouched. */
        gpurt_memory_stats_t old = GPURT_MEMORY_STATS_INIT;
        old.struct_size = offsetof(gpurt_memory_stats_t, asleep_bytes);
        old.asleep_bytes = old.offloaded_bytes = -7;
        EXPECT(gpurt_memory_stats(0, &old), GPURT_SUCCESS);
        EXPECT(gpurt_mem_pool_stats(pool, &old), GPURT_SUCCESS);
        EXPECT_TRUE(old.allocation.all.current == 2 && old.asleep_bytes == -7 && old.offloaded_bytes == -7);
        old.struct_size = offsetof(gpurt_memory_stats_t, unknown);
        EXPECT(gpurt_memory_stats(0, &old), GPURT_ERROR_INVALID_ARGUMENT);
    }
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "2 live allocation") != NULL);
    EXPECT(gpurt_free(p), GPURT_SUCCESS); /* found from the pointer alone */
    EXPECT(gpurt_free(q), GPURT_SUCCESS);
    EXPECT(gpurt_free(r), GPURT_SUCCESS);
    EXPECT(gpurt_free(q), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_push(pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "pushed") != NULL);
    EXPECT(gpurt_mem_pool_pop(), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_empty_cache(pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_usage(pool, &used, &free_bytes, &total, &blocks), GPURT_SUCCESS);
    EXPECT_TRUE(used == 0 && total == 0 && blocks == 0);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_mem_pool_malloc(pool, 64, stream, &p), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_mem_pool_push(pool), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_memory_usage(0, &after, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT_TRUE(after == before);
}

static void check_kernels(gpurt_stream_t stream) {
    static const char ptx[] = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry noop()\n{\n\tret;\n}\n";
    gpurt_module_t module = NULL;
    gpurt_kernel_t kernel = NULL, again = NULL;
    gpurt_launch_config_t config = GPURT_LAUNCH_CONFIG_INIT;
    int value = -1, major = 0, minor = 0;
    gpurt_status_t rtc;
    EXPECT(gpurt_module_load_data(NULL, 4, &module), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_module_load_data(ptx, 0, &module), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_module_load_file("/nonexistent/k.ptx", &module), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_module_load_data(ptx, sizeof ptx - 1, &module), GPURT_SUCCESS);
    EXPECT(gpurt_module_get_kernel(module, "missing", &kernel), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_module_get_kernel((gpurt_module_t)stream, "noop", &kernel), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_module_get_kernel(module, "noop", &kernel), GPURT_SUCCESS);
    EXPECT(gpurt_module_get_kernel(module, "noop", &again), GPURT_SUCCESS);
    EXPECT_TRUE(kernel == again);
    EXPECT(gpurt_kernel_get_attribute(kernel, 99, &value), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_kernel_get_attribute(kernel, GPURT_KERNEL_MAX_THREADS_PER_BLOCK, &value), GPURT_SUCCESS);
    EXPECT_TRUE(value > 0);
    EXPECT(gpurt_kernel_set_max_dynamic_shared_memory(kernel, -1), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_launch_kernel(kernel, 0, 1, 1, 32, 1, 1, 0, stream, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_launch_kernel(kernel, 1, 1, 1, 2048, 1, 1, 0, stream, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_launch_kernel((gpurt_kernel_t)module, 1, 1, 1, 32, 1, 1, 0, stream, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_launch_kernel(kernel, 4, 1, 1, 32, 1, 1, 0, stream, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_launch_kernel_ex(kernel, NULL, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    config.struct_size = 8;
    EXPECT(gpurt_launch_kernel_ex(kernel, &config, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    config.struct_size = sizeof config;
    config.grid[0] = 3; config.grid[1] = config.grid[2] = 1;
    config.block[0] = 64; config.block[1] = config.block[2] = 1;
    config.cluster[0] = 2; config.cluster[1] = config.cluster[2] = 1;
    config.stream = stream;
    EXPECT(gpurt_launch_kernel_ex(kernel, &config, NULL), GPURT_ERROR_INVALID_ARGUMENT); /* 3 % 2 */
    config.cluster[0] = 1;
    EXPECT(gpurt_launch_kernel_ex(kernel, &config, NULL), GPURT_SUCCESS);
    /* Programmatic dependent launch: 0 or 1; a struct from before the field (its
     * struct_size ends where the field begins) launches without it. */
    config.programmatic_dependent_launch = 2;
    EXPECT(gpurt_launch_kernel_ex(kernel, &config, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    config.programmatic_dependent_launch = 1;
    EXPECT(gpurt_launch_kernel_ex(kernel, &config, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_launch_kernel_ex(kernel, &config, NULL), GPURT_SUCCESS);
    config.struct_size = offsetof(gpurt_launch_config_t, programmatic_dependent_launch);
    EXPECT(gpurt_launch_kernel_ex(kernel, &config, NULL), GPURT_SUCCESS);
    config.struct_size = offsetof(gpurt_launch_config_t, cluster);
    EXPECT(gpurt_launch_kernel_ex(kernel, &config, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    config.struct_size = sizeof config;
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_module_unload(module), GPURT_SUCCESS);
    EXPECT(gpurt_launch_kernel(kernel, 1, 1, 1, 32, 1, 1, 0, stream, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_module_unload(module), GPURT_ERROR_INVALID_HANDLE);
    rtc = gpurt_rtc_version(&major, &minor);
    EXPECT_TRUE(rtc == GPURT_SUCCESS || rtc == GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_rtc_compile(NULL, NULL, 0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_rtc_program_destroy(NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_elementwise("out = a", NULL, NULL, 0, GPURT_DTYPE_F32, 4, NULL, stream), GPURT_ERROR_INVALID_ARGUMENT);
    {
        const char *one[] = {"a"};
        const void *in[1];
        void *outs[2];
        in[0] = (const void *)stream;
        outs[0] = outs[1] = (void *)stream;
        EXPECT(gpurt_elementwise_multi("s = a; d = s", one, in, 1, GPURT_DTYPE_F32, 4, NULL, 2, stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_elementwise_multi("s = a; d = s", one, in, 1, GPURT_DTYPE_F32, 4, (void *const *)outs, 1, stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_elementwise_multi("s = a; s = a", one, in, 1, GPURT_DTYPE_F32, 4, (void *const *)outs, 2, stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_elementwise_multi("s = a; d = s", one, in, 1, GPURT_DTYPE_F32, 4, (void *const *)outs, (size_t)1 << 62, stream), GPURT_ERROR_INVALID_ARGUMENT);
    }
    if (rtc == GPURT_SUCCESS) {
        /* A call repeating this thread's last expression skips its recipe: names,
         * dtype, output count and handles still count, and a cache clear still
         * recompiles. (NVRTC, or the stand-in NVRTC beside the stand-in driver.) */
        const char *ab[] = {"a", "b"}, *ba[] = {"b", "a"};
        const void *ins[2];
        void *buf[3], *two[2];
        int j;
        for (j = 0; j < 3; j++) {
            EXPECT(gpurt_malloc(64, stream, &buf[j]), GPURT_SUCCESS);
            EXPECT(gpurt_memset_async(buf[j], 0, 1, 64, stream), GPURT_SUCCESS); /* read below: initialised (initcheck) */
        }
        ins[0] = buf[0], ins[1] = buf[1], two[0] = two[1] = buf[2];
        EXPECT(gpurt_elementwise("out = a - b", ab, ins, 2, GPURT_DTYPE_F32, 16, buf[2], stream), GPURT_SUCCESS);
        EXPECT(gpurt_elementwise("out = a - b", ab, ins, 2, GPURT_DTYPE_F32, 16, buf[2], stream), GPURT_SUCCESS);
        EXPECT(gpurt_elementwise("out = a - b", ba, ins, 2, GPURT_DTYPE_F32, 16, buf[2], stream), GPURT_SUCCESS);
        EXPECT(gpurt_elementwise("out = a - b", ab, ins, 2, GPURT_DTYPE_I32, 16, buf[2], stream), GPURT_SUCCESS);
        EXPECT(gpurt_elementwise("out = a - b", ab, ins, 2, GPURT_DTYPE_F32, 16, buf[2], stream), GPURT_SUCCESS);
        EXPECT(gpurt_elementwise_multi("out = a - b", ab, ins, 2, GPURT_DTYPE_F32, 16, two, 2, stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_elementwise("out = a - b", ab, ins, 2, GPURT_DTYPE_F32, 16, NULL, stream), GPURT_ERROR_INVALID_ARGUMENT);
        EXPECT(gpurt_elementwise("out = a - b", ab, ins, 2, GPURT_DTYPE_F32, 16, buf[2], NULL), GPURT_ERROR_INVALID_HANDLE);
        EXPECT(gpurt_rtc_clear_cache(), GPURT_SUCCESS);
        EXPECT(gpurt_elementwise("out = a - b", ab, ins, 2, GPURT_DTYPE_F32, 16, buf[2], stream), GPURT_SUCCESS);
        EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
        for (j = 0; j < 3; j++) EXPECT(gpurt_free(buf[j]), GPURT_SUCCESS);
    }
}

/* A graph pool is a memory pool handle (torch's graph_pool_handle() is a MemPool):
 * the pool calls read it, a capture fills it, gpurt_mem_pool_destroy drops it as
 * gpurt_graph_pool_destroy does; what only user pools do is refused. */
static void check_graph_pool_handles(gpurt_stream_t stream) {
    gpurt_graph_pool_t pool = NULL;
    gpurt_mem_pool_t user = NULL, def = NULL;
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    gpurt_graph_t graph = NULL;
    uint64_t used = 1, total = 0;
    int device = -1;
    void *p = NULL, *q = NULL;
    EXPECT(gpurt_graph_pool_create(0, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_get_device(pool, &device), GPURT_SUCCESS);
    EXPECT_TRUE(device == 0);
    EXPECT(gpurt_mem_pool_push(pool), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_stream_begin_capture(stream, GPURT_CAPTURE_MODE_THREAD_LOCAL, pool), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(3 << 20, stream, &p), GPURT_SUCCESS);
    EXPECT(gpurt_stream_end_capture(stream, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_stats(pool, &stats), GPURT_SUCCESS);
    EXPECT_TRUE(stats.allocation.all.current == 1 && stats.allocated_bytes.all.current >= (3 << 20));
    EXPECT(gpurt_mem_pool_usage(pool, &used, NULL, &total, NULL), GPURT_SUCCESS);
    EXPECT_TRUE(used >= (3 << 20) && total >= used);
    EXPECT(gpurt_mem_pool_malloc(pool, 4096, stream, &q), GPURT_SUCCESS);
    EXPECT(gpurt_free(q), GPURT_SUCCESS);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_empty_cache(pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_usage(pool, &used, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT_TRUE(used == 0);
    /* A user pool or the default pool is not a capture's pool. */
    EXPECT(gpurt_mem_pool_create(0, NULL, &user), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_default(0, &def), GPURT_SUCCESS);
    EXPECT(gpurt_stream_begin_capture(stream, GPURT_CAPTURE_MODE_THREAD_LOCAL, user), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_stream_begin_capture(stream, GPURT_CAPTURE_MODE_THREAD_LOCAL, def), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_pool_destroy(user), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_mem_pool_destroy(user), GPURT_SUCCESS);
    /* gpurt_mem_pool_destroy drops the handle's reference; the graph keeps the pool. */
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_stats(pool, &stats), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
}

/* Graphs: capture with allocation from a private pool, instantiate, replay, and
 * misuse (unknown modes and flags, ending a capture that never began, stale handles). */
static void check_graphs(gpurt_stream_t stream) {
    gpurt_graph_t graph = NULL;
    gpurt_graph_exec_t exec = NULL;
    gpurt_graph_pool_t pool = NULL;
    void *p = NULL, *outside = NULL, *native = NULL;
    int capturing = -1;
    uint64_t before = 0, during = 0, after = 0;
    EXPECT(gpurt_stream_begin_capture(stream, 7, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_stream_end_capture(stream, &graph), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_stream_begin_capture(stream, GPURT_CAPTURE_MODE_THREAD_LOCAL, (gpurt_graph_pool_t)stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_memory_usage(0, &before, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_stream_begin_capture(stream, GPURT_CAPTURE_MODE_THREAD_LOCAL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_stream_is_capturing(stream, &capturing), GPURT_SUCCESS);
    EXPECT_TRUE(capturing == 1);
    EXPECT(gpurt_malloc(3000, stream, &p), GPURT_SUCCESS);
    EXPECT(gpurt_memory_usage(0, &during, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT_TRUE(during == before + 3072); /* the graph's memory counts like any other */
    EXPECT(gpurt_memset_async(p, 7, 1, 3000, stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_end_capture(stream, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_stream_end_capture(stream, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(3000, stream, &outside), GPURT_SUCCESS);
    EXPECT_TRUE(outside != p);
    EXPECT(gpurt_graph_native(graph, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_native((gpurt_graph_t)stream, &native), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_graph_native(graph, &native), GPURT_SUCCESS);
    EXPECT_TRUE(native != NULL);
    EXPECT(gpurt_graph_instantiate(graph, 0x40, NULL, &exec), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_instantiate(graph, GPURT_GRAPH_INSTANTIATE_UPLOAD, NULL, &exec), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_instantiate((gpurt_graph_t)stream, 0, NULL, &exec), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_graph_instantiate(graph, 0, NULL, &exec), GPURT_SUCCESS);
    EXPECT(gpurt_graph_launch(exec, stream), GPURT_SUCCESS);
    EXPECT(gpurt_graph_launch((gpurt_graph_exec_t)graph, stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_graph_debug_dot_print(graph, NULL, 0), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    EXPECT(gpurt_free(outside), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(graph), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_graph_native(graph, &native), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_graph_launch(exec, stream), GPURT_SUCCESS);
    EXPECT(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
    EXPECT(gpurt_graph_launch(exec, stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_free(p), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_usage(0, &after, NULL, NULL, NULL), GPURT_SUCCESS);
    EXPECT_TRUE(after == before);
    EXPECT(gpurt_graph_pool_create(0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_graph_pool_create(0, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_stream_begin_capture(stream, GPURT_CAPTURE_MODE_RELAXED, pool), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_destroy(pool), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(5000, stream, &p), GPURT_SUCCESS);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    EXPECT(gpurt_stream_end_capture(stream, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_pool_destroy(pool), GPURT_ERROR_INVALID_HANDLE);
    check_graph_pool_handles(stream);
}

/* Pinned pools and copies: bad handles, foreign pointers and bad arguments are
 * reported; nothing leaks into the pool's accounting. */
static void check_pinned_and_copies(void) {
    gpurt_pinned_pool_t pool = NULL, def = NULL;
    gpurt_stream_t stream = NULL;
    gpurt_host_memory_stats_t stats = GPURT_HOST_MEMORY_STATS_INIT;
    void *p = NULL, *q = NULL;
    uint64_t used = 0, total = 0, blocks = 0;
    char host[64];
    EXPECT(gpurt_pinned_malloc(NULL, 16, &p), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_pinned_pool_create(0x80, &pool), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_pinned_pool_create(GPURT_PINNED_DEVICE_MAPPED, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_pinned_pool_create(GPURT_PINNED_DEVICE_MAPPED, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_malloc((gpurt_pinned_pool_t)stream, 16, &p), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_pinned_malloc(pool, 10000, &p), GPURT_SUCCESS);
    EXPECT_TRUE(p != NULL);
    EXPECT(gpurt_pinned_free(host), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_pinned_record_stream(p, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_pinned_device_pointer(p, &q), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_pool_destroy(pool), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(gpurt_last_error_message(), "in use") != NULL);
    EXPECT(gpurt_memset_async(p, 0x1ff, 1, 4, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memset_async(p, 7, 3, 4, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memcpy_async(NULL, host, 8, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memcpy_async(p, host, 8, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_memcpy_peer_async(p, 0, host, 7, 8, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memcpy_peer_async(p, -9, host, 0, 8, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memcpy_2d_async(p, 8, host, 16, 9, 2, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memcpy_async(p, host, sizeof host, stream), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_free(p), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_free(p), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_pool_usage(pool, &used, NULL, &total, &blocks), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_stats(pool, &stats), GPURT_SUCCESS);
    EXPECT_TRUE(stats.allocations.current == 0 && stats.num_host_alloc == 1);
    EXPECT(gpurt_pinned_pool_destroy(pool), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_pool_destroy(pool), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_pinned_pool_default(&def), GPURT_SUCCESS);
    EXPECT(gpurt_pinned_pool_destroy(def), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_host_register(NULL, 8, 0), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_host_register(host, sizeof host, 0x40), GPURT_ERROR_INVALID_ARGUMENT);
    check_staged_copies(stream);
    check_sizes(stream);
    check_empty_requests(stream);
    check_native_streams(stream);
    check_mem_pools(stream);
    check_user_upstream(stream);
    check_managed(stream);
    check_filtered_push(stream);
    check_kernels(stream);
    check_graphs(stream);
    check_random(stream);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
}

int main(void) {
    int count = -1;
    check_general();
    EXPECT(gpurt_device_count(&count), GPURT_SUCCESS);
    check_device_handles(count);
    check_stream_event_handles(count);
    if (count == 0) {
        int version = 0;
        gpurt_status_t why = gpurt_driver_version(&version) == GPURT_ERROR_NO_DRIVER ? GPURT_ERROR_NO_DRIVER
                                                                                    : GPURT_ERROR_NO_DEVICE;
        printf("abi_test: no GPU (%s): checking the no-driver behaviour\n", gpurt_status_string(why));
        check_without_gpu(why);
        {
            gpurt_pinned_pool_t pool = NULL;
            EXPECT(gpurt_pinned_pool_create(0, &pool), why);
            EXPECT(gpurt_pinned_pool_default(&pool), why);
        }
        {
            gpurt_mem_pool_t pool = NULL;
            EXPECT(gpurt_mem_pool_create(0, NULL, &pool), why);
            EXPECT(gpurt_mem_pool_default(0, &pool), why);
            EXPECT(gpurt_mem_pool_pop(), GPURT_ERROR_INVALID_ARGUMENT);
        }
        {
            void *p = NULL;
            EXPECT(gpurt_malloc_managed(64, GPURT_MEM_ATTACH_GLOBAL, &p), why);
            EXPECT(gpurt_mem_advise(&p, 8, GPURT_MEM_ADVISE_SET_READ_MOSTLY, 0), why);
        }
    } else {
        printf("abi_test: %d device(s): checking misuse against the driver\n", count);
        check_with_gpu(count);
        check_pinned_and_copies();
    }
    printf("abi_test: %d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
