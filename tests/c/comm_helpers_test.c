/* torch.cuda.comm's helpers through the C ABI (gpurt_comm_broadcast, _coalesced,
 * reduce_add, _coalesced, scatter, gather). They need no NCCL and take a device
 * more than once, so one GPU runs them over {0, last, 0}.
 *
 * Everywhere: misuse gets a clear status before anything is read or allocated; a
 * call that fails half way (the stub driver fails its N-th copy) frees what it
 * allocated; freeing every output gives back every byte. On a GPU (the GPU suite):
 * every helper byte-exact on fresh random data for 1 element, odd counts and
 * 256 MiB in several dtypes; sums exact against the host's; the coalesced helpers
 * over 100 buffers with buckets smaller and larger than the buffers; the inputs read
 * after the work queued on their streams and never overtaken by a later write.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <gpurt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define N_DEV 3
static int devices[N_DEV];
static gpurt_stream_t current[N_DEV];

static uint64_t allocated(void) {
    uint64_t bytes = 0;
    gpurt_memory_usage(0, &bytes, NULL, NULL, NULL);
    return bytes;
}

static void *upload(const void *host, size_t bytes, int device) {
    void *p = NULL;
    gpurt_stream_t s;
    if (bytes == 0) return NULL;
    EXPECT(gpurt_current_stream(device, &s), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(bytes, s, &p), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy(p, host, bytes, s), GPURT_SUCCESS);
    return p;
}

static int same_as(const void *dev, int device, const void *host, size_t bytes) {
    unsigned char *back = malloc(bytes ? bytes : 1);
    gpurt_stream_t s;
    int same;
    gpurt_current_stream(device, &s);
    same = gpurt_memcpy(back, dev, bytes, s) == GPURT_SUCCESS && memcmp(back, host, bytes) == 0;
    free(back);
    return same;
}

static void free_all(void **ptrs, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) EXPECT(gpurt_free(ptrs[i]), GPURT_SUCCESS);
}

static const size_t sizes[] = {4, 2, 2, 4, 8, 8}; /* by gpurt_dtype_t */

/* Bit patterns of small integers in half and bfloat16: sums of them are exact. */
static uint16_t half_of(int v) {
    unsigned sign = v < 0 ? 0x8000u : 0, m = (unsigned)abs(v), e = 0;
    if (m == 0) return (uint16_t)sign;
    while ((m >> e) > 1) e++;
    return (uint16_t)(sign | ((e + 15) << 10) | (((m << 10) >> e) & 0x3ffu));
}
static uint16_t bf16_of(int v) {
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    return (uint16_t)(bits >> 16);
}

/* n values of dtype at p: value k of input `which`, and their sum over inputs. */
static void fill_values(unsigned char *p, int dtype, size_t n, uint64_t seed) {
    size_t i;
    for (i = 0; i < n; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        int small = (int)(seed % 33) - 16;
        switch (dtype) {
        case GPURT_DTYPE_F32: { float v = (float)((double)(seed >> 11) / 9007199254740992.0 * 2 - 1); memcpy(p + 4 * i, &v, 4); break; }
        case GPURT_DTYPE_F64: { double v = (double)(seed >> 11) / 9007199254740992.0 * 2 - 1; memcpy(p + 8 * i, &v, 8); break; }
        case GPURT_DTYPE_I32: { int32_t v = (int32_t)(seed >> 40) - (1 << 23); memcpy(p + 4 * i, &v, 4); break; }
        case GPURT_DTYPE_I64: { int64_t v = (int64_t)(seed >> 4) - ((int64_t)1 << 59); memcpy(p + 8 * i, &v, 8); break; }
        case GPURT_DTYPE_F16: { uint16_t v = half_of(small); memcpy(p + 2 * i, &v, 2); break; }
        default: { uint16_t v = bf16_of(small); memcpy(p + 2 * i, &v, 2); break; }
        }
    }
}

/* The sum of `k` inputs, left to right, in the kernel's arithmetic (float for the
 * half types: sums of small integers, exact). */
static void host_sum(unsigned char *out, unsigned char **in, int k, int dtype, size_t n) {
    size_t i;
    int j;
    for (i = 0; i < n; i++) {
        if (dtype == GPURT_DTYPE_F32) {
            float s = 0, v;
            for (j = 0; j < k; j++) memcpy(&v, in[j] + 4 * i, 4), s = j ? s + v : v;
            memcpy(out + 4 * i, &s, 4);
        } else if (dtype == GPURT_DTYPE_F64) {
            double s = 0, v;
            for (j = 0; j < k; j++) memcpy(&v, in[j] + 8 * i, 8), s = j ? s + v : v;
            memcpy(out + 8 * i, &s, 8);
        } else if (dtype == GPURT_DTYPE_I32) {
            int32_t s = 0, v;
            for (j = 0; j < k; j++) memcpy(&v, in[j] + 4 * i, 4), s += v;
            memcpy(out + 4 * i, &s, 4);
        } else if (dtype == GPURT_DTYPE_I64) {
            int64_t s = 0, v;
            for (j = 0; j < k; j++) memcpy(&v, in[j] + 8 * i, 8), s += v;
            memcpy(out + 8 * i, &s, 8);
        } else {
            int s = 0, m;
            uint16_t v;
            for (j = 0; j < k; j++) {
                memcpy(&v, in[j] + 2 * i, 2);
                for (m = -16 * N_DEV; m <= 16 * N_DEV; m++)
                    if ((dtype == GPURT_DTYPE_F16 ? half_of(m) : bf16_of(m)) == v) break;
                s += m;
            }
            v = dtype == GPURT_DTYPE_F16 ? half_of(s) : bf16_of(s);
            memcpy(out + 2 * i, &v, 2);
        }
    }
}

static void misuse(void) {
    int bad_devices[2] = {0, 9999};
    void *out[4] = {NULL, NULL, NULL, NULL}, *in[2] = {NULL, NULL};
    size_t counts[2] = {4, 4}, wrong_chunks[2] = {1, 1};
    char dummy[16];
    uint64_t before = allocated();
    EXPECT(gpurt_comm_broadcast(dummy, 0, 4, GPURT_DTYPE_F32, devices, 0, out), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_broadcast(dummy, 0, 4, GPURT_DTYPE_F32, NULL, 2, out), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_broadcast(dummy, 0, 4, GPURT_DTYPE_F32, devices, 2, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_broadcast(dummy, 0, 4, 99, devices, 2, out), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_broadcast(dummy, 0, (size_t)-1, GPURT_DTYPE_F64, devices, 2, out), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(gpurt_comm_broadcast(dummy, 0, 4, GPURT_DTYPE_F32, bad_devices, 2, out) != GPURT_SUCCESS, "a device that is not there");
    EXPECT(gpurt_comm_broadcast(dummy, 0, 4, GPURT_DTYPE_F32, devices, 1 << 30, out), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_scatter(dummy, 0, 4, GPURT_DTYPE_F32, devices, 2, wrong_chunks, out), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpurt_last_error_message(), "add up") != NULL, "the message says the chunks do not add up");
    EXPECT(gpurt_comm_gather((const void *const *)in, devices, NULL, 2, GPURT_DTYPE_F32, 0, out), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_reduce_add(NULL, devices, 2, 4, GPURT_DTYPE_F32, 0, out), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_broadcast_coalesced((const void *const *)in, counts, (size_t)1 << 40, GPURT_DTYPE_F32, 0, devices, 2, 0, out),
           GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_reduce_add_coalesced((const void *const *)in, devices, 2, counts, (size_t)-1, GPURT_DTYPE_F32, 0, 0, out),
           GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(allocated() == before, "a refused call allocates nothing");
}

/* The stub driver moves no bytes: outputs, their accounting, and a copy that fails
 * half way. */
static void on_stub(void) {
    void (*fail_nth)(const char *, long);
    void *out[N_DEV * 2], *in[N_DEV];
    size_t chunks[N_DEV] = {0, 3, 7};
    char src[64];
    uint64_t before = allocated();
    int i;
    *(void **)(&fail_nth) = dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "stub_fail_nth");
    EXPECT(gpurt_comm_broadcast(src, 0, 1000, GPURT_DTYPE_F32, devices, N_DEV, out), GPURT_SUCCESS);
    CHECK(out[0] && out[1] && out[2] && out[0] != out[1] && out[1] != out[2], "one new buffer per device");
    CHECK(allocated() >= before + 3 * 4000, "the outputs come from gpurt's pools");
    free_all(out, N_DEV);
    EXPECT(gpurt_comm_scatter(src, 0, 10, GPURT_DTYPE_F32, devices, N_DEV, chunks, out), GPURT_SUCCESS);
    CHECK(out[0] == NULL && out[1] && out[2], "an empty chunk is NULL");
    free_all(out + 1, 2);
    for (i = 0; i < N_DEV; i++) in[i] = src;
    EXPECT(gpurt_comm_gather((const void *const *)in, devices, chunks, N_DEV, GPURT_DTYPE_F32, 0, out), GPURT_SUCCESS);
    free_all(out, 1);
    CHECK(allocated() == before, "every output freed gives back every byte");
    if (fail_nth != NULL) {
        fail_nth("cuMemcpyAsync", 2);
        CHECK(gpurt_comm_broadcast(src, 0, 1000, GPURT_DTYPE_F32, devices, N_DEV, out) != GPURT_SUCCESS, "the second copy fails");
        fail_nth(NULL, 0);
        CHECK(allocated() == before, "a call that fails half way frees what it allocated");
    }
    /* The sums and the coalesced helpers run kernels (NVRTC): where they cannot, a
     * clear refusal that leaves nothing allocated. */
    {
        gpurt_status_t s = gpurt_comm_reduce_add((const void *const *)in, devices, N_DEV, 8, GPURT_DTYPE_F32, 0, out);
        CHECK(s != GPURT_SUCCESS || gpurt_free(out[0]) == GPURT_SUCCESS, "reduce_add");
        CHECK(s == GPURT_SUCCESS || strlen(gpurt_last_error_message()) > 0, "a refusal has a message");
    }
    CHECK(allocated() == before, "nothing left after the sums");
}

/* Every helper's bytes on a GPU. */
static void on_gpu(void) {
    static const size_t counts[] = {1, 4097, (256u << 20) / 4};
    static const int dtypes[] = {GPURT_DTYPE_F32, GPURT_DTYPE_I64, GPURT_DTYPE_BF16};
    static const int sum_dtypes[] = {GPURT_DTYPE_F32, GPURT_DTYPE_F64, GPURT_DTYPE_I32, GPURT_DTYPE_I64, GPURT_DTYPE_F16, GPURT_DTYPE_BF16};
    uint64_t before = allocated(), seed = 0x9e3779b97f4a7c15ull;
    size_t c, d, i;
    for (c = 0; c < 3; c++) {
        for (d = 0; d < 3; d++) {
            size_t count = counts[c], bytes = count * sizes[dtypes[d]];
            unsigned char *host = malloc(bytes);
            void *src, *out[N_DEV];
            if (c == 2 && d > 0) continue; /* 256 MiB once */
            fill_pattern(host, bytes, seed++);
            src = upload(host, bytes, devices[0]);
            EXPECT(gpurt_comm_broadcast(src, devices[0], count, dtypes[d], devices, N_DEV, out), GPURT_SUCCESS);
            for (i = 0; i < N_DEV; i++) CHECK(out[i] != src && same_as(out[i], devices[i], host, bytes), "broadcast %zu x dtype %d to #%zu", count, dtypes[d], i);
            free_all(out, N_DEV);
            {
                size_t given[N_DEV] = {1, count > 1 ? count / 2 : 0, 0}, *chunk_sets[2] = {NULL, given}, k, chunk[N_DEV];
                given[2] = count - given[0] - given[1];
                for (k = 0; k < 2; k++) {
                    size_t off = 0, even = (count + N_DEV - 1) / N_DEV;
                    EXPECT(gpurt_comm_scatter(src, devices[0], count, dtypes[d], devices, N_DEV, chunk_sets[k], out), GPURT_SUCCESS);
                    for (i = 0; i < N_DEV; i++) {
                        chunk[i] = k ? given[i] : (count - off / sizes[dtypes[d]] < even ? count - off / sizes[dtypes[d]] : even);
                        CHECK(chunk[i] == 0 ? out[i] == NULL : same_as(out[i], devices[i], host + off, chunk[i] * sizes[dtypes[d]]),
                              "scatter chunk %zu of %zu", i, count);
                        off += chunk[i] * sizes[dtypes[d]];
                    }
                    {
                        void *whole = NULL;
                        EXPECT(gpurt_comm_gather((const void *const *)out, devices, chunk, N_DEV, dtypes[d], devices[0], &whole), GPURT_SUCCESS);
                        CHECK(same_as(whole, devices[0], host, bytes), "gather of %zu", count);
                        EXPECT(gpurt_free(whole), GPURT_SUCCESS);
                    }
                    for (i = 0; i < N_DEV; i++) EXPECT(gpurt_free(out[i]), GPURT_SUCCESS);
                }
            }
            EXPECT(gpurt_free(src), GPURT_SUCCESS);
            free(host);
        }
        for (d = 0; d < 6; d++) {
            size_t count = counts[c], bytes = count * sizes[sum_dtypes[d]];
            unsigned char *host[N_DEV], *want = malloc(bytes);
            void *in[N_DEV], *sum = NULL;
            if (c == 2 && d > 1) continue;
            for (i = 0; i < N_DEV; i++) {
                host[i] = malloc(bytes);
                fill_values(host[i], sum_dtypes[d], count, seed++);
                in[i] = upload(host[i], bytes, devices[i]);
            }
            host_sum(want, host, N_DEV, sum_dtypes[d], count);
            EXPECT(gpurt_comm_reduce_add((const void *const *)in, devices, N_DEV, count, sum_dtypes[d], devices[1], &sum), GPURT_SUCCESS);
            CHECK(same_as(sum, devices[1], want, bytes), "reduce_add of %zu, dtype %d", count, sum_dtypes[d]);
            EXPECT(gpurt_free(sum), GPURT_SUCCESS);
            for (i = 0; i < N_DEV; i++) {
                EXPECT(gpurt_free(in[i]), GPURT_SUCCESS);
                free(host[i]);
            }
            free(want);
        }
    }
    CHECK(allocated() == before, "every output freed gives back every byte");
}

/* 100 buffers of odd sizes, buckets of 16 KiB (several per bucket, and buffers
 * larger than one) and the default 10 MiB. */
static void coalesced(void) {
    enum { M = 100 };
    size_t counts[M], b, i, j, buckets[2] = {16 << 10, 0};
    unsigned char *host[N_DEV][M];
    void *src[N_DEV][M], *out[N_DEV * M], *sums[M];
    uint64_t before = allocated(), seed = 0x1234567;
    for (j = 0; j < M; j++) counts[j] = 1 + (j * 7919) % (j % 10 == 0 ? 20000 : 700);
    for (i = 0; i < N_DEV; i++)
        for (j = 0; j < M; j++) {
            host[i][j] = malloc(counts[j] * 4);
            fill_values(host[i][j], GPURT_DTYPE_F32, counts[j], seed++);
            src[i][j] = upload(host[i][j], counts[j] * 4, devices[i]);
        }
    for (b = 0; b < 2; b++) {
        EXPECT(gpurt_comm_broadcast_coalesced((const void *const *)src[0], counts, M, GPURT_DTYPE_F32, devices[0], devices, N_DEV, buckets[b], out),
               GPURT_SUCCESS);
        for (i = 0; i < N_DEV; i++)
            for (j = 0; j < M; j++) CHECK(same_as(out[i * M + j], devices[i], host[0][j], counts[j] * 4), "broadcast_coalesced buffer %zu on #%zu", j, i);
        free_all(out, N_DEV * M);
        EXPECT(gpurt_comm_reduce_add_coalesced((const void *const *)src, devices, N_DEV, counts, M, GPURT_DTYPE_F32, devices[2], buckets[b], sums),
               GPURT_SUCCESS);
        for (j = 0; j < M; j++) {
            unsigned char *want = malloc(counts[j] * 4), *in[N_DEV];
            for (i = 0; i < N_DEV; i++) in[i] = host[i][j];
            host_sum(want, in, N_DEV, GPURT_DTYPE_F32, counts[j]);
            CHECK(same_as(sums[j], devices[2], want, counts[j] * 4), "reduce_add_coalesced buffer %zu", j);
            free(want);
        }
        free_all(sums, M);
    }
    for (i = 0; i < N_DEV; i++)
        for (j = 0; j < M; j++) {
            EXPECT(gpurt_free(src[i][j]), GPURT_SUCCESS);
            free(host[i][j]);
        }
    CHECK(allocated() == before, "every output freed gives back every byte");
}

/* Stream order: the source written by queued work just before the call is what is
 * read; a write queued just after it does not reach the copies. */
static void stream_order(void) {
    size_t bytes = 64u << 20, i;
    unsigned char *first = malloc(bytes), *second = malloc(bytes);
    void *src = NULL, *out[N_DEV];
    fill_pattern(first, bytes, 11);
    fill_pattern(second, bytes, 12);
    EXPECT(gpurt_malloc(bytes, current[0], &src), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(src, first, bytes, current[0]), GPURT_SUCCESS);
    EXPECT(gpurt_comm_broadcast(src, devices[0], bytes / 4, GPURT_DTYPE_F32, devices, N_DEV, out), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy_async(src, second, bytes, current[0]), GPURT_SUCCESS);
    for (i = 0; i < N_DEV; i++) CHECK(same_as(out[i], devices[i], first, bytes), "stream order, output %zu", i);
    free_all(out, N_DEV);
    EXPECT(gpurt_free(src), GPURT_SUCCESS);
    free(first);
    free(second);
}

int main(void) {
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    int count = 0, i;
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count < 1) {
        printf("comm_helpers_test: skipped (no device: %s)\n", gpurt_last_error_message());
        return getenv("GPURT_REQUIRE_GPU") ? 1 : 0;
    }
    devices[0] = 0, devices[1] = count - 1, devices[2] = 0;
    for (i = 0; i < N_DEV; i++) EXPECT(gpurt_current_stream(devices[i], &current[i]), GPURT_SUCCESS);
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    misuse();
    if (strcmp(props.name, "Fake GPU") == 0) {
        on_stub();
        printf("comm_helpers_test: stub driver (no bytes move; the data checks run on a GPU): %d checks, %d failures\n", checks, failures);
    } else {
        on_gpu();
        coalesced();
        stream_order();
        printf("comm_helpers_test: %d device(s), devices {%d, %d, %d}: %d checks, %d failures\n", count, devices[0], devices[1], devices[2], checks, failures);
    }
    return failures != 0;
}
