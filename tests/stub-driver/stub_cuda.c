/* A stand-in libcuda.so.1 for machines without a GPU: every entry point gpurt
 * needs answers at once, as a driver with one idle device would, and can be made to
 * fail on its n-th call (fault injection, below)
 * (STUB_CUDA_DEVICES=N: N devices, to measure gpurt's multi-device paths). It is no
 * simulator (work "completes" when queued); it lets CI run the GPU-present code
 * paths of the C ABI test, and measures gpurt's own CPU cost per call in the
 * benchmarks (the driver's share here is a few ns). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
typedef int CUresult;
typedef void *P;

/* ---- fault injection and accounting, for tests/c/fault_test.c ----------------
 * stub_fail_nth("cuMemAlloc_v2", n) makes the n-th call of that entry point from
 * now on fail (out of memory for allocations, CUDA_ERROR_UNKNOWN otherwise);
 * stub_fail_hits() says whether it did. stub_live() counts what gpurt holds of the
 * driver: device bytes allocated and mapped, pinned host bytes, streams, events. A
 * disarmed stub pays one load per injectable call. */
static const char *fail_name;
static long fail_at, fail_calls, fail_hits;
static long live_device, live_host, live_streams, live_events;
static long external_records, external_waits;
static int capturing(P s);
void stub_fail_nth(const char *name, long n) { fail_name = name; fail_at = n; fail_calls = 0; fail_hits = 0; }
long stub_fail_hits(void) { return fail_hits; }
void stub_live(long *device, long *host, long *streams, long *events) {
    *device = __atomic_load_n(&live_device, __ATOMIC_RELAXED);
    *host = __atomic_load_n(&live_host, __ATOMIC_RELAXED);
    *streams = __atomic_load_n(&live_streams, __ATOMIC_RELAXED);
    *events = __atomic_load_n(&live_events, __ATOMIC_RELAXED);
}
static int injected(const char *name) {
    if (__builtin_expect(fail_name == NULL, 1) || strcmp(name, fail_name) != 0) return 0;
    if (__atomic_add_fetch(&fail_calls, 1, __ATOMIC_RELAXED) != fail_at) return 0;
    __atomic_add_fetch(&fail_hits, 1, __ATOMIC_RELAXED);
    return 1;
}
#define INJECT(name, code) do { if (injected(name)) return (code); } while (0)
#define OOM 2
#define UNKNOWN 999
static void count(long *counter, long delta) { __atomic_add_fetch(counter, delta, __ATOMIC_RELAXED); }

/* Sizes of live device allocations and host allocations, by address (few: segments). */
typedef struct { unsigned long long addr; size_t size; int host; } Range;
static Range ranges[4096];
static pthread_mutex_t ranges_lock = PTHREAD_MUTEX_INITIALIZER;
static void remember_kind(unsigned long long addr, size_t size, int host) {
    int i;
    pthread_mutex_lock(&ranges_lock);
    for (i = 0; i < 4096 && ranges[i].addr != 0; i++) {}
    if (i < 4096) { ranges[i].addr = addr; ranges[i].size = size; ranges[i].host = host; }
    pthread_mutex_unlock(&ranges_lock);
}
static void remember(unsigned long long addr, size_t size) { remember_kind(addr, size, 0); }
/* The entry of `table` (n entries, under `lock`) holding p, copied to *out when asked; 0 when none. */
static int lookup(const Range *table, int n, pthread_mutex_t *lock, unsigned long long p, Range *out) {
    int i, found = 0;
    pthread_mutex_lock(lock);
    for (i = 0; i < n && !found; i++) {
        found = table[i].addr != 0 && table[i].size != 0 && p >= table[i].addr && p - table[i].addr < table[i].size;
        if (found && out) *out = table[i];
    }
    pthread_mutex_unlock(lock);
    return found;
}
static P batch_kernel; /* gpurt's batch copy kernel, whose launches the tests count */
static long batch_kernel_launches, batch_calls;
static size_t forget(unsigned long long addr) {
    size_t size = 0;
    int i;
    pthread_mutex_lock(&ranges_lock);
    for (i = 0; i < 4096; i++) {
        if (ranges[i].addr == addr) { size = ranges[i].size; ranges[i].addr = 0; break; }
    }
    pthread_mutex_unlock(&ranges_lock);
    return size;
}
CUresult cuInit(unsigned f) { (void)f; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuGetErrorName(int c, const char **s) { (void)c; *s = "FAKE"; return 0; }
CUresult cuGetErrorString(int c, const char **s) { (void)c; *s = "fake"; return 0; }
CUresult cuDeviceGetCount(int *n) { const char *e = getenv("STUB_CUDA_DEVICES"); *n = e ? atoi(e) : 1; return 0; }
CUresult cuDeviceGet(int *d, int o) { *d = o; return 0; }
CUresult cuDeviceGetName(char *n, int l, int d) { (void)d; strncpy(n, "Fake GPU", l); return 0; }
CUresult cuDeviceGetUuid(char *u, int d) { memset(u, 1 + d, 16); return 0; }
/* Attribute 102, virtual memory management: absent under STUB_CUDA_NO_VMM=1. */
CUresult cuDeviceGetAttribute(int *v, int a, int d) { (void)d; *v = a == 75 ? 9 : a == 102 ? !getenv("STUB_CUDA_NO_VMM") : 1; return 0; }
CUresult cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = 1ull << 34; return 0; }
/* Devices (STUB_CUDA_DEVICES of them) can access each other, each its own UUID. */
CUresult cuDeviceCanAccessPeer(int *c, int a, int b) { *c = a != b; return 0; }
static int ctx_storage;
static __thread P current;
CUresult cuDevicePrimaryCtxRetain(P *c, int d) { (void)d; *c = &ctx_storage; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
CUresult cuCtxGetCurrent(P *c) { *c = current; return 0; }
CUresult cuCtxSetCurrent(P c) { current = c; return 0; }
CUresult cuCtxGetDevice(int *d) { *d = 0; return 0; }
static int invalidate_captures(P only);
static int blocking_captures_active(void);
/* Synchronising the device while a stream captures invalidates the capture, in every
 * capture mode: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED. */
CUresult cuCtxSynchronize(void) { INJECT("cuCtxSynchronize", UNKNOWN); return invalidate_captures(NULL) ? 900 : 0; }
/* The stack size limit (CU_LIMIT_STACK_SIZE, 0): the driver's default, 1 KiB, until
 * set (as the driver grows it for a launch whose frame needs more). */
static size_t stack_size = 1024;
CUresult cuCtxGetLimit(size_t *v, int limit) { INJECT("cuCtxGetLimit", UNKNOWN); *v = limit == 0 ? __atomic_load_n(&stack_size, __ATOMIC_RELAXED) : 0; return 0; }
CUresult cuCtxSetLimit(int limit, size_t v) {
    INJECT("cuCtxSetLimit", OOM);
    if (limit != 0) return 1; /* CUDA_ERROR_INVALID_VALUE: only the stack size is modelled */
    __atomic_store_n(&stack_size, v, __ATOMIC_RELAXED);
    return 0;
}
CUresult cuCtxEnablePeerAccess(P c, unsigned f) { (void)c; (void)f; return 0; }
CUresult cuCtxDisablePeerAccess(P c) { (void)c; return 0; }
/* A device that processes share (STUB_CUDA_SHARED_MEMORY=FILE, for the share group's
 * tests): FILE counts the bytes all of them hold of its 8 GiB (STUB_CUDA_SHARED_CAPACITY
 * bytes if set); more is refused as out of memory (cuMemAlloc, cuMemCreate), and
 * cuMemGetInfo reports what is left. */
static unsigned long long *shared_used;
static unsigned long long shared_capacity = 1ull << 33;
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;
#define SHARED_CAPACITY shared_capacity
static void open_shared(void) {
    const char *path = getenv("STUB_CUDA_SHARED_MEMORY");
    const char *capacity = getenv("STUB_CUDA_SHARED_CAPACITY");
    int fd = path ? open(path, O_RDWR | O_CREAT, 0600) : -1;
    void *p;
    if (capacity) shared_capacity = strtoull(capacity, NULL, 10);
    if (fd < 0) return;
    p = ftruncate(fd, sizeof *shared_used) == 0 ? mmap(NULL, sizeof *shared_used, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (p != MAP_FAILED) shared_used = p;
}
/* Takes `size` bytes of the shared device: 0 where they are not left. */
static int take_shared(size_t size) {
    unsigned long long used;
    pthread_once(&shared_once, open_shared);
    if (!shared_used) return 1;
    used = __atomic_load_n(shared_used, __ATOMIC_RELAXED);
    do {
        if (used + size > SHARED_CAPACITY) return 0;
    } while (!__atomic_compare_exchange_n(shared_used, &used, used + size, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    return 1;
}
static void give_shared(size_t size) { if (shared_used) __atomic_sub_fetch(shared_used, size, __ATOMIC_ACQ_REL); }
/* Free: 8 GiB less what the process holds (the driver's figure moves as memory is
 * taken), or less what all hold of a shared device. */
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) {
    long held;
    pthread_once(&shared_once, open_shared);
    held = shared_used ? (long)__atomic_load_n(shared_used, __ATOMIC_RELAXED) : __atomic_load_n(&live_device, __ATOMIC_RELAXED);
    *f = SHARED_CAPACITY - (size_t)(held > 0 ? held : 0);
    *t = 1ull << 34;
    return 0;
}
CUresult cuCtxGetStreamPriorityRange(int *l, int *g) { *l = 0; *g = -5; return 0; }
static void created_with_flags(P s, unsigned f);
CUresult cuStreamCreateWithPriority(P *s, unsigned f, int p) { (void)p; INJECT("cuStreamCreateWithPriority", UNKNOWN); *s = calloc(1, 64); created_with_flags(*s, f); count(&live_streams, 1); return 0; }
static void end_capture(P s);
CUresult cuStreamDestroy_v2(P s) { if (capturing(s)) end_capture(s); free(s); count(&live_streams, -1); return 0; }
CUresult cuStreamQuery(P s) { (void)s; return 0; }
/* Synchronising a capturing stream invalidates its capture; the legacy stream (0 or
 * CU_STREAM_LEGACY) waits for every blocking stream, so it invalidates them all
 * (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT). */
static long stream_syncs;
CUresult cuStreamSynchronize(P s) {
    INJECT("cuStreamSynchronize", UNKNOWN);
    if ((unsigned long)s <= 1) return blocking_captures_active() && invalidate_captures(NULL) ? 906 : 0;
    __atomic_add_fetch(&stream_syncs, 1, __ATOMIC_RELAXED);
    return capturing(s) ? (invalidate_captures(s), 900) : 0;
}
/* Waits for created streams so far (a test asserts a call waited for none). */
long stub_stream_syncs(void) { return __atomic_load_n(&stream_syncs, __ATOMIC_RELAXED); }
CUresult cuStreamWaitEvent(P s, P e, unsigned f) { (void)e; if (f > 1 || (f == 1 && !capturing(s))) return 1; /* external: in a capture only */ if (f == 1) __atomic_add_fetch(&external_waits, 1, __ATOMIC_RELAXED); return 0; }
CUresult cuStreamGetFlags(P s, unsigned *f) { (void)s; *f = 1; return 0; }
CUresult cuStreamGetPriority(P s, int *p) { (void)s; *p = 0; return 0; }
/* A created stream's first int is its capture status (1: active), so that gpurt's
 * capture routing runs here; the default streams (small constants) never capture. */
static int capturing(P s) { return (unsigned long)s > 4096 ? *(int *)s : 0; }
/* Asked about the legacy stream while a blocking stream captures, the driver answers
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT. */
CUresult cuStreamIsCapturing(P s, int *c) {
    if ((unsigned long)s <= 1 && blocking_captures_active()) return 906;
    *c = capturing(s);
    return 0;
}
CUresult cuLaunchHostFunc(P s, void (*f)(void *), void *u) { (void)s; INJECT("cuLaunchHostFunc", UNKNOWN); f(u); return 0; }
CUresult cuEventCreate(P *e, unsigned f) { if (f & ~7u) return 1; /* the driver's flags only */ INJECT("cuEventCreate", UNKNOWN); *e = calloc(1, 64); count(&live_events, 1); return 0; }
CUresult cuEventDestroy_v2(P e) { free(e); count(&live_events, -1); return 0; }
/* An event's first pointer is the stream it was last recorded on while that stream
 * captured (NULL: none). Waiting for or querying such an event is refused
 * (CUDA_ERROR_CAPTURED_EVENT) and breaks the capture, as the H200 showed when another
 * thread recorded an event into a capture and waited for it. */
CUresult cuEventRecord(P e, P s) {
    INJECT("cuEventRecord", UNKNOWN);
    __atomic_store_n((P *)e, capturing(s) ? s : NULL, __ATOMIC_RELAXED);
    return 0;
}
static CUresult captured_event(P e) {
    P s = __atomic_load_n((P *)e, __ATOMIC_RELAXED);
    if (s == NULL) return 0;
    invalidate_captures(s);
    return 907;
}
/* External records and waits (event nodes in a capture), counted for the tests. */
void stub_external_events(long *records, long *waits) { *records = external_records; *waits = external_waits; }
CUresult cuEventRecordWithFlags(P e, P s, unsigned f) {
    if (f > 1 || (f == 1 && !capturing(s))) return 1; /* external: in a capture only */
    if (f == 1) __atomic_add_fetch(&external_records, 1, __ATOMIC_RELAXED);
    return cuEventRecord(e, s);
}
CUresult cuEventQuery(P e) { return captured_event(e); }
CUresult cuEventSynchronize(P e) { return captured_event(e); }
CUresult cuEventElapsedTime(float *m, P a, P b) { (void)a; (void)b; *m = 1; return 0; }
CUresult cuIpcGetEventHandle(char *h, P e) { (void)e; memset(h, 0, 64); return 0; }
CUresult cuIpcOpenEventHandle(P *e, char h[64]) { (void)h; *e = calloc(1, 64); return 0; }
/* Device memory: addresses only, never touched by the host. */
static unsigned long long next_address = 1ull << 40;
CUresult cuMemAlloc_v2(unsigned long long *p, size_t size) {
    INJECT("cuMemAlloc_v2", OOM);
    if (size > (1ull << 40) || !take_shared(size)) return OOM; /* as a real device would */
    *p = __atomic_fetch_add(&next_address, (size + 4095) & ~4095ull, __ATOMIC_RELAXED);
    remember(*p, size);
    count(&live_device, (long)size);
    return 0;
}
CUresult cuMemFree_v2(unsigned long long p) {
    size_t size = forget(p);
    give_shared(size);
    count(&live_device, -(long)size);
    return 0;
}
/* IPC: a handle names the segment's address and the exporting process; another
 * process "maps" it at a fresh address of its own (no bytes are shared). */
typedef struct { char reserved[64]; } IpcMemHandle;
static long live_ipc_mappings;
long stub_ipc_mappings(void) { return __atomic_load_n(&live_ipc_mappings, __ATOMIC_RELAXED); }
static int is_segment(unsigned long long addr) {
    int i, found = 0;
    pthread_mutex_lock(&ranges_lock);
    for (i = 0; i < 4096 && !found; i++) found = ranges[i].addr == addr;
    pthread_mutex_unlock(&ranges_lock);
    return found;
}
/* The segments opened here from other processes, with their sizes (the handle's). */
static Range opened[256];
static size_t segment_size(unsigned long long addr) {
    size_t size = 0;
    int i;
    pthread_mutex_lock(&ranges_lock);
    for (i = 0; i < 4096; i++) if (ranges[i].addr == addr) size = ranges[i].size;
    pthread_mutex_unlock(&ranges_lock);
    return size;
}
CUresult cuIpcGetMemHandle(IpcMemHandle *h, unsigned long long p) {
    int pid = getpid();
    size_t size = segment_size(p);
    if (!is_segment(p)) return 1; /* CUDA_ERROR_INVALID_VALUE: not the base of a cuMemAlloc */
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, &p, sizeof p);
    memcpy(h->reserved + 8, &pid, sizeof pid);
    memcpy(h->reserved + 16, &size, sizeof size);
    return 0;
}
CUresult cuIpcOpenMemHandle_v2(unsigned long long *p, IpcMemHandle h, unsigned flags) {
    int pid, i;
    size_t size;
    (void)flags;
    memcpy(&pid, h.reserved + 8, sizeof pid);
    memcpy(&size, h.reserved + 16, sizeof size);
    if (pid == getpid()) return 201; /* CUDA_ERROR_INVALID_CONTEXT, as the driver answers its own process */
    *p = __atomic_fetch_add(&next_address, 1ull << 32, __ATOMIC_RELAXED);
    pthread_mutex_lock(&ranges_lock);
    for (i = 0; i < 256 && opened[i].addr != 0; i++) {}
    if (i < 256) { opened[i].addr = *p; opened[i].size = size; }
    pthread_mutex_unlock(&ranges_lock);
    count(&live_ipc_mappings, 1);
    return 0;
}
CUresult cuIpcCloseMemHandle(unsigned long long p) {
    int i;
    pthread_mutex_lock(&ranges_lock);
    for (i = 0; i < 256; i++) if (opened[i].addr == p) opened[i].addr = 0;
    pthread_mutex_unlock(&ranges_lock);
    count(&live_ipc_mappings, -1);
    return 0;
}
/* The allocation (a segment of this process, or one opened from another) holding p. */
CUresult cuMemGetAddressRange_v2(unsigned long long *base, size_t *size, unsigned long long p) {
    Range r;
    if (!lookup(ranges, 4096, &ranges_lock, p, &r) && !lookup(opened, 256, &ranges_lock, p, &r)) return 1; /* CUDA_ERROR_INVALID_VALUE */
    *base = r.addr;
    *size = r.size;
    return 0;
}
CUresult cuMemAllocManaged(unsigned long long *p, size_t size, unsigned flags) {
    if (flags != 1 && flags != 2) return 1; /* CUDA_ERROR_INVALID_VALUE */
    return cuMemAlloc_v2(p, size);
}
typedef struct { int type, id; } MemLocation;
CUresult cuMemPrefetchAsync_v2(unsigned long long p, size_t n, MemLocation l, unsigned f, P s) { (void)p; (void)n; (void)l; (void)f; (void)s; return 0; }
CUresult cuMemAdvise_v2(unsigned long long p, size_t n, int advice, MemLocation l) { (void)p; (void)n; (void)advice; (void)l; return 0; }
static int pool_storage;
CUresult cuDeviceGetDefaultMemPool(P *pool, int d) { (void)d; *pool = &pool_storage; return 0; }
CUresult cuDeviceGetMemPool(P *pool, int d) { return cuDeviceGetDefaultMemPool(pool, d); }
CUresult cuMemPoolSetAttribute(P pool, int a, void *v) { (void)pool; (void)a; (void)v; return 0; }
CUresult cuMemPoolTrimTo(P pool, size_t keep) { (void)pool; (void)keep; return 0; }
CUresult cuMemPoolGetAttribute(P pool, int a, void *v) { (void)pool; (void)a; *(unsigned long long *)v = 0; return 0; }
CUresult cuMemAllocFromPoolAsync(unsigned long long *p, size_t size, P pool, P s) { (void)pool; (void)s; return cuMemAlloc_v2(p, size); }
CUresult cuMemFreeAsync(unsigned long long p, P s) { (void)s; return cuMemFree_v2(p); }
CUresult cuMemHostAlloc(void **p, size_t size, unsigned flags) {
    (void)flags;
    INJECT("cuMemHostAlloc", OOM);
    *p = malloc(size);
    if (*p == NULL) return OOM;
    remember_kind((unsigned long long)*p, size, 1);
    count(&live_host, (long)size);
    return 0;
}
CUresult cuMemFreeHost(void *p) { count(&live_host, -(long)forget((unsigned long long)p)); free(p); return 0; }
CUresult cuMemHostGetDevicePointer_v2(unsigned long long *d, void *p, unsigned flags) { (void)flags; *d = (unsigned long long)p; return 0; }
/* The batch copy of CUDA 12.8's drivers (the entry point cudarc loads); copies nothing, as every copy here. */
CUresult cuMemcpyBatchAsync(unsigned long long *dsts, unsigned long long *srcs, size_t *sizes, size_t count, void *attrs, size_t *attr_idxs, size_t n_attrs, size_t *fail_idx, P stream) {
    (void)dsts; (void)srcs; (void)sizes; (void)attrs; (void)attr_idxs; (void)n_attrs; (void)stream;
    if (count == 0 || (uintptr_t)stream <= 2) return 1; /* CUDA_ERROR_INVALID_VALUE: the legacy and per-thread handles are refused */
    if (injected("cuMemcpyBatchAsync")) { *fail_idx = 0; return UNKNOWN; }
    __atomic_add_fetch(&batch_calls, 1, __ATOMIC_RELAXED);
    return 0;
}
CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned flags) {
    (void)flags;
    INJECT("cuMemHostRegister_v2", OOM);
    remember_kind((unsigned long long)(uintptr_t)p, size, 1);
    count(&live_host, (long)size);
    return 0;
}
CUresult cuMemHostUnregister(void *p) { count(&live_host, -(long)forget((unsigned long long)(uintptr_t)p)); return 0; }
/* Copies and memsets are accepted and dropped: device addresses here are fake. */
CUresult cuMemcpyAsync(unsigned long long d, unsigned long long s, size_t n, P st) { (void)d; (void)s; (void)n; (void)st; INJECT("cuMemcpyAsync", UNKNOWN); return 0; }
CUresult cuMemcpyPeerAsync(unsigned long long d, P dc, unsigned long long s, P sc, size_t n, P st) { (void)d; (void)dc; (void)s; (void)sc; (void)n; (void)st; return 0; }
CUresult cuMemcpy2DAsync_v2(const void *params, P st) { (void)params; (void)st; return 0; }
CUresult cuMemsetD8Async(unsigned long long d, unsigned char v, size_t n, P st) { (void)d; (void)v; (void)n; (void)st; return 0; }
CUresult cuMemsetD16Async(unsigned long long d, unsigned short v, size_t n, P st) { (void)d; (void)v; (void)n; (void)st; return 0; }
CUresult cuMemsetD32Async(unsigned long long d, unsigned v, size_t n, P st) { (void)d; (void)v; (void)n; (void)st; return 0; }
CUresult cuMemcpyHtoDAsync_v2(unsigned long long d, const void *s, size_t n, P st) { (void)d; (void)s; (void)n; (void)st; INJECT("cuMemcpyHtoDAsync_v2", UNKNOWN); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void *d, unsigned long long s, size_t n, P st) { (void)d; (void)s; (void)n; (void)st; INJECT("cuMemcpyDtoHAsync_v2", UNKNOWN); return 0; }
/* Every pointer is unknown to the fake driver: host memory, as for pageable memory. */
/* Memory type (2: device) and device ordinal (0) of a live cuMemAlloc block; for
 * any other address, an error (not memory the driver knows). */
static int in_device_block(unsigned long long p) { return lookup(ranges, 4096, &ranges_lock, p, NULL); }
static int is_mapped(unsigned long long p);
/* Several attributes at once (memory type 2, device pointer 3, managed 8, ordinal 9,
 * range start 11, range size 12): cuMemAlloc blocks and mappings are device 0's, pinned
 * host memory is mapped at its own address, other memory gets zeros, as the driver answers. */
static int find_range(unsigned long long p, Range *out);
CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, unsigned long long p) {
    Range r = {0, 0, 0};
    int found = find_range(p, &r);
    unsigned i;
    for (i = 0; i < n; i++) {
        switch (attrs[i]) {
        case 2: *(unsigned *)data[i] = found ? (r.host ? 1u : 2u) : 0u; break;
        case 3: *(unsigned long long *)data[i] = found ? p : 0; break;
        case 8: *(unsigned *)data[i] = 0; break;
        case 9: *(int *)data[i] = found && !r.host ? 0 : -2; break;
        case 11: *(unsigned long long *)data[i] = r.addr; break;
        case 12: *(size_t *)data[i] = r.size; break;
        default: return 1;
        }
    }
    return 0;
}
/* Device memory is a cuMemAlloc block or a cuMemMap mapping (expandable segments). */
CUresult cuPointerGetAttribute(void *v, int a, unsigned long long p) {
    if (!in_device_block(p) && !is_mapped(p)) return 1;
    if (a == 2) *(unsigned *)v = 2;      /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE: device */
    else if (a == 9) *(int *)v = 0;      /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
    else return 1;
    return 0;
}

CUresult cuModuleLoadDataEx(P *m, const void *image, unsigned n, int *o, void **v) { (void)image; (void)n; (void)o; (void)v; INJECT("cuModuleLoadDataEx", UNKNOWN); *m = malloc(16); return 0; }
CUresult cuModuleUnload(P m) { free(m); return 0; }
/* Any kernel name but "missing" exists. */
void stub_batch_counts(long *kernel_launches, long *driver_batches) {
    *kernel_launches = __atomic_load_n(&batch_kernel_launches, __ATOMIC_RELAXED);
    *driver_batches = __atomic_load_n(&batch_calls, __ATOMIC_RELAXED);
}
CUresult cuModuleGetFunction(P *f, P m, const char *name) {
    *f = (char *)m + 1;
    if (strcmp(name, "gpurt_copy_batch") == 0) batch_kernel = *f;
    return strcmp(name, "missing") == 0 ? 500 : 0;
}
CUresult cuFuncGetAttribute(int *v, int a, P f) { (void)a; (void)f; *v = 32; return 0; }
CUresult cuFuncSetAttribute(P f, int a, int v) { (void)f; (void)a; (void)v; return 0; }
CUresult cuLaunchKernel(P f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned sh, P s, void **args, void **extra) {
    if (f != NULL && f == batch_kernel) __atomic_add_fetch(&batch_kernel_launches, 1, __ATOMIC_RELAXED);
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)sh; (void)s; (void)args; (void)extra; return 0;
}
/* cuLaunchKernelEx: the config's attributes must be ones gpurt sets, with valid
 * values (cluster dimensions >= 1; programmatic stream serialization 0 or 1). */
typedef struct { int id; char pad[4]; union { char bytes[64]; struct { unsigned x, y, z; } cluster; int serialization; } value; } StubLaunchAttribute;
typedef struct { unsigned gx, gy, gz, bx, by, bz, shared; P stream; StubLaunchAttribute *attrs; unsigned count; } StubLaunchConfig;
CUresult cuLaunchKernelEx(const StubLaunchConfig *c, P f, void **args, void **extra) {
    (void)f; (void)args; (void)extra;
    INJECT("cuLaunchKernelEx", UNKNOWN);
    if (!c || (c->count && !c->attrs)) return 1;
    for (unsigned i = 0; i < c->count; i++) {
        const StubLaunchAttribute *a = &c->attrs[i];
        if (a->id == 4 && a->value.cluster.x && a->value.cluster.y && a->value.cluster.z) continue; /* cluster dimension */
        if (a->id == 6 && (a->value.serialization == 0 || a->value.serialization == 1)) continue; /* programmatic serialization */
        return 1;
    }
    return 0;
}
/* Graphs and user objects: a graph (or exec) holds references to user objects, as
 * the driver's do; an exec takes its graph's at instantiation, and the last reference
 * gone runs the object's destructor as the driver runs it: later, on a thread of its
 * own (CU_USER_OBJECT_NO_DESTRUCTOR_SYNC: nothing waits for it), here after 1 ms.
 * stub_user_objects counts the objects whose destructor is not yet due. */
typedef struct { void (*destroy)(void *); void *payload; long refs; } StubUserObject;
#define GRAPH_OBJECTS 16
typedef struct { StubUserObject *objects[GRAPH_OBJECTS]; unsigned counts[GRAPH_OBJECTS]; } StubGraph;
static long live_user_objects;
long stub_user_objects(void) { return __atomic_load_n(&live_user_objects, __ATOMIC_RELAXED); }
static P new_graph(void) { return calloc(1, sizeof(StubGraph)); }
static void *user_object_destroy(void *object) {
    StubUserObject *o = object;
    const struct timespec later = {0, 1000000};
    nanosleep(&later, NULL);
    o->destroy(o->payload);
    free(o);
    return NULL;
}
static void user_object_release(StubUserObject *o, unsigned n) {
    pthread_t thread;
    pthread_attr_t detached;
    if (__atomic_sub_fetch(&o->refs, (long)n, __ATOMIC_ACQ_REL) != 0) return;
    count(&live_user_objects, -1);
    pthread_attr_init(&detached);
    pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &detached, user_object_destroy, o) != 0) user_object_destroy(o);
    pthread_attr_destroy(&detached);
}
static void graph_free(P g) {
    StubGraph *graph = g;
    for (int i = 0; graph && i < GRAPH_OBJECTS; i++)
        if (graph->objects[i]) user_object_release(graph->objects[i], graph->counts[i]);
    free(g);
}
CUresult cuUserObjectCreate(P *out, P payload, void (*destroy)(void *), unsigned refs, unsigned flags) {
    INJECT("cuUserObjectCreate", UNKNOWN);
    if (!out || !destroy || refs == 0 || flags != 1 /* CU_USER_OBJECT_NO_DESTRUCTOR_SYNC */) return 1;
    StubUserObject *o = malloc(sizeof *o);
    o->destroy = destroy; o->payload = payload; o->refs = refs;
    count(&live_user_objects, 1);
    *out = o;
    return 0;
}
CUresult cuUserObjectRelease(P o, unsigned n) { if (!o || n == 0) return 1; user_object_release(o, n); return 0; }
CUresult cuGraphRetainUserObject(P g, P o, unsigned n, unsigned flags) {
    StubGraph *graph = g;
    INJECT("cuGraphRetainUserObject", UNKNOWN);
    if (!graph || !o || n == 0 || flags > 1) return 1;
    for (int i = 0; i < GRAPH_OBJECTS; i++) {
        if (graph->objects[i] && graph->objects[i] != o) continue;
        graph->objects[i] = o;
        graph->counts[i] += n;
        if (flags == 0) __atomic_add_fetch(&((StubUserObject *)o)->refs, (long)n, __ATOMIC_RELAXED); /* else the caller's move */
        return 0;
    }
    return 2;
}
/* A stream's first bytes: whether it captures (1: active, 2: invalidated, as
 * CUstreamCaptureStatus), the capture's id and its graph, its creation flags. */
typedef struct { int capturing; unsigned long long id; P graph; unsigned flags; int owns_graph; } StubCapture;
static void created_with_flags(P s, unsigned f) { ((StubCapture *)s)->flags = f; }
static unsigned long long next_capture_id = 1;
/* The streams capturing now, for what invalidates their captures. */
static P capture_streams[256];
static int capture_stream_count;
static pthread_mutex_t capture_streams_lock = PTHREAD_MUTEX_INITIALIZER;
static void start_capture(P s, P graph, int owns_graph) {
    StubCapture *c = s;
    c->capturing = 1;
    c->owns_graph = owns_graph;
    c->id = __atomic_fetch_add(&next_capture_id, 1, __ATOMIC_RELAXED);
    c->graph = graph;
    pthread_mutex_lock(&capture_streams_lock);
    if (capture_stream_count < 256) capture_streams[capture_stream_count++] = s;
    pthread_mutex_unlock(&capture_streams_lock);
}
static void end_capture(P s) {
    pthread_mutex_lock(&capture_streams_lock);
    for (int i = 0; i < capture_stream_count; i++)
        if (capture_streams[i] == s) capture_streams[i] = capture_streams[--capture_stream_count];
    pthread_mutex_unlock(&capture_streams_lock);
    ((StubCapture *)s)->capturing = 0;
}
/* Whether a blocking stream (flags 0) captures: the legacy stream synchronises with it. */
static int blocking_captures_active(void) {
    int any = 0;
    pthread_mutex_lock(&capture_streams_lock);
    for (int i = 0; i < capture_stream_count; i++) any |= ((StubCapture *)capture_streams[i])->flags == 0;
    pthread_mutex_unlock(&capture_streams_lock);
    return any;
}
/* Invalidates the capture on `only` (NULL: every capture): whether any was active. */
static int invalidate_captures(P only) {
    int any = 0;
    pthread_mutex_lock(&capture_streams_lock);
    for (int i = 0; i < capture_stream_count; i++) {
        StubCapture *c = capture_streams[i];
        if ((only == NULL || only == capture_streams[i]) && c->capturing == 1) {
            c->capturing = 2;
            any = 1;
        }
    }
    pthread_mutex_unlock(&capture_streams_lock);
    return any;
}
CUresult cuStreamBeginCapture_v2(P s, int mode) {
    (void)mode; INJECT("cuStreamBeginCapture_v2", UNKNOWN);
    if ((unsigned long)s <= 4096 || capturing(s)) return 1;
    start_capture(s, new_graph(), 1);
    return 0;
}
/* An invalidated capture ends without a graph (the driver destroys one it made, and
 * with it its user objects' references): CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. */
static void graph_free(P g);
CUresult cuStreamEndCapture(P s, P *g) {
    if (!capturing(s)) return 1;
    int invalidated = capturing(s) == 2;
    end_capture(s);
    *g = ((StubCapture *)s)->graph;
    if (!invalidated) return 0;
    if (((StubCapture *)s)->owns_graph) graph_free(*g);
    *g = NULL;
    return 901;
}
static void capture_info(P s, int *status, unsigned long long *id, P *g) {
    *status = capturing(s);
    if (id) *id = *status ? ((StubCapture *)s)->id : 0;
    if (g) *g = *status ? ((StubCapture *)s)->graph : NULL;
}
/* The per-thread stream is the current context's: asked about without one, the
 * driver answers CUDA_ERROR_INVALID_CONTEXT. */
#define PER_THREAD_WITHOUT_CONTEXT(s) ((unsigned long)(s) == 2 && current == NULL)
CUresult cuStreamGetCaptureInfo_v2(P s, int *status, unsigned long long *id, P *g, P *deps, size_t *n) {
    if (PER_THREAD_WITHOUT_CONTEXT(s)) return 201;
    if (deps) *deps = NULL;
    if (n) *n = 0;
    capture_info(s, status, id, g);
    return 0;
}
CUresult cuThreadExchangeStreamCaptureMode(int *mode) { (void)mode; return 0; }
CUresult cuGraphInstantiateWithFlags(P *e, P g, unsigned long long f) {
    StubGraph *graph = g, *exec;
    (void)f; INJECT("cuGraphInstantiateWithFlags", UNKNOWN);
    if (!graph) return 1;
    exec = new_graph();
    for (int i = 0; i < GRAPH_OBJECTS; i++) {
        if (!graph->objects[i]) continue;
        exec->objects[i] = graph->objects[i];
        exec->counts[i] = graph->counts[i];
        __atomic_add_fetch(&graph->objects[i]->refs, (long)graph->counts[i], __ATOMIC_RELAXED);
    }
    *e = exec;
    return 0;
}
CUresult cuGraphUpload(P e, P s) { (void)e; (void)s; return 0; }
CUresult cuGraphLaunch(P e, P s) { (void)e; (void)s; INJECT("cuGraphLaunch", UNKNOWN); return 0; }
CUresult cuGraphDestroy(P g) { if (!g) return 1; graph_free(g); return 0; }
CUresult cuGraphExecDestroy(P e) { if (!e) return 1; graph_free(e); return 0; }
CUresult cuGraphDebugDotPrint(P g, const char *path, unsigned f) { (void)g; (void)path; (void)f; return 0; }
/* Virtual memory: reservations are fake address ranges (the stub's copies touch no device memory). */
static unsigned long long next_reservation = 1ull << 45;
CUresult cuMemAddressReserve(unsigned long long *p, size_t size, size_t align, unsigned long long addr, unsigned long long f) {
    (void)align; (void)addr; (void)f; INJECT("cuMemAddressReserve", OOM);
    *p = __atomic_fetch_add(&next_reservation, size + (1ull << 30), __ATOMIC_RELAXED); /* threads reserve at once */
    return 0;
}
CUresult cuMemAddressFree(unsigned long long p, size_t size) { (void)p; (void)size; return 0; }
/* Physical allocations, as the driver keeps them: each is freed (given back to a
 * shared device) once its handle is released and no mapping uses it. */
typedef struct { size_t size; int refs; } Handle;
static Handle handles[16384];
static unsigned long long map_handles[16384]; /* the handle each of `maps` maps */
static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
static void drop_handle(unsigned long long h) { /* maps_lock held */
    if (h >= 1 && h <= 16384 && handles[h - 1].refs > 0 && --handles[h - 1].refs == 0) give_shared(handles[h - 1].size);
}
/* A new handle of `size` bytes (taken already), or 0 where the table is full. */
static unsigned long long new_handle(size_t size) {
    int i;
    pthread_mutex_lock(&maps_lock);
    for (i = 0; i < 16384 && handles[i].refs != 0; i++) {}
    if (i < 16384) { handles[i].size = size; handles[i].refs = 1; }
    pthread_mutex_unlock(&maps_lock);
    return i < 16384 ? (unsigned long long)i + 1 : 0;
}
CUresult cuMemCreate(unsigned long long *h, size_t size, const void *prop, unsigned long long f) {
    (void)prop; (void)f;
    INJECT("cuMemCreate", OOM);
    if (size == 0 || !take_shared(size)) return OOM;
    if ((*h = new_handle(size)) == 0) { give_shared(size); return OOM; }
    return 0;
}
CUresult cuMemRelease(unsigned long long h) {
    pthread_mutex_lock(&maps_lock);
    drop_handle(h);
    pthread_mutex_unlock(&maps_lock);
    return 0;
}
/* Mappings, as the driver keeps them: none over another, each unmapped whole. */
static Range maps[16384];
CUresult cuMemMap(unsigned long long p, size_t size, size_t off, unsigned long long h, unsigned long long f) {
    int i, free_slot = -1;
    CUresult r = 0;
    (void)off; (void)f;
    INJECT("cuMemMap", UNKNOWN);
    pthread_mutex_lock(&maps_lock);
    for (i = 0; i < 16384; i++) {
        if (maps[i].size == 0) { if (free_slot < 0) free_slot = i; continue; }
        if (p < maps[i].addr + maps[i].size && maps[i].addr < p + size) r = 1; /* CUDA_ERROR_INVALID_VALUE: mapped already */
    }
    if (h < 1 || h > 16384 || handles[h - 1].refs == 0) r = 400; /* CUDA_ERROR_INVALID_HANDLE */
    if (r == 0 && free_slot >= 0) {
        maps[free_slot].addr = p; maps[free_slot].size = size; map_handles[free_slot] = h;
        handles[h - 1].refs++;
        count(&live_device, (long)size);
    }
    pthread_mutex_unlock(&maps_lock);
    return free_slot < 0 ? 2 : r;
}
CUresult cuMemUnmap(unsigned long long p, size_t size) {
    int i;
    CUresult r = 1; /* CUDA_ERROR_INVALID_VALUE: not one whole mapping (the driver cannot unmap part of one) */
    INJECT("cuMemUnmap", UNKNOWN);
    pthread_mutex_lock(&maps_lock);
    for (i = 0; i < 16384; i++) {
        if (maps[i].size != 0 && maps[i].addr == p && maps[i].size == size) {
            maps[i].size = 0; r = 0; count(&live_device, -(long)size);
            drop_handle(map_handles[i]);
            break;
        }
    }
    pthread_mutex_unlock(&maps_lock);
    return r;
}
/* A cuMemAlloc block or host allocation, else a mapping (never host), holding p. */
static int find_range(unsigned long long p, Range *out) {
    return lookup(ranges, 4096, &ranges_lock, p, out) || lookup(maps, 16384, &maps_lock, p, out);
}
CUresult cuMemSetAccess(unsigned long long p, size_t size, const void *desc, size_t n) { (void)p; (void)size; (void)desc; (void)n; INJECT("cuMemSetAccess", OOM); return 0; }
CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int option) { (void)prop; (void)option; *g = 2u << 20; return 0; }
/* Shareable physical memory (expandable segments' IPC): an export is a real
 * descriptor (of /dev/null), so that the consumer's pidfd_getfd runs for real; an
 * import checks that it was given an open descriptor. Only the POSIX-descriptor
 * handle type (1) is offered. */
static int is_mapped(unsigned long long p) { return lookup(maps, 16384, &maps_lock, p, NULL); }
CUresult cuMemRetainAllocationHandle(unsigned long long *h, void *addr) {
    unsigned long long p = (unsigned long long)(uintptr_t)addr;
    int i;
    CUresult r = 1; /* CUDA_ERROR_INVALID_VALUE: not mapped */
    pthread_mutex_lock(&maps_lock);
    for (i = 0; i < 16384 && r != 0; i++) {
        if (maps[i].size != 0 && maps[i].addr <= p && p < maps[i].addr + maps[i].size) {
            *h = map_handles[i];
            handles[*h - 1].refs++;
            r = 0;
        }
    }
    pthread_mutex_unlock(&maps_lock);
    return r;
}
/* A shareable allocation is a memfd of the stub's name; the import refuses any other
 * descriptor, as the driver refuses descriptors that are not its own. */
CUresult cuMemExportToShareableHandle(void *out, unsigned long long h, int type, unsigned long long f) {
    int fd;
    (void)h; (void)f;
    INJECT("cuMemExportToShareableHandle", UNKNOWN);
    if (type != 1) return 1;
    fd = (int)syscall(SYS_memfd_create, "stub-cuda-allocation", 1u /* MFD_CLOEXEC */);
    if (fd < 0) return 2;
    *(int *)out = fd;
    return 0;
}
CUresult cuMemImportFromShareableHandle(unsigned long long *h, void *os_handle, int type) {
    char link[64], target[256];
    ssize_t n;
    snprintf(link, sizeof link, "/proc/self/fd/%d", (int)(intptr_t)os_handle);
    n = readlink(link, target, sizeof target - 1);
    if (type != 1 || n < 0) return 1;
    target[n] = 0;
    if (strstr(target, "memfd:stub-cuda-allocation") == NULL) return 1; /* CUDA_ERROR_INVALID_VALUE */
    *h = new_handle(0); /* the exporter's memory: nothing taken here */
    return *h ? 0 : 2;
}
/* Green contexts: 132 SMs split in groups of 8 (as an H100 SXM); a green context's
 * streams count as streams. A resource is the driver's 144-byte struct: its type,
 * then the SM count at byte 96; the stub marks a split's outputs (first padding byte),
 * which the driver refuses to split again (a green context's resource it splits). */
typedef struct { int type; unsigned char pad[92]; unsigned sm_count; unsigned char rest[44]; } DevResource;
static long live_green_contexts;
long stub_green_contexts(void) { return __atomic_load_n(&live_green_contexts, __ATOMIC_RELAXED); }
CUresult cuDeviceGetDevResource(int d, DevResource *r, int type) {
    (void)d;
    if (type != 1) return 1;
    memset(r, 0, sizeof *r);
    r->type = 1;
    r->sm_count = 132;
    return 0;
}
CUresult cuDevSmResourceSplitByCount(DevResource *result, unsigned *groups, const DevResource *in, DevResource *rest, unsigned f, unsigned min) {
    unsigned size = (min + 7) / 8 * 8, fit = size ? in->sm_count / size : 0;
    (void)f;
    if (in->pad[0]) return 1; /* a split's output: CUDA_ERROR_INVALID_VALUE */
    if (*groups > fit) *groups = fit;
    for (unsigned i = 0; i < *groups; i++) { result[i] = *in; result[i].sm_count = size; result[i].pad[0] = 1; }
    if (rest) { *rest = *in; rest->sm_count = in->sm_count - *groups * size; rest->pad[0] = 1; }
    return 0;
}
CUresult cuDevResourceGenerateDesc(P *desc, DevResource *r, unsigned n) { (void)n; *desc = r; return 0; }
CUresult cuGreenCtxCreate(P *g, P desc, int d, unsigned f) {
    (void)desc; (void)d;
    INJECT("cuGreenCtxCreate", UNKNOWN);
    if (f != 1) return 1; /* CU_GREEN_CTX_DEFAULT_STREAM is required */
    *g = malloc(sizeof(DevResource));
    memcpy(*g, desc, sizeof(DevResource)); /* the stub's descriptor is the resource */
    count(&live_green_contexts, 1);
    return 0;
}
CUresult cuGreenCtxGetDevResource(P g, DevResource *r, int type) {
    if (type != 1) return 1;
    *r = *(DevResource *)g;
    r->pad[0] = 0; /* a context's resource splits */
    return 0;
}
CUresult cuGreenCtxDestroy(P g) { free(g); count(&live_green_contexts, -1); return 0; }
CUresult cuGreenCtxStreamCreate(P *s, P g, unsigned f, int p) {
    (void)g; (void)p;
    if (!(f & 1)) return 1; /* CU_STREAM_NON_BLOCKING is required */
    return cuStreamCreateWithPriority(s, f, p);
}
/* Conditional nodes: a node's bodies are graphs the stub makes (kept till exit); a
 * body's capture goes on the stream like any other. CUgraphNodeParams: the type at
 * byte 0, the conditional parameters from byte 16 (handle, type, size, bodies, ctx). */
typedef struct { unsigned long long handle; unsigned type, size; P *bodies; P ctx; } StubConditional;
static P stub_bodies[4096];
static int stub_body_count;
static pthread_mutex_t bodies_lock = PTHREAD_MUTEX_INITIALIZER;
CUresult cuStreamGetCaptureInfo_v3(P s, int *status, unsigned long long *id, P *g, P *deps, P *edges, size_t *n) {
    if (PER_THREAD_WITHOUT_CONTEXT(s)) return 201;
    capture_info(s, status, id, g);
    if (deps) *deps = NULL;
    if (edges) *edges = NULL;
    if (n) *n = 0;
    return 0;
}
CUresult cuGraphConditionalHandleCreate(unsigned long long *h, P g, P ctx, unsigned value, unsigned flags) {
    static unsigned long long next_handle = 1;
    (void)g; (void)ctx; (void)value;
    if (flags > 1) return 1;
    *h = __atomic_fetch_add(&next_handle, 1, __ATOMIC_RELAXED);
    return 0;
}
CUresult cuGraphAddNode_v2(P *node, P g, const P *deps, const P *edges, size_t n, unsigned char *params) {
    StubConditional *c = (StubConditional *)(params + 16);
    (void)g; (void)deps; (void)edges; (void)n;
    INJECT("cuGraphAddNode_v2", UNKNOWN);
    if (*(int *)params != 13 || c->type > 2 || c->size == 0) return 1; /* conditional nodes only */
    pthread_mutex_lock(&bodies_lock);
    if (stub_body_count + (int)c->size > 4096) { pthread_mutex_unlock(&bodies_lock); return 2; }
    c->bodies = &stub_bodies[stub_body_count];
    for (unsigned i = 0; i < c->size; i++) stub_bodies[stub_body_count++] = new_graph();
    pthread_mutex_unlock(&bodies_lock);
    *node = malloc(16);
    return 0;
}
CUresult cuStreamUpdateCaptureDependencies_v2(P s, P *deps, const P *edges, size_t n, unsigned f) {
    (void)deps; (void)edges; (void)n;
    return capturing(s) && f <= 1 ? 0 : 1;
}
CUresult cuStreamBeginCaptureToGraph(P s, P g, const P *deps, const P *edges, size_t n, int mode) {
    (void)g; (void)deps; (void)edges; (void)n; (void)mode;
    INJECT("cuStreamBeginCaptureToGraph", UNKNOWN);
    if ((unsigned long)s <= 4096 || capturing(s)) return 1;
    start_capture(s, g, 0);
    return 0;
}
