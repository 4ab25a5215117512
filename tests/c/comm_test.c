/* Communicators and collectives through the C ABI.
 *
 * Without NCCL (CI: the stub driver, no libnccl.so.2), every comm call answers
 * GPURT_ERROR_NOT_SUPPORTED with a message naming the library, and the rest of
 * gpurt works. With NCCL and one GPU (the GPU suite): a one-rank communicator over
 * device 0; every collective byte-exact on fresh random data for 1 element, an odd
 * count and 256 MiB, in several dtypes; an all_reduce captured in a graph and
 * replayed on new data; misuse; splits of a communicator from gpurt_comm_init_all and
 * of one from gpurt_comm_init_rank (the non-blocking one), the child byte-exact; and a
 * rank whose peer never joins gets GPURT_ERROR_COMM after its timeout, after which the
 * process goes on (a new communicator works). Groups of several GPUs and processes need the 2-GPU machine.
 */
#define _GNU_SOURCE
#include <gpurt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

static int without_nccl(void) {
    gpurt_comm_t comm = NULL;
    gpurt_comm_id_t id;
    int devices[1] = {0}, version = 0;
    void *p = NULL;
    gpurt_stream_t stream = NULL;
    CHECK(strstr(gpurt_last_error_message(), "libnccl.so.2") != NULL, "the message names the library");
    EXPECT(gpurt_comm_unique_id(&id), GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_comm_init_all(devices, 1, &comm), GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_comm_init_rank(&id, 2, 0, 0, &comm), GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_comm_all_reduce(p, p, 4, GPURT_DTYPE_F32, GPURT_REDUCE_SUM, comm, stream), GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_comm_bcast(p, p, 4, GPURT_DTYPE_F32, 0, comm, stream), GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_comm_group_start(), GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_comm_group_end(), GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_comm_split(comm, 0, 0, &comm), GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_comm_destroy(comm), GPURT_ERROR_NOT_SUPPORTED);
    EXPECT(gpurt_comm_version(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    /* The rest of gpurt is unaffected. */
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(64, stream, &p), GPURT_SUCCESS);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    (void)version;
    printf("comm_test: no NCCL here: every comm call said so (%d checks, %d failures)\n", checks, failures);
    return failures != 0;
}

/* One rank: every collective leaves recv equal to send's bytes. */
static void one_rank_collectives(gpurt_comm_t comm, gpurt_stream_t stream) {
    static const size_t counts[] = {1, 4097, (256u << 20) / 4};
    static const int dtypes[] = {GPURT_DTYPE_F32, GPURT_DTYPE_I32, GPURT_DTYPE_F64, GPURT_DTYPE_BF16};
    static const size_t sizes[] = {4, 4, 8, 2};
    size_t c, d;
    for (c = 0; c < 3; c++) {
        for (d = 0; d < 4; d++) {
            size_t count = counts[c], bytes = count * sizes[d];
            unsigned char *host, *back;
            void *send = NULL, *recv = NULL;
            int op;
            if (c == 2 && d > 0) continue; /* 256 MiB once, in f32 */
            host = malloc(bytes);
            back = malloc(bytes);
            fill_pattern(host, bytes, 1000 + c * 10 + d);
            if (dtypes[d] != GPURT_DTYPE_I32) {
                size_t i; /* finite floats: clear each element's top exponent bit */
                for (i = sizes[d] - 1; i < bytes; i += sizes[d]) host[i] &= 0xbf;
            }
            EXPECT(gpurt_malloc(bytes, stream, &send), GPURT_SUCCESS);
            EXPECT(gpurt_malloc(bytes, stream, &recv), GPURT_SUCCESS);
            EXPECT(gpurt_memcpy(send, host, bytes, stream), GPURT_SUCCESS);
            for (op = GPURT_REDUCE_SUM; op <= GPURT_REDUCE_MIN; op++) {
                EXPECT(gpurt_memset_async(recv, 0, 1, bytes, stream), GPURT_SUCCESS);
                EXPECT(gpurt_comm_all_reduce(send, recv, count, dtypes[d], op, comm, stream), GPURT_SUCCESS);
                EXPECT(gpurt_memcpy(back, recv, bytes, stream), GPURT_SUCCESS);
                CHECK(memcmp(back, host, bytes) == 0, "all_reduce op %d, %zu elements of dtype %d", op, count, dtypes[d]);
            }
            EXPECT(gpurt_memset_async(recv, 0, 1, bytes, stream), GPURT_SUCCESS);
            EXPECT(gpurt_comm_bcast(send, recv, count, dtypes[d], 0, comm, stream), GPURT_SUCCESS);
            EXPECT(gpurt_memcpy(back, recv, bytes, stream), GPURT_SUCCESS);
            CHECK(memcmp(back, host, bytes) == 0, "bcast %zu", count);
            EXPECT(gpurt_memset_async(recv, 0, 1, bytes, stream), GPURT_SUCCESS);
            EXPECT(gpurt_comm_reduce(send, recv, count, dtypes[d], GPURT_REDUCE_SUM, 0, comm, stream), GPURT_SUCCESS);
            EXPECT(gpurt_memcpy(back, recv, bytes, stream), GPURT_SUCCESS);
            CHECK(memcmp(back, host, bytes) == 0, "reduce %zu", count);
            EXPECT(gpurt_memset_async(recv, 0, 1, bytes, stream), GPURT_SUCCESS);
            EXPECT(gpurt_comm_all_gather(send, recv, count, dtypes[d], comm, stream), GPURT_SUCCESS);
            EXPECT(gpurt_memcpy(back, recv, bytes, stream), GPURT_SUCCESS);
            CHECK(memcmp(back, host, bytes) == 0, "all_gather %zu", count);
            EXPECT(gpurt_memset_async(recv, 0, 1, bytes, stream), GPURT_SUCCESS);
            EXPECT(gpurt_comm_reduce_scatter(send, recv, count, dtypes[d], GPURT_REDUCE_MAX, comm, stream), GPURT_SUCCESS);
            EXPECT(gpurt_memcpy(back, recv, bytes, stream), GPURT_SUCCESS);
            CHECK(memcmp(back, host, bytes) == 0, "reduce_scatter %zu", count);
            /* A send to itself and the matching receive, grouped. */
            EXPECT(gpurt_memset_async(recv, 0, 1, bytes, stream), GPURT_SUCCESS);
            EXPECT(gpurt_comm_group_start(), GPURT_SUCCESS);
            EXPECT(gpurt_comm_send(send, count, dtypes[d], 0, comm, stream), GPURT_SUCCESS);
            EXPECT(gpurt_comm_recv(recv, count, dtypes[d], 0, comm, stream), GPURT_SUCCESS);
            EXPECT(gpurt_comm_group_end(), GPURT_SUCCESS);
            EXPECT(gpurt_memcpy(back, recv, bytes, stream), GPURT_SUCCESS);
            CHECK(memcmp(back, host, bytes) == 0, "send/recv %zu", count);
            EXPECT(gpurt_free(send), GPURT_SUCCESS);
            EXPECT(gpurt_free(recv), GPURT_SUCCESS);
            free(host);
            free(back);
        }
    }
}

static void captured_all_reduce(gpurt_comm_t comm, gpurt_stream_t stream) {
    enum { N = 100003 };
    static float first[N], second[N], back[N];
    void *send = NULL, *recv = NULL;
    gpurt_graph_t graph = NULL;
    gpurt_graph_exec_t exec = NULL;
    size_t i;
    for (i = 0; i < N; i++) first[i] = (float)(i % 977) * 0.5f, second[i] = (float)(i % 613) * -0.25f;
    EXPECT(gpurt_malloc(sizeof first, stream, &send), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(sizeof first, stream, &recv), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy(send, first, sizeof first, stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_begin_capture(stream, GPURT_CAPTURE_MODE_THREAD_LOCAL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_comm_all_reduce(send, recv, N, GPURT_DTYPE_F32, GPURT_REDUCE_SUM, comm, stream), GPURT_SUCCESS);
    EXPECT(gpurt_stream_end_capture(stream, &graph), GPURT_SUCCESS);
    EXPECT(gpurt_graph_instantiate(graph, 0, NULL, &exec), GPURT_SUCCESS);
    EXPECT(gpurt_graph_launch(exec, stream), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy(back, recv, sizeof back, stream), GPURT_SUCCESS);
    CHECK(memcmp(back, first, sizeof back) == 0, "first replay");
    EXPECT(gpurt_memcpy(send, second, sizeof second, stream), GPURT_SUCCESS);
    EXPECT(gpurt_graph_launch(exec, stream), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy(back, recv, sizeof back, stream), GPURT_SUCCESS);
    CHECK(memcmp(back, second, sizeof back) == 0, "second replay, on new data");
    EXPECT(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
    EXPECT(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    EXPECT(gpurt_free(send), GPURT_SUCCESS);
    EXPECT(gpurt_free(recv), GPURT_SUCCESS);
}

static void misuse(gpurt_comm_t comm, gpurt_stream_t stream) {
    int devices[2] = {0, 0}, rank = -1, nranks = -1, device = -1;
    gpurt_comm_t comms[2];
    void *p = NULL;
    EXPECT(gpurt_comm_info(comm, &rank, &nranks, &device), GPURT_SUCCESS);
    CHECK(rank == 0 && nranks == 1 && device == 0, "info %d %d %d", rank, nranks, device);
    EXPECT(gpurt_comm_init_all(devices, 2, comms), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_init_all(devices, 0, comms), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_malloc(64, stream, &p), GPURT_SUCCESS);
    EXPECT(gpurt_comm_all_reduce(p, p, 4, 99, GPURT_REDUCE_SUM, comm, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_all_reduce(p, p, 4, GPURT_DTYPE_F32, 9, comm, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_all_reduce(NULL, p, 4, GPURT_DTYPE_F32, GPURT_REDUCE_SUM, comm, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_bcast(p, p, 4, GPURT_DTYPE_F32, 1, comm, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_send(p, 4, GPURT_DTYPE_F32, -1, comm, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_all_reduce(p, p, 4, GPURT_DTYPE_F32, GPURT_REDUCE_SUM, (gpurt_comm_t)(uintptr_t)0x777, stream), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_comm_init_rank(NULL, 2, 0, 0, comms), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_get_async_error(comm), GPURT_SUCCESS);
    EXPECT(gpurt_free(p), GPURT_SUCCESS);
}

/* All-reduce of fresh random bytes on a one-rank communicator: recv equals send. */
static void all_reduce_is_exact(gpurt_comm_t comm, gpurt_stream_t stream, const char *what) {
    enum { COUNT = 1001 };
    int host[COUNT], back[COUNT], i;
    void *send = NULL, *recv = NULL;
    for (i = 0; i < COUNT; i++) host[i] = rand();
    EXPECT(gpurt_malloc(sizeof host, stream, &send), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(sizeof host, stream, &recv), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy(send, host, sizeof host, stream), GPURT_SUCCESS);
    EXPECT(gpurt_comm_all_reduce(send, recv, COUNT, GPURT_DTYPE_I32, GPURT_REDUCE_SUM, comm, stream), GPURT_SUCCESS);
    EXPECT(gpurt_memcpy(back, recv, sizeof back, stream), GPURT_SUCCESS);
    CHECK(memcmp(back, host, sizeof back) == 0, "%s: all_reduce byte-exact", what);
    EXPECT(gpurt_free(send), GPURT_SUCCESS);
    EXPECT(gpurt_free(recv), GPURT_SUCCESS);
}

/* Splits: a child of each kind of parent works and says its place; no color gives
 * none; misuse is refused and changes nothing. */
static void splits(gpurt_comm_t parent, gpurt_stream_t stream) {
    gpurt_comm_t child = NULL, none = (gpurt_comm_t)(uintptr_t)1, children[2] = {NULL, NULL}, twice[2] = {parent, parent};
    gpurt_comm_t rank_comm = NULL, rank_child = NULL;
    gpurt_comm_id_t id;
    int colors[2] = {0, 0}, keys[2] = {0, 0}, rank = -1, nranks = -1, device = -1;
    EXPECT(gpurt_comm_split(parent, 5, 7, &child), GPURT_SUCCESS);
    CHECK(child != NULL && child != parent, "a new communicator");
    EXPECT(gpurt_comm_info(child, &rank, &nranks, &device), GPURT_SUCCESS);
    CHECK(rank == 0 && nranks == 1 && device == 0, "child info %d %d %d", rank, nranks, device);
    all_reduce_is_exact(child, stream, "split of an init_all communicator");
    EXPECT(gpurt_comm_split(parent, GPURT_COMM_SPLIT_NOCOLOR, 0, &none), GPURT_SUCCESS);
    CHECK(none == NULL, "no color: no communicator");
    EXPECT(gpurt_comm_split(parent, -2, 0, &none), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_split(parent, 0, 0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_split((gpurt_comm_t)(uintptr_t)0x777, 0, 0, &none), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_comm_split_all(twice, 2, colors, keys, children), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_split_all(twice, 0, colors, keys, children), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_comm_group_start(), GPURT_SUCCESS);
    EXPECT(gpurt_comm_split(parent, 0, 0, &none), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpurt_last_error_message(), "group") != NULL, "says why: %s", gpurt_last_error_message());
    EXPECT(gpurt_comm_group_end(), GPURT_SUCCESS);
    EXPECT(gpurt_comm_group_end(), GPURT_ERROR_INVALID_ARGUMENT);
    /* A grandchild, and the parent still works beside its child. */
    EXPECT(gpurt_comm_split_all(&child, 1, colors, keys, children), GPURT_SUCCESS);
    all_reduce_is_exact(children[0], stream, "split of a split");
    all_reduce_is_exact(parent, stream, "the parent after its splits");
    EXPECT(gpurt_comm_destroy(children[0]), GPURT_SUCCESS);
    EXPECT(gpurt_comm_destroy(child), GPURT_SUCCESS);
    /* A parent from init_rank is non-blocking: its split waits for the child. */
    EXPECT(gpurt_comm_unique_id(&id), GPURT_SUCCESS);
    EXPECT(gpurt_comm_init_rank(&id, 1, 0, 0, &rank_comm), GPURT_SUCCESS);
    all_reduce_is_exact(rank_comm, stream, "a communicator from init_rank");
    EXPECT(gpurt_comm_split(rank_comm, 1, 0, &rank_child), GPURT_SUCCESS);
    all_reduce_is_exact(rank_child, stream, "split of an init_rank communicator");
    EXPECT(gpurt_comm_destroy(rank_child), GPURT_SUCCESS);
    EXPECT(gpurt_comm_destroy(rank_comm), GPURT_SUCCESS);
    printf("comm_test: splits of init_all and init_rank communicators worked\n");
}

/* A rank whose peer never joins: an error after the timeout, and the process goes on. */
static void missing_peer(void) {
    gpurt_comm_id_t id;
    gpurt_comm_t comm = NULL;
    struct timespec t0, t1;
    double seconds;
    int devices[1] = {0};
    EXPECT(gpurt_comm_unique_id(&id), GPURT_SUCCESS);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    EXPECT(gpurt_comm_init_rank_timeout(&id, 2, 0, 0, 3000, &comm), GPURT_ERROR_COMM);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CHECK(strstr(gpurt_last_error_message(), "did not join") != NULL, "says why");
    CHECK(seconds >= 2.9 && seconds < 30, "gave up after %.1f s", seconds);
    CHECK(comm == NULL, "no communicator");
    EXPECT(gpurt_comm_init_all(devices, 1, &comm), GPURT_SUCCESS);
    EXPECT(gpurt_comm_destroy(comm), GPURT_SUCCESS);
    printf("comm_test: a rank whose peer never joined gave up after %.1f s; a new communicator then worked\n", seconds);
}

int main(void) {
    const char *require = getenv("GPURT_REQUIRE_GPU");
    int count = 0, version = 0, devices[1] = {0};
    gpurt_comm_t comm = NULL;
    gpurt_stream_t stream = NULL;
    gpurt_status_t s;
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("comm_test: skipped: no CUDA device (%s)\n", gpurt_last_error_message());
        return require && strcmp(require, "1") == 0 ? 1 : 0;
    }
    s = gpurt_comm_version(&version);
    if (s == GPURT_ERROR_NOT_SUPPORTED) return without_nccl();
    EXPECT(s, GPURT_SUCCESS);
    printf("comm_test: NCCL %d, %d device(s); this test runs one rank on device 0\n", version, count);
    EXPECT(gpurt_set_device(0), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    EXPECT(gpurt_comm_init_all(devices, 1, &comm), GPURT_SUCCESS);
    one_rank_collectives(comm, stream);
    captured_all_reduce(comm, stream);
    misuse(comm, stream);
    splits(comm, stream);
    EXPECT(gpurt_comm_destroy(comm), GPURT_SUCCESS);
    EXPECT(gpurt_comm_destroy(comm), GPURT_ERROR_INVALID_HANDLE);
    missing_peer();
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    printf("comm_test: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
