/* NVTX v3's implementation (its header-only C code), behind plain functions that
 * gpurt's Rust side calls: NULL domain = NVTX's default domain, colour 0 = none. */
#include "nvtx3/nvToolsExt.h"

/* Whether NVTX would call a tool for `name` (before NVTX's first call, its init
 * stub is there: yes). The same pointer NVTX's own function reads first: with no
 * tool, the attributes are not even built. */
#define GPURT_NVTX_TOOL(name) (NVTX_VERSIONED_IDENTIFIER(nvtxGlobals).name##_impl_fnptr != 0)

/* NVTX's implementation pointers for the default domain's mark, push and pop, in
 * that order (NULL once NVTX found no tool): the Rust side reads them first, so that
 * a call with no tool returns without calling into C. */
void *const *const gpurt_nvtx_c_default_slots[3] = {
    (void *const *)&NVTX_VERSIONED_IDENTIFIER(nvtxGlobals).nvtxMarkEx_impl_fnptr,
    (void *const *)&NVTX_VERSIONED_IDENTIFIER(nvtxGlobals).nvtxRangePushEx_impl_fnptr,
    (void *const *)&NVTX_VERSIONED_IDENTIFIER(nvtxGlobals).nvtxRangePop_impl_fnptr,
};

/* Fills the attributes in place: a struct returned by value was copied through
 * vector registers that read back the fields just stored, a store-forwarding stall
 * that cost more than the rest of the call. */
static inline void gpurt_attributes(nvtxEventAttributes_t *a, const char *message, uint32_t argb, uint32_t category) {
    memset(a, 0, sizeof *a);
    a->version = NVTX_VERSION;
    a->size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a->category = category;
    if (argb != 0) {
        a->colorType = NVTX_COLOR_ARGB;
        a->color = argb;
    }
    a->messageType = NVTX_MESSAGE_TYPE_ASCII;
    a->message.ascii = message;
}

void *gpurt_nvtx_c_domain_create(const char *name) { return nvtxDomainCreateA(name); }
void gpurt_nvtx_c_domain_destroy(void *domain) { nvtxDomainDestroy((nvtxDomainHandle_t)domain); }

void gpurt_nvtx_c_name_category(void *domain, uint32_t category, const char *name) {
    if (domain) nvtxDomainNameCategoryA((nvtxDomainHandle_t)domain, category, name);
    else nvtxNameCategoryA(category, name);
}

void gpurt_nvtx_c_mark(void *domain, const char *message, uint32_t argb, uint32_t category) {
    nvtxEventAttributes_t a;
    if (domain ? !GPURT_NVTX_TOOL(nvtxDomainMarkEx) : !GPURT_NVTX_TOOL(nvtxMarkEx)) return;
    gpurt_attributes(&a, message, argb, category);
    if (domain) nvtxDomainMarkEx((nvtxDomainHandle_t)domain, &a);
    else nvtxMarkEx(&a);
}

int gpurt_nvtx_c_range_push(void *domain, const char *message, uint32_t argb, uint32_t category) {
    nvtxEventAttributes_t a;
    if (domain ? !GPURT_NVTX_TOOL(nvtxDomainRangePushEx) : !GPURT_NVTX_TOOL(nvtxRangePushEx)) return NVTX_NO_PUSH_POP_TRACKING;
    gpurt_attributes(&a, message, argb, category);
    return domain ? nvtxDomainRangePushEx((nvtxDomainHandle_t)domain, &a) : nvtxRangePushEx(&a);
}

int gpurt_nvtx_c_range_pop(void *domain) {
    return domain ? nvtxDomainRangePop((nvtxDomainHandle_t)domain) : nvtxRangePop();
}

uint64_t gpurt_nvtx_c_range_start(void *domain, const char *message, uint32_t argb, uint32_t category) {
    nvtxEventAttributes_t a;
    if (domain ? !GPURT_NVTX_TOOL(nvtxDomainRangeStartEx) : !GPURT_NVTX_TOOL(nvtxRangeStartEx)) return 0;
    gpurt_attributes(&a, message, argb, category);
    return domain ? nvtxDomainRangeStartEx((nvtxDomainHandle_t)domain, &a) : nvtxRangeStartEx(&a);
}

void gpurt_nvtx_c_range_end(void *domain, uint64_t id) {
    if (domain) nvtxDomainRangeEnd((nvtxDomainHandle_t)domain, id);
    else nvtxRangeEnd(id);
}
