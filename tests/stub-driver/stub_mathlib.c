/* Stand-in cuBLAS and cuBLASLt (built as libcublas.so.13 and libcublasLt.so.13
 * beside the stand-in libcuda): a handle records what is set on it, so that tests
 * check what gpurt binds, and entry points fail on request. Like the real library,
 * cublasSetStream resets the workspace to cuBLAS's own. gpurt destroys handles only
 * when told to give them back (gpurt_blas_handles_release).
 *
 * stub_math_state(handle, &stream, &workspace, &size, &math_mode): what is set
 * (1 for a live handle, 0 otherwise); stub_math_created(): handles created so far;
 * stub_math_live(): handles created and not destroyed;
 * stub_math_fail_nth(name, n): the n-th call of `name` from now on fails
 * (CUBLAS_STATUS_ALLOC_FAILED for cublasCreate_v2 and cublasLtCreate, else
 * CUBLAS_STATUS_INTERNAL_ERROR). No GEMM runs here: the GPU suite checks data.
 * Like the real libraries, a handle takes device memory of its own from the driver
 * (1 MiB here, given back when it is destroyed): gpurt sees it only as the drop in
 * the driver's free memory. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define HANDLE_DEVICE_BYTES (1u << 20)

#define MAGIC 0x5eedb1a5
typedef struct { int magic; void *stream; void *workspace; size_t size; int math_mode; unsigned long long memory; } Handle;

static long created, destroyed;
static const char *fail_name;
static long fail_at, fail_calls;
void stub_math_fail_nth(const char *name, long n) { fail_name = name; fail_at = n; fail_calls = 0; }
long stub_math_created(void) { return __atomic_load_n(&created, __ATOMIC_RELAXED); }
long stub_math_live(void) { return __atomic_load_n(&created, __ATOMIC_RELAXED) - __atomic_load_n(&destroyed, __ATOMIC_RELAXED); }
static int injected(const char *name) {
    if (__builtin_expect(fail_name == NULL, 1) || strcmp(name, fail_name) != 0) return 0;
    return __atomic_add_fetch(&fail_calls, 1, __ATOMIC_RELAXED) == fail_at;
}
#define ALLOC_FAILED 3
#define INVALID_VALUE 7
#define INTERNAL_ERROR 14
static Handle *live(void *h) { return h != NULL && ((Handle *)h)->magic == MAGIC ? (Handle *)h : NULL; }

int stub_math_state(void *h, void **stream, void **workspace, size_t *size, int *math_mode) {
    Handle *handle = live(h);
    if (!handle) return 0;
    *stream = handle->stream; *workspace = handle->workspace; *size = handle->size; *math_mode = handle->math_mode;
    return 1;
}

/* The handle's own device memory, from (and back to) the stand-in libcuda gpurt loaded. */
static void *driver_call(const char *name) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), *f = cuda ? dlsym(cuda, name) : NULL;
    return f;
}
static int take_device_memory(unsigned long long *p) {
    int (*alloc)(unsigned long long *, size_t) = NULL;
    *(void **)(&alloc) = driver_call("cuMemAlloc_v2"); /* POSIX: function pointers from dlsym */
    return alloc != NULL && alloc(p, HANDLE_DEVICE_BYTES) == 0;
}

static int create(const char *name, void **out) {
    Handle *h;
    unsigned long long memory;
    if (out == NULL) return INVALID_VALUE;
    if (injected(name) || !take_device_memory(&memory)) return ALLOC_FAILED;
    h = calloc(1, sizeof *h);
    h->magic = MAGIC;
    h->memory = memory;
    __atomic_add_fetch(&created, 1, __ATOMIC_RELAXED);
    *out = h;
    return 0;
}

static int destroy(const char *name, void *h) {
    Handle *handle = live(h);
    int (*free_memory)(unsigned long long) = NULL;
    if (!handle) return INVALID_VALUE;
    if (injected(name)) return INTERNAL_ERROR;
    *(void **)(&free_memory) = driver_call("cuMemFree_v2");
    if (free_memory) free_memory(handle->memory);
    handle->magic = 0;
    free(handle);
    __atomic_add_fetch(&destroyed, 1, __ATOMIC_RELAXED);
    return 0;
}

/* cuBLAS */
int cublasCreate_v2(void **h) { return create("cublasCreate_v2", h); }
int cublasDestroy_v2(void *h) { return destroy("cublasDestroy_v2", h); }
int cublasSetStream_v2(void *h, void *stream) {
    Handle *handle = live(h);
    if (!handle) return INVALID_VALUE;
    if (injected("cublasSetStream_v2")) return INTERNAL_ERROR;
    handle->stream = stream;
    handle->workspace = NULL; /* cuBLAS's own workspace again */
    handle->size = 0;
    return 0;
}
int cublasSetWorkspace_v2(void *h, void *workspace, size_t size) {
    Handle *handle = live(h);
    if (!handle) return INVALID_VALUE;
    if (injected("cublasSetWorkspace_v2")) return INTERNAL_ERROR;
    if (((unsigned long long)workspace & 255) != 0) return INVALID_VALUE; /* cuBLAS wants 256-byte alignment */
    handle->workspace = workspace;
    handle->size = size;
    return 0;
}
int cublasSetMathMode(void *h, int mode) {
    Handle *handle = live(h);
    if (!handle) return INVALID_VALUE;
    if (injected("cublasSetMathMode")) return INTERNAL_ERROR;
    handle->math_mode = mode;
    return 0;
}
int cublasGetMathMode(void *h, int *mode) {
    Handle *handle = live(h);
    if (!handle || mode == NULL) return INVALID_VALUE;
    *mode = handle->math_mode;
    return 0;
}
int cublasGetProperty(int type, int *value) { *value = type == 0 ? 13 : 0; return 0; }

/* cuBLASLt */
int cublasLtCreate(void **h) { return create("cublasLtCreate", h); }
int cublasLtDestroy(void *h) { return destroy("cublasLtDestroy", h); }
size_t cublasLtGetVersion(void) { return 130000; }
