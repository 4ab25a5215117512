/* An NVTX tool for the tests: loaded through NVTX_INJECTION64_PATH as Nsight's are,
 * it takes the core and domain calls and writes one line per call to the file named
 * by GPURT_NVTX_RECORD, keeping a push/pop depth per thread as a real tool does. */
#include "nvtx3/nvToolsExt.h"

#include <stdio.h>
#include <stdlib.h>

static FILE *out;
static __thread int depth;
static int domains;

static void line(const char *what, nvtxDomainHandle_t domain, const nvtxEventAttributes_t *a) {
    if (!out) return;
    fprintf(out, "%s domain=%ld", what, (long)(size_t)domain);
    if (a)
        fprintf(out, " message=%s color=%#x category=%u", a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "?",
                a->colorType == NVTX_COLOR_ARGB ? a->color : 0u, a->category);
    fprintf(out, "\n");
    fflush(out);
}

static void mark(const nvtxEventAttributes_t *a) { line("mark", 0, a); }
static int push(const nvtxEventAttributes_t *a) { line("push", 0, a); return depth++; }
static int pop(void) { line("pop", 0, NULL); return --depth; }
static nvtxRangeId_t start(const nvtxEventAttributes_t *a) { static nvtxRangeId_t next = 100; line("start", 0, a); return next++; }
static void end(nvtxRangeId_t id) { if (out) fprintf(out, "end domain=0 id=%llu\n", (unsigned long long)id); }
static void name_category(uint32_t c, const char *name) { if (out) fprintf(out, "category domain=0 %u=%s\n", c, name); }

static nvtxDomainHandle_t domain_create(const char *name) {
    if (out) fprintf(out, "domain_create %s -> %d\n", name, domains + 1);
    return (nvtxDomainHandle_t)(size_t)++domains;
}
static void domain_destroy(nvtxDomainHandle_t d) { if (out) fprintf(out, "domain_destroy %ld\n", (long)(size_t)d); }
static void domain_mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { line("mark", d, a); }
static int domain_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { line("push", d, a); return depth++; }
static int domain_pop(nvtxDomainHandle_t d) { line("pop", d, NULL); return --depth; }
static nvtxRangeId_t domain_start(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { line("start", d, a); return 200; }
static void domain_end(nvtxDomainHandle_t d, nvtxRangeId_t id) { if (out) fprintf(out, "end domain=%ld id=%llu\n", (long)(size_t)d, (unsigned long long)id); }
static void domain_category(nvtxDomainHandle_t d, uint32_t c, const char *name) { if (out) fprintf(out, "category domain=%ld %u=%s\n", (long)(size_t)d, c, name); }

static int take(const NvtxExportTableCallbacks *callbacks, NvtxCallbackModule module, const unsigned *ids, NvtxFunctionPointer *fns, int n) {
    NvtxFunctionTable table = 0;
    unsigned size = 0;
    int i;
    if (!callbacks->GetModuleFunctionTable(module, &table, &size) || !table) return 0;
    for (i = 0; i < n; i++) {
        if (ids[i] >= size) return 0;
        *table[ids[i]] = fns[i];
    }
    return 1;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
    const NvtxExportTableCallbacks *callbacks = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
    const char *path = getenv("GPURT_NVTX_RECORD");
    unsigned core[] = {NVTX_CBID_CORE_MarkEx, NVTX_CBID_CORE_RangePushEx, NVTX_CBID_CORE_RangePop, NVTX_CBID_CORE_RangeStartEx,
                       NVTX_CBID_CORE_RangeEnd, NVTX_CBID_CORE_NameCategoryA};
    NvtxFunctionPointer core_fns[] = {(NvtxFunctionPointer)mark, (NvtxFunctionPointer)push, (NvtxFunctionPointer)pop,
                                      (NvtxFunctionPointer)start, (NvtxFunctionPointer)end, (NvtxFunctionPointer)name_category};
    unsigned core2[] = {NVTX_CBID_CORE2_DomainCreateA, NVTX_CBID_CORE2_DomainDestroy, NVTX_CBID_CORE2_DomainMarkEx,
                        NVTX_CBID_CORE2_DomainRangePushEx, NVTX_CBID_CORE2_DomainRangePop, NVTX_CBID_CORE2_DomainRangeStartEx,
                        NVTX_CBID_CORE2_DomainRangeEnd, NVTX_CBID_CORE2_DomainNameCategoryA};
    NvtxFunctionPointer core2_fns[] = {(NvtxFunctionPointer)domain_create, (NvtxFunctionPointer)domain_destroy,
                                       (NvtxFunctionPointer)domain_mark, (NvtxFunctionPointer)domain_push,
                                       (NvtxFunctionPointer)domain_pop, (NvtxFunctionPointer)domain_start,
                                       (NvtxFunctionPointer)domain_end, (NvtxFunctionPointer)domain_category};
    out = path ? fopen(path, "w") : NULL;
    if (out) setvbuf(out, NULL, _IOLBF, 0); /* each line reaches the file as it is written */
    if (!callbacks || callbacks->struct_size < sizeof *callbacks) return 0;
    return take(callbacks, NVTX_CB_MODULE_CORE, core, core_fns, 6) && take(callbacks, NVTX_CB_MODULE_CORE2, core2, core2_fns, 8);
}
