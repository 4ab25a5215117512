/* IPC memory between two processes through the C ABI: this program is the producer,
 * and runs itself again as the consumer (a fresh process, as CUDA requires), which
 * takes commands on its stdin and answers on its stdout.
 *
 * The producer writes fresh random bytes into a block and exports it; the consumer
 * opens it, checks the bytes exactly, writes them back changed, and the producer sees
 * the change. The producer frees the block while the consumer holds it: the memory
 * is not reused until the consumer closes it and gpurt_ipc_collect runs. A consumer
 * killed with SIGKILL while holding a block does not keep it from its producer. A
 * block of an expandable segment that lies on two of its mappings goes the same way
 * (its mappings' descriptors copied with pidfd_getfd: the producer names its consumer
 * with prctl(PR_SET_PTRACER), as Yama's ptrace_scope 1 asks), on device 0 and, where
 * two devices can access each other, on device 1 for a consumer on device 0. Bad handles and misuse
 * get their status, and change nothing.
 *
 * On the stub driver (CI) the two processes share no memory: every step runs but
 * the byte checks. Needs a device; without one it says so and exits 0, unless
 * GPURT_REQUIRE_GPU=1.
 */
#define _GNU_SOURCE
#include <gpurt.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#include "check.h"

/* ---- both sides ------------------------------------------------------------- */

/* Where a handle's fields lie (src/ipc/mod.rs): after the mark, version, boot, the
 * producer's pid and start time, the device's UUID, the memory (its kind, then a
 * segment's driver handle, or the list's descriptor and count), offset and size. */
enum { HANDLE_PID = 28, HANDLE_UUID = 40, HANDLE_LIST_FD = 57, HANDLE_OFFSET = 121, HANDLE_SIZE = 129 };

static gpurt_ipc_mem_handle_t with_field(const gpurt_ipc_mem_handle_t *h, int at, const void *value, size_t size) {
    gpurt_ipc_mem_handle_t changed = *h;
    memcpy(changed.bytes + at, value, size);
    return changed;
}

static void to_hex(const gpurt_ipc_mem_handle_t *h, char *out) {
    size_t i;
    for (i = 0; i < GPURT_IPC_HANDLE_SIZE; i++) sprintf(out + 2 * i, "%02x", h->bytes[i]);
}

static int from_hex(const char *text, gpurt_ipc_mem_handle_t *h) {
    size_t i;
    unsigned byte;
    for (i = 0; i < GPURT_IPC_HANDLE_SIZE; i++) {
        if (sscanf(text + 2 * i, "%2x", &byte) != 1) return 0;
        h->bytes[i] = (unsigned char)byte;
    }
    return 1;
}

/* The legacy default stream, for the synchronous copies. */
static gpurt_stream_t legacy_of(int device) {
    gpurt_stream_t stream = NULL;
    gpurt_stream_default(device, &stream);
    return stream;
}

static gpurt_stream_t legacy(void) { return legacy_of(0); }

/* ---- the consumer ------------------------------------------------------------ */

/* Commands: "open HEX BYTES SEED" (check the bytes, write them back XOR 0x5a, on
 * device 0's stream), "reopen HEX", "close PTR", "peer DEVICE PEER" (DEVICE may
 * access PEER's memory), "quit". Answers: "ok PTR" / "ok" / "err STATUS MESSAGE". */
static int consumer(int real) {
    char line[1024], hex[2 * GPURT_IPC_HANDLE_SIZE + 1];
    while (fgets(line, sizeof line, stdin)) {
        gpurt_ipc_mem_handle_t h;
        unsigned long long bytes = 0, seed = 0, ptr_value = 0;
        int device = 0, peer = 0;
        void *ptr = NULL;
        gpurt_status_t s = GPURT_ERROR_INVALID_ARGUMENT;
        if (sscanf(line, "open %512s %llu %llu", hex, &bytes, &seed) == 3 && from_hex(hex, &h)) {
            s = gpurt_ipc_open_mem_handle(&h, &ptr);
            if (s == GPURT_SUCCESS && real) {
                unsigned char *want = malloc(bytes), *got = malloc(bytes);
                size_t i;
                fill_pattern(want, bytes, seed);
                s = gpurt_memcpy(got, ptr, bytes, legacy());
                if (s == GPURT_SUCCESS && memcmp(want, got, bytes) != 0) {
                    printf("err 99 the consumer read other bytes than the producer wrote\n");
                    fflush(stdout);
                    free(want);
                    free(got);
                    continue;
                }
                for (i = 0; i < bytes; i++) got[i] ^= 0x5a;
                if (s == GPURT_SUCCESS) s = gpurt_memcpy(ptr, got, bytes, legacy());
                free(want);
                free(got);
            }
        } else if (sscanf(line, "reopen %512s", hex) == 1 && from_hex(hex, &h)) {
            s = gpurt_ipc_open_mem_handle(&h, &ptr);
        } else if (sscanf(line, "close %llx", &ptr_value) == 1) {
            s = gpurt_ipc_close_mem_handle((void *)(uintptr_t)ptr_value);
        } else if (sscanf(line, "peer %d %d", &device, &peer) == 2) {
            s = gpurt_device_enable_peer_access(device, peer);
        } else if (strncmp(line, "quit", 4) == 0) {
            return 0;
        }
        if (s == GPURT_SUCCESS)
            printf("ok %llx\n", (unsigned long long)(uintptr_t)ptr);
        else
            printf("err %d %s\n", (int)s, gpurt_last_error_message());
        fflush(stdout);
    }
    return 0;
}

/* ---- the producer ------------------------------------------------------------ */

typedef struct {
    pid_t pid;
    FILE *to, *from;
} Child;

static Child spawn_consumer(void) {
    Child c = {0, NULL, NULL};
    int in[2], out[2];
    char *argv[] = {"ipc_test", "consumer", NULL};
    posix_spawn_file_actions_t actions;
    if (pipe(in) != 0 || pipe(out) != 0) return c;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    if (posix_spawn(&c.pid, "/proc/self/exe", &actions, NULL, argv, environ) != 0) c.pid = 0;
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    c.to = fdopen(in[1], "w");
    c.from = fdopen(out[0], "r");
    return c;
}

/* SIGKILL: the consumer dies holding what it opened. */
static void kill_consumer(Child *c) {
    int status = 0;
    kill(c->pid, SIGKILL);
    waitpid(c->pid, &status, 0);
    fclose(c->to);
    fclose(c->from);
}

/* Sends one command; the answer's status (0: ok) and pointer. */
static int ask(Child *c, const char *command, unsigned long long *ptr) {
    char answer[1024];
    int status = -1;
    fprintf(c->to, "%s\n", command);
    fflush(c->to);
    if (!fgets(answer, sizeof answer, c->from)) return -1;
    if (strncmp(answer, "ok", 2) == 0) {
        if (ptr) sscanf(answer, "ok %llx", ptr);
        return 0;
    }
    sscanf(answer, "err %d", &status);
    printf("  consumer: %s", answer);
    return status;
}

static int open_in(Child *c, const gpurt_ipc_mem_handle_t *h, size_t bytes, uint64_t seed, unsigned long long *ptr) {
    char command[1024], hex[2 * GPURT_IPC_HANDLE_SIZE + 1];
    to_hex(h, hex);
    snprintf(command, sizeof command, "open %s %zu %llu", hex, bytes, (unsigned long long)seed);
    return ask(c, command, ptr);
}

static int reopen_in(Child *c, const gpurt_ipc_mem_handle_t *h, unsigned long long *ptr) {
    char command[1024], hex[2 * GPURT_IPC_HANDLE_SIZE + 1];
    to_hex(h, hex);
    snprintf(command, sizeof command, "reopen %s", hex);
    return ask(c, command, ptr);
}

static int close_in(Child *c, unsigned long long ptr) {
    char command[64];
    snprintf(command, sizeof command, "close %llx", ptr);
    return ask(c, command, NULL);
}

static uint64_t kept_blocks(void) {
    uint64_t blocks = 99;
    gpurt_ipc_kept(&blocks, NULL);
    return blocks;
}

static int64_t allocated_now(void) {
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    gpurt_memory_stats(0, &stats);
    return stats.allocated_bytes.all.current;
}

/* Fresh random bytes in a new block (of `pool`, on `device`; NULL: device 0's
 * default pool): its seed goes to the consumer. */
static void *filled_block_of(gpurt_mem_pool_t pool, int device, size_t bytes, uint64_t seed, int real) {
    void *dev = NULL;
    unsigned char *host = malloc(bytes);
    fill_pattern(host, bytes, seed);
    if (pool) EXPECT(gpurt_mem_pool_malloc(pool, bytes, legacy_of(device), &dev), GPURT_SUCCESS);
    else EXPECT(gpurt_malloc_device(0, bytes, &dev), GPURT_SUCCESS);
    if (real) EXPECT(gpurt_memcpy(dev, host, bytes, legacy_of(device)), GPURT_SUCCESS);
    free(host);
    return dev;
}

static void *filled_block(size_t bytes, uint64_t seed, int real) { return filled_block_of(NULL, 0, bytes, seed, real); }

/* Whether the consumer changed each byte of the block (on `device`) as it does (xor 0x5a). */
static int sees_consumer_change_on(int device, const void *dev, size_t bytes, uint64_t seed) {
    unsigned char *want = malloc(bytes), *got = malloc(bytes);
    size_t i;
    int same;
    fill_pattern(want, bytes, seed);
    for (i = 0; i < bytes; i++) want[i] ^= 0x5a;
    EXPECT(gpurt_memcpy(got, dev, bytes, legacy_of(device)), GPURT_SUCCESS);
    same = memcmp(want, got, bytes) == 0;
    free(want);
    free(got);
    return same;
}

static int sees_consumer_change(const void *dev, size_t bytes, uint64_t seed) { return sees_consumer_change_on(0, dev, bytes, seed); }

/* A handle is another process's bytes (SECURITY.md): a forged one, made from the
 * genuine `h` with one field changed, is refused and imports nothing. */
static void hostile_handles(Child *child, const gpurt_ipc_mem_handle_t *h, const char *what) {
    uint32_t init = 1;
    uint64_t far = 1ull << 62, zero = 0, past_end = 1ull << 40;
    unsigned char no_device[16] = {0xde, 0xad};
    gpurt_ipc_mem_handle_t bad = with_field(h, HANDLE_PID, &init, sizeof init);
    CHECK(reopen_in(child, &bad, NULL) == GPURT_ERROR_INVALID_HANDLE, "%s handle naming another process (pid 1) is refused", what);
    bad = with_field(h, HANDLE_UUID, no_device, sizeof no_device);
    CHECK(reopen_in(child, &bad, NULL) == GPURT_ERROR_INVALID_HANDLE, "%s handle naming a device no visible device's UUID names is refused", what);
    bad = with_field(h, HANDLE_OFFSET, &far, sizeof far);
    CHECK(reopen_in(child, &bad, NULL) == GPURT_ERROR_INVALID_HANDLE, "%s handle with an offset past its memory is refused", what);
    bad = with_field(h, HANDLE_SIZE, &past_end, sizeof past_end);
    CHECK(reopen_in(child, &bad, NULL) == GPURT_ERROR_INVALID_HANDLE, "%s handle with a size past its memory is refused", what);
    bad = with_field(h, HANDLE_SIZE, &zero, sizeof zero);
    CHECK(reopen_in(child, &bad, NULL) == GPURT_ERROR_INVALID_HANDLE, "%s handle with a size of 0 is refused", what);
    CHECK(kept_blocks() == 0, "refused opens hold nothing");
}

/* An expandable block's handle names a descriptor of its producer: one that is not
 * gpurt's sealed list, or a sealed list naming descriptors that are not CUDA memory,
 * is refused. */
static void hostile_expandable_handles(Child *child, const gpurt_ipc_mem_handle_t *h) {
    int not_a_list = STDERR_FILENO;
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int forged = memfd_create("gpurt-ipc-mappings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int64_t entry[2] = {devnull, 2 << 20};
    gpurt_ipc_mem_handle_t bad = with_field(h, HANDLE_LIST_FD, &not_a_list, sizeof not_a_list);
    CHECK(reopen_in(child, &bad, NULL) == GPURT_ERROR_INVALID_HANDLE, "a handle naming a descriptor that is not a sealed list is refused");
    CHECK(devnull >= 0 && forged >= 0 && write(forged, entry, sizeof entry) == (ssize_t)sizeof entry
              && fcntl(forged, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) == 0,
          "a forged list is made");
    bad = with_field(h, HANDLE_LIST_FD, &forged, sizeof forged);
    bad.bytes[HANDLE_LIST_FD + 4] = 1; /* one mapping */
    memset(bad.bytes + HANDLE_LIST_FD + 5, 0, 3);
    CHECK(reopen_in(child, &bad, NULL) == GPURT_ERROR_INVALID_HANDLE, "a sealed list naming a descriptor that is not CUDA memory (/dev/null) is refused");
    close(forged);
    close(devnull);
}

/* A block of an expandable segment on `device` lying on two of its mappings (the
 * first block takes part of the first mapping; the second runs into the growth step
 * after it): opened by the consumer, read and changed exactly on device 0, kept
 * while held, collected; then one held by a consumer killed with SIGKILL. */
static void expandable_block(Child *child, int device, uint64_t seed, int real) {
    const size_t bytes = 5 * 1000 * 1000 + 3;
    gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT;
    gpurt_mem_pool_t pool = NULL;
    gpurt_ipc_mem_handle_t h, again, bad;
    void *first = NULL, *block;
    unsigned long long in_child = 0, again_in_child = 0;
    Child doomed;
    options.config = "expandable_segments:True";
    EXPECT(gpurt_mem_pool_create(device, &options, &pool), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_malloc(pool, 1 << 20, legacy_of(device), &first), GPURT_SUCCESS);
    block = filled_block_of(pool, device, bytes, seed, real);
    EXPECT(gpurt_ipc_mem_handle(block, &h), GPURT_SUCCESS);
    EXPECT(gpurt_ipc_mem_handle(block, &again), GPURT_SUCCESS);
    CHECK(memcmp(&h, &again, sizeof h) == 0, "exporting an expandable block twice gives the same handle");
    prctl(PR_SET_PTRACER, (unsigned long)child->pid, 0, 0, 0); /* where Yama asks for it; harmless elsewhere */
    bad = h;
    bad.bytes[61] ^= 0x40; /* the count of mappings (after the memory's kind and the list's descriptor) */
    CHECK(reopen_in(child, &bad, NULL) == GPURT_ERROR_INVALID_HANDLE, "a count of mappings that is not the export's list's");
    hostile_expandable_handles(child, &h);
    hostile_handles(child, &h, "an expandable block's");
    CHECK(open_in(child, &h, bytes, seed, &in_child) == 0, "the consumer opens an expandable segment's block and reads its bytes exactly");
    if (real) CHECK(sees_consumer_change_on(device, block, bytes, seed), "the producer sees what the consumer wrote into the expandable block");
    CHECK(reopen_in(child, &h, &again_in_child) == 0 && again_in_child == in_child, "the same handle opens at the same address");
    EXPECT(gpurt_free(block), GPURT_SUCCESS);
    CHECK(kept_blocks() == 1, "the freed expandable block is kept for its consumer");
    CHECK(close_in(child, in_child) == 0 && close_in(child, in_child) == 0, "both opens close");
    EXPECT(gpurt_ipc_collect(), GPURT_SUCCESS);
    CHECK(kept_blocks() == 0, "collected once the consumer closed it");

    /* A consumer killed (SIGKILL) while it holds an expandable block holds nothing. */
    block = filled_block_of(pool, device, bytes, seed + 1, real);
    EXPECT(gpurt_ipc_mem_handle(block, &h), GPURT_SUCCESS);
    doomed = spawn_consumer();
    if (device != 0) CHECK(ask(&doomed, "peer 0 1", NULL) == 0, "the other consumer's device 0 may access device 1");
    prctl(PR_SET_PTRACER, (unsigned long)doomed.pid, 0, 0, 0);
    CHECK(open_in(&doomed, &h, bytes, seed + 1, &in_child) == 0, "another consumer opens an expandable block");
    EXPECT(gpurt_free(block), GPURT_SUCCESS);
    CHECK(kept_blocks() == 1, "kept while the other consumer holds it");
    kill_consumer(&doomed);
    EXPECT(gpurt_ipc_collect(), GPURT_SUCCESS);
    CHECK(kept_blocks() == 0, "a killed consumer holds no expandable block");
    EXPECT(gpurt_free(first), GPURT_SUCCESS);
    EXPECT(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
}

/* Two devices that can access each other: an expandable block of device 1, opened
 * by a consumer whose device 0 was granted access to device 1 first (the import
 * opens the mappings to it) and read and written there exactly. */
static void cross_device_expandable_block(Child *child, uint64_t seed, int real) {
    int count = 0, can_access = 0;
    gpurt_device_count(&count);
    if (count >= 2) gpurt_device_can_access_peer(0, 1, &can_access);
    if (!can_access) {
        printf("ipc_test: the expandable block across two devices is skipped: %s\n",
               count < 2 ? "one device" : "devices 0 and 1 cannot access each other");
        return;
    }
    CHECK(ask(child, "peer 0 1", NULL) == 0, "the consumer's device 0 may access device 1");
    expandable_block(child, 1, seed, real);
}

static int producer(int real) {
    const size_t bytes = 3 * 1000 * 1000 + 17; /* a large block, an odd size */
    uint64_t seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
    gpurt_ipc_mem_handle_t h, again, bad;
    void *a, *b, *c, *reuse = NULL, *mine = NULL;
    unsigned long long in_child = 0, b_in_child = 0, again_in_child = 0;
    int64_t before = allocated_now();
    Child child;
    int status = 0;

    /* Misuse in this process: nothing is exported, nothing changes. */
    EXPECT(gpurt_ipc_mem_handle(NULL, &h), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_ipc_mem_handle((void *)(uintptr_t)0x1234, &h), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_ipc_open_mem_handle(NULL, &mine), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_ipc_close_mem_handle((void *)(uintptr_t)0x1234), GPURT_ERROR_INVALID_ARGUMENT);
    memset(&bad, 0x17, sizeof bad);
    EXPECT(gpurt_ipc_open_mem_handle(&bad, &mine), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_ipc_collect(), GPURT_SUCCESS);

    a = filled_block(bytes, seed, real);
    EXPECT(gpurt_ipc_mem_handle(a, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_ipc_mem_handle(a, &h), GPURT_SUCCESS);
    EXPECT(gpurt_ipc_mem_handle(a, &again), GPURT_SUCCESS);
    CHECK(memcmp(&h, &again, sizeof h) == 0, "exporting twice gives the same handle");
    EXPECT(gpurt_ipc_mem_handle((char *)a + 512, &again), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_ipc_open_mem_handle(&h, &mine), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(mine == NULL, "a refused open writes no pointer");
    /* Another boot (or machine): the boot id follows the mark and the version. */
    bad = h;
    bad.bytes[12] ^= 0xff;
    EXPECT(gpurt_ipc_open_mem_handle(&bad, &mine), GPURT_ERROR_INVALID_HANDLE);
    child = spawn_consumer();
    CHECK(child.pid > 0 && child.to && child.from, "the consumer starts");
    if (child.pid <= 0) return 1;
    expandable_block(&child, 0, seed + 4, real);
    cross_device_expandable_block(&child, seed + 5, real);
    CHECK(open_in(&child, &h, bytes, seed, &in_child) == 0, "the consumer opens the block and reads its bytes exactly");
    memset(&bad, 0x17, sizeof bad);
    CHECK(reopen_in(&child, &bad, NULL) == GPURT_ERROR_INVALID_HANDLE, "bytes that are not a handle");
    hostile_handles(&child, &h, "a segment's");
    if (real) CHECK(sees_consumer_change(a, bytes, seed), "the producer sees what the consumer wrote");

    /* Freed while the consumer holds it: kept, and not reused. */
    EXPECT(gpurt_free(a), GPURT_SUCCESS);
    CHECK(kept_blocks() == 1, "the freed block is kept for its consumer: %llu", (unsigned long long)kept_blocks());
    EXPECT(gpurt_free(a), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_ipc_mem_handle(a, &again), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_malloc_device(0, bytes, &reuse), GPURT_SUCCESS);
    CHECK(reuse != a, "a kept block is not handed out again");
    EXPECT(gpurt_free(reuse), GPURT_SUCCESS);
    EXPECT(gpurt_ipc_collect(), GPURT_SUCCESS);
    CHECK(kept_blocks() == 1, "collect keeps what a live consumer holds");

    /* A second block, opened twice: one hold, two closes. */
    b = filled_block(4096, seed + 1, real);
    EXPECT(gpurt_ipc_mem_handle(b, &again), GPURT_SUCCESS);
    CHECK(open_in(&child, &again, 4096, seed + 1, &b_in_child) == 0, "a second block");
    CHECK(reopen_in(&child, &h, &again_in_child) == 0, "the first block again");
    CHECK(again_in_child == in_child, "the same handle opens at the same address");
    CHECK(close_in(&child, in_child) == 0, "one of the two opens");
    EXPECT(gpurt_ipc_collect(), GPURT_SUCCESS);
    CHECK(kept_blocks() == 1, "one open remains");
    CHECK(close_in(&child, in_child) == 0, "the last open");
    CHECK(close_in(&child, in_child) == GPURT_ERROR_INVALID_ARGUMENT, "a closed pointer");
    CHECK(kept_blocks() == 1, "kept until collected");
    EXPECT(gpurt_ipc_collect(), GPURT_SUCCESS);
    CHECK(kept_blocks() == 0, "collected once the consumer closed it");
    EXPECT(gpurt_malloc_device(0, bytes, &reuse), GPURT_SUCCESS);
    CHECK(reuse == a, "the collected block is reused: %p, %p", reuse, a);
    EXPECT(gpurt_free(reuse), GPURT_SUCCESS);

    /* A block freed before anyone opened it goes at once; its handle is stale. */
    c = filled_block(8192, seed + 2, real);
    EXPECT(gpurt_ipc_mem_handle(c, &again), GPURT_SUCCESS);
    EXPECT(gpurt_free(c), GPURT_SUCCESS);
    CHECK(kept_blocks() == 0, "no consumer: not kept");
    CHECK(open_in(&child, &again, 8192, seed + 2, NULL) == GPURT_ERROR_INVALID_HANDLE, "the handle of a freed block");

    /* The consumer killed while it holds b: b does not stay kept. */
    EXPECT(gpurt_free(b), GPURT_SUCCESS);
    CHECK(kept_blocks() == 1, "b is held");
    kill_consumer(&child);
    EXPECT(gpurt_ipc_collect(), GPURT_SUCCESS);
    CHECK(kept_blocks() == 0, "a dead consumer holds nothing");
    CHECK(allocated_now() == before, "every block is freed: %lld bytes, %lld before", (long long)allocated_now(), (long long)before);

    /* A consumer that quits without closing: its holds go with it. */
    a = filled_block(bytes, seed + 3, real);
    EXPECT(gpurt_ipc_mem_handle(a, &h), GPURT_SUCCESS);
    child = spawn_consumer();
    CHECK(open_in(&child, &h, bytes, seed + 3, &in_child) == 0, "a new consumer opens a new block");
    CHECK(ask(&child, "quit", NULL) == -1, "the consumer exits");
    waitpid(child.pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the consumer exited cleanly with a block open");
    fclose(child.to);
    fclose(child.from);
    EXPECT(gpurt_free(a), GPURT_SUCCESS);
    CHECK(kept_blocks() == 0, "an exited consumer holds nothing");
    CHECK(allocated_now() == before, "every block is freed");
    (void)b_in_child;
    return 0;
}

int main(int argc, char **argv) {
    int count = 0, real;
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    const char *require = getenv("GPURT_REQUIRE_GPU");
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("ipc_test: skipped: no CUDA device (%s)\n", gpurt_last_error_message());
        return require && strcmp(require, "1") == 0 ? 1 : 0;
    }
    gpurt_device_get_properties(0, &props);
    real = strcmp(props.name, "Fake GPU") != 0;
    if (argc > 1 && strcmp(argv[1], "consumer") == 0) return consumer(real);
    producer(real);
    printf("ipc_test: %d checks, %d failed (%s)\n", checks, failures, real ? props.name : "stub driver: no byte checks");
    return failures ? 1 : 0;
}
