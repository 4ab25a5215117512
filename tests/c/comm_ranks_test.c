/* Collectives over several GPUs, byte-exact (the GPU suite on a machine of 2 GPUs or
 * more; elsewhere it says it is skipped, and why).
 *
 * 1. One process, one rank per GPU (gpurt_comm_init_all), the ranks driven from one
 *    thread in groups.
 * 2. One process per GPU: this process makes the id (gpurt_comm_unique_id) and hands
 *    it to the others through a pipe on their standard input; it is rank 0.
 * In both: all_reduce, bcast, reduce, all_gather, reduce_scatter and send/recv on
 * fresh random data of 1 element, an odd count and 256 MiB, in f32, i32 and f64
 * (sums of values that add exactly in any order) and bf16 (max); every rank knows
 * every rank's input (each is made from a seed), so each checks its own output
 * against the host's result. Then each collective captured in a graph on every rank
 * and replayed on new data (all_reduce also at 256 MiB); and a split into one
 * communicator per rank.
 */
#define _GNU_SOURCE
#include <gpurt.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define MAX_RANKS 16
#define BIG ((size_t)(256u << 20) / 4)

extern char **environ;

typedef struct {
    int nranks, nlocal; /* ranks in the group; those this process drives */
    int rank[MAX_RANKS];
    gpurt_comm_t comm[MAX_RANKS];
    gpurt_stream_t stream[MAX_RANKS];
} world_t;

typedef struct {
    int dtype, op;
    size_t size;
    const char *name;
} kind_t;

static const kind_t KINDS[] = {
    {GPURT_DTYPE_F32, GPURT_REDUCE_SUM, 4, "f32 sum"},
    {GPURT_DTYPE_I32, GPURT_REDUCE_SUM, 4, "i32 sum"},
    {GPURT_DTYPE_F64, GPURT_REDUCE_SUM, 8, "f64 sum"},
    {GPURT_DTYPE_BF16, GPURT_REDUCE_MAX, 2, "bf16 max"},
};

enum { ALL_REDUCE, BCAST, REDUCE, ALL_GATHER, REDUCE_SCATTER, SEND_RECV, N_COLLECTIVES };
static const char *NAMES[] = {"all_reduce", "bcast", "reduce", "all_gather", "reduce_scatter", "send/recv"};

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Rank `rank`'s input: values whose sums are exact in any order (small integers
 * for f32/f64, any bits for i32, whose sum wraps), bf16 from floats in ±1000. */
static void fill(unsigned char *out, size_t count, kind_t k, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    size_t i;
    for (i = 0; i < count; i++) {
        uint64_t r = next(&s);
        if (k.dtype == GPURT_DTYPE_F32) {
            float v = (float)((int)(r % 2001) - 1000);
            memcpy(out + i * 4, &v, 4);
        } else if (k.dtype == GPURT_DTYPE_I32) {
            uint32_t v = (uint32_t)r;
            memcpy(out + i * 4, &v, 4);
        } else if (k.dtype == GPURT_DTYPE_F64) {
            double v = (double)((int64_t)(r % 2000001) - 1000000);
            memcpy(out + i * 8, &v, 8);
        } else {
            float v = (float)((int)(r % 20001) - 10000) / 10.0f;
            uint32_t bits;
            uint16_t half;
            memcpy(&bits, &v, 4);
            half = (uint16_t)(bits >> 16);
            memcpy(out + i * 2, &half, 2);
        }
    }
}

static float bf16_value(const unsigned char *p) {
    uint16_t half;
    uint32_t bits;
    float v;
    memcpy(&half, p, 2);
    bits = (uint32_t)half << 16;
    memcpy(&v, &bits, 4);
    return v;
}

/* acc[i] = acc[i] op in[i], as NCCL computes it for these values. */
static void combine(unsigned char *acc, const unsigned char *in, size_t count, kind_t k) {
    size_t i;
    for (i = 0; i < count; i++) {
        if (k.dtype == GPURT_DTYPE_F32) {
            float a, b;
            memcpy(&a, acc + i * 4, 4), memcpy(&b, in + i * 4, 4), a += b, memcpy(acc + i * 4, &a, 4);
        } else if (k.dtype == GPURT_DTYPE_I32) {
            uint32_t a, b;
            memcpy(&a, acc + i * 4, 4), memcpy(&b, in + i * 4, 4), a += b, memcpy(acc + i * 4, &a, 4);
        } else if (k.dtype == GPURT_DTYPE_F64) {
            double a, b;
            memcpy(&a, acc + i * 8, 8), memcpy(&b, in + i * 8, 8), a += b, memcpy(acc + i * 8, &a, 8);
        } else if (bf16_value(in + i * 2) > bf16_value(acc + i * 2)) {
            memcpy(acc + i * 2, in + i * 2, 2);
        }
    }
}

/* Element counts of a collective's input and output for `count`. */
static size_t in_count(int c, size_t count, int n) { return c == REDUCE_SCATTER ? count * (size_t)n : count; }
static size_t out_count(int c, size_t count, int n) { return c == ALL_GATHER ? count * (size_t)n : count; }

/* What rank `rank` must hold after collective `c`, from every rank's input. */
static void expected(unsigned char *want, unsigned char **in, int c, int rank, int n, size_t count, kind_t k) {
    size_t bytes = count * k.size;
    int q;
    switch (c) {
    case ALL_REDUCE:
    case REDUCE:
        memcpy(want, in[0], bytes);
        for (q = 1; q < n; q++) combine(want, in[q], count, k);
        break;
    case BCAST:
        memcpy(want, in[n - 1], bytes); /* the root is the last rank */
        break;
    case ALL_GATHER:
        for (q = 0; q < n; q++) memcpy(want + (size_t)q * bytes, in[q], bytes);
        break;
    case REDUCE_SCATTER:
        memcpy(want, in[0] + (size_t)rank * bytes, bytes);
        for (q = 1; q < n; q++) combine(want, in[q] + (size_t)rank * bytes, count, k);
        break;
    default: /* send/recv: each rank sends to the next and receives from the previous */
        memcpy(want, in[(rank + n - 1) % n], bytes);
    }
}

static gpurt_status_t issue(int c, const void *send, void *recv, size_t count, kind_t k, int rank, int n, gpurt_comm_t comm, gpurt_stream_t stream) {
    gpurt_status_t s;
    switch (c) {
    case ALL_REDUCE: return gpurt_comm_all_reduce(send, recv, count, k.dtype, k.op, comm, stream);
    case BCAST: return gpurt_comm_bcast(send, recv, count, k.dtype, n - 1, comm, stream);
    case REDUCE: return gpurt_comm_reduce(send, recv, count, k.dtype, k.op, 0, comm, stream);
    case ALL_GATHER: return gpurt_comm_all_gather(send, recv, count, k.dtype, comm, stream);
    case REDUCE_SCATTER: return gpurt_comm_reduce_scatter(send, recv, count, k.dtype, k.op, comm, stream);
    default:
        s = gpurt_comm_send(send, count, k.dtype, (rank + 1) % n, comm, stream);
        return s != GPURT_SUCCESS ? s : gpurt_comm_recv(recv, count, k.dtype, (rank + n - 1) % n, comm, stream);
    }
}

/* Runs collective `c` on every local rank (in one group) and checks each output;
 * with `captured`, records it into a graph per rank first and replays the graphs on
 * inputs made after the capture. */
static void run_and_check(world_t *w, int c, kind_t k, size_t count, uint64_t seed, int captured) {
    int n = w->nranks, l, q;
    size_t in_bytes = in_count(c, count, n) * k.size, out_bytes = out_count(c, count, n) * k.size;
    unsigned char *in[MAX_RANKS], *want = malloc(out_bytes), *back = malloc(out_bytes);
    void *send[MAX_RANKS], *recv[MAX_RANKS];
    gpurt_graph_t graph[MAX_RANKS];
    gpurt_graph_exec_t exec[MAX_RANKS];
    for (q = 0; q < n; q++) {
        in[q] = malloc(in_bytes);
        fill(in[q], in_count(c, count, n), k, seed + (uint64_t)q);
    }
    for (l = 0; l < w->nlocal; l++) {
        EXPECT(gpurt_malloc(in_bytes, w->stream[l], &send[l]), GPURT_SUCCESS);
        EXPECT(gpurt_malloc(out_bytes, w->stream[l], &recv[l]), GPURT_SUCCESS);
        EXPECT(gpurt_memset_async(recv[l], 0x5a, 1, out_bytes, w->stream[l]), GPURT_SUCCESS);
        if (!captured) EXPECT(gpurt_memcpy(send[l], in[w->rank[l]], in_bytes, w->stream[l]), GPURT_SUCCESS);
    }
    for (l = 0; captured && l < w->nlocal; l++) EXPECT(gpurt_stream_begin_capture(w->stream[l], GPURT_CAPTURE_MODE_THREAD_LOCAL, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_comm_group_start(), GPURT_SUCCESS);
    for (l = 0; l < w->nlocal; l++) EXPECT(issue(c, send[l], recv[l], count, k, w->rank[l], n, w->comm[l], w->stream[l]), GPURT_SUCCESS);
    EXPECT(gpurt_comm_group_end(), GPURT_SUCCESS);
    /* Every capture ends before anything else: while one of this thread's streams
     * captures, the driver refuses the thread's other work. */
    for (l = 0; captured && l < w->nlocal; l++) EXPECT(gpurt_stream_end_capture(w->stream[l], &graph[l]), GPURT_SUCCESS);
    for (l = 0; captured && l < w->nlocal; l++) {
        EXPECT(gpurt_graph_instantiate(graph[l], 0, NULL, &exec[l]), GPURT_SUCCESS);
        EXPECT(gpurt_memcpy(send[l], in[w->rank[l]], in_bytes, w->stream[l]), GPURT_SUCCESS);
    }
    for (l = 0; captured && l < w->nlocal; l++) EXPECT(gpurt_graph_launch(exec[l], w->stream[l]), GPURT_SUCCESS);
    for (l = 0; l < w->nlocal; l++) {
        int rank = w->rank[l];
        EXPECT(gpurt_memcpy(back, recv[l], out_bytes, w->stream[l]), GPURT_SUCCESS);
        if (c != REDUCE || rank == 0) {
            expected(want, in, c, rank, n, count, k);
            CHECK(memcmp(back, want, out_bytes) == 0, "%s%s of %zu %s, rank %d of %d", captured ? "captured " : "", NAMES[c], count, k.name, rank, n);
        }
        EXPECT(gpurt_free(send[l]), GPURT_SUCCESS);
        EXPECT(gpurt_free(recv[l]), GPURT_SUCCESS);
        if (captured) {
            EXPECT(gpurt_graph_exec_destroy(exec[l]), GPURT_SUCCESS);
            EXPECT(gpurt_graph_destroy(graph[l]), GPURT_SUCCESS);
        }
    }
    for (q = 0; q < n; q++) free(in[q]);
    free(want), free(back);
}

static void all_checks(world_t *w, const char *mode) {
    static const size_t counts[] = {1, 4097, BIG};
    int c, before = failures;
    size_t i, k;
    for (c = 0; c < N_COLLECTIVES; c++)
        for (i = 0; i < 3; i++)
            for (k = 0; k < sizeof KINDS / sizeof KINDS[0]; k++) {
                if (counts[i] == BIG && k > 0) continue; /* 256 MiB once per collective, in f32 */
                run_and_check(w, c, KINDS[k], counts[i], 1000u * (uint64_t)c + 10u * i + k, 0);
            }
    for (c = 0; c < N_COLLECTIVES; c++) run_and_check(w, c, KINDS[(size_t)c % 4], 4097, 5000u + (uint64_t)c, 1);
    run_and_check(w, ALL_REDUCE, KINDS[0], BIG, 778, 1);
    printf("comm_ranks_test: %s, %d ranks: every collective %s\n", mode, w->nranks, failures == before ? "byte-exact" : "FAILED");
}

/* A split into one communicator per rank (color = rank): each all_reduces alone. */
static void split_per_rank(world_t *w) {
    world_t alone = *w;
    int colors[MAX_RANKS], keys[MAX_RANKS], l, rank = -1, nranks = -1, device = -1;
    for (l = 0; l < w->nlocal; l++) colors[l] = w->rank[l], keys[l] = 0;
    EXPECT(gpurt_comm_split_all(w->comm, w->nlocal, colors, keys, alone.comm), GPURT_SUCCESS);
    for (l = 0; l < w->nlocal; l++) {
        EXPECT(gpurt_comm_info(alone.comm[l], &rank, &nranks, &device), GPURT_SUCCESS);
        CHECK(rank == 0 && nranks == 1, "rank %d's own communicator: rank %d of %d", w->rank[l], rank, nranks);
    }
    for (l = 0; l < w->nlocal; l++) {
        world_t one = {1, 1, {0}, {alone.comm[l]}, {w->stream[l]}};
        run_and_check(&one, ALL_REDUCE, KINDS[1], 4097, 99 + (uint64_t)l, 0);
        EXPECT(gpurt_comm_destroy(alone.comm[l]), GPURT_SUCCESS);
    }
}

static int rank_process(int rank, int nranks, const gpurt_comm_id_t *id) {
    world_t w = {nranks, 1, {rank}, {NULL}, {NULL}};
    EXPECT(gpurt_set_device(rank), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(rank, GPURT_STREAM_NON_BLOCKING, 0, &w.stream[0]), GPURT_SUCCESS);
    EXPECT(gpurt_comm_init_rank(id, nranks, rank, rank, &w.comm[0]), GPURT_SUCCESS);
    if (failures == 0) {
        all_checks(&w, rank == 0 ? "one process per GPU" : "one process per GPU (another rank)");
        split_per_rank(&w);
        EXPECT(gpurt_comm_destroy(w.comm[0]), GPURT_SUCCESS);
    }
    EXPECT(gpurt_stream_destroy(w.stream[0]), GPURT_SUCCESS);
    printf("comm_ranks_test: rank %d: %d checks, %d failures\n", rank, checks, failures);
    return failures != 0;
}

/* Starts ranks 1..n-1 as processes of this program, hands each the id, and runs rank 0. */
static int processes(const char *self, int n) {
    gpurt_comm_id_t id;
    pid_t pids[MAX_RANKS];
    int r, status, bad = 0, fds[2];
    EXPECT(gpurt_comm_unique_id(&id), GPURT_SUCCESS);
    for (r = 1; r < n; r++) {
        char rank_arg[16], n_arg[16];
        char *argv[] = {(char *)self, (char *)"--rank", rank_arg, n_arg, NULL};
        posix_spawn_file_actions_t actions;
        snprintf(rank_arg, sizeof rank_arg, "%d", r);
        snprintf(n_arg, sizeof n_arg, "%d", n);
        if (pipe(fds) != 0) return 1;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, fds[0], 0);
        posix_spawn_file_actions_addclose(&actions, fds[1]);
        CHECK(posix_spawn(&pids[r], self, &actions, NULL, argv, environ) == 0, "rank %d started", r);
        posix_spawn_file_actions_destroy(&actions);
        close(fds[0]);
        CHECK(write(fds[1], id.internal, sizeof id.internal) == (ssize_t)sizeof id.internal, "id sent to rank %d", r);
        close(fds[1]);
    }
    bad = rank_process(0, n, &id);
    for (r = 1; r < n; r++) {
        CHECK(waitpid(pids[r], &status, 0) == pids[r] && WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d's process passed", r);
    }
    return bad || failures;
}

int main(int argc, char **argv) {
    const char *require = getenv("GPURT_REQUIRE_2_GPUS");
    int count = 0, version = 0, l, devices[MAX_RANKS];
    world_t w;
    setvbuf(stdout, NULL, _IOLBF, 0); /* ranks share the log; a killed run keeps its lines */
    if (argc == 4 && strcmp(argv[1], "--rank") == 0) { /* a rank of part 2: the id comes on standard input */
        gpurt_comm_id_t id;
        if (fread(id.internal, 1, sizeof id.internal, stdin) != sizeof id.internal) return 1;
        return rank_process(atoi(argv[2]), atoi(argv[3]), &id);
    }
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count < 2) {
        printf("comm_ranks_test: skipped: needs 2 GPUs, gpurt sees %d%s%s\n", count, count ? "" : ": ", count ? "" : gpurt_last_error_message());
        return require && strcmp(require, "1") == 0 ? 1 : 0;
    }
    if (gpurt_comm_version(&version) != GPURT_SUCCESS) {
        printf("comm_ranks_test: skipped: %s\n", gpurt_last_error_message());
        return require && strcmp(require, "1") == 0 ? 1 : 0;
    }
    if (count > MAX_RANKS) count = MAX_RANKS;
    printf("comm_ranks_test: NCCL %d, %d GPUs\n", version, count);
    w.nranks = w.nlocal = count;
    for (l = 0; l < count; l++) {
        w.rank[l] = devices[l] = l;
        EXPECT(gpurt_stream_create(l, GPURT_STREAM_NON_BLOCKING, 0, &w.stream[l]), GPURT_SUCCESS);
    }
    EXPECT(gpurt_comm_init_all(devices, count, w.comm), GPURT_SUCCESS);
    all_checks(&w, "one process over all GPUs");
    split_per_rank(&w);
    for (l = 0; l < count; l++) EXPECT(gpurt_comm_destroy(w.comm[l]), GPURT_SUCCESS);
    for (l = 0; l < count; l++) EXPECT(gpurt_stream_destroy(w.stream[l]), GPURT_SUCCESS);
    printf("comm_ranks_test: one process: %d checks, %d failures\n", checks, failures);
    return processes("/proc/self/exe", count) || failures;
}
