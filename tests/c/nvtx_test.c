/* NVTX through gpurt. With no argument: no tool attached, every call succeeds and
 * pushes report GPURT_NVTX_NO_TRACKING; misuse gets its status. With a record file
 * as argv[1] (run with NVTX_INJECTION64_PATH naming tests/nvtx/record_injection.c's
 * library and GPURT_NVTX_RECORD the file): the tool saw each call, in order, with its
 * message, colour, category and domain, and its depths came back. */
#include "check.h"

#include <stdlib.h>
#include <string.h>

static const char *expected[] = {
    "mark domain=0 message=hello color=0 category=0",
    "push domain=0 message=outer color=0 category=0",
    "push domain=0 message=inner color=0 category=0",
    "pop domain=0",
    "pop domain=0",
    "start domain=0 message=across threads color=0 category=0",
    "end domain=0 id=100",
    "domain_create engine -> 1",
    "category domain=1 7=decode",
    "mark domain=1 message=tick color=0xff00ff00 category=7",
    "push domain=1 message=layer color=0xffff0000 category=7",
    "pop domain=1",
    "start domain=1 message=request color=0 category=0",
    "end domain=1 id=200",
    "domain_destroy 1",
};

int main(int argc, char **argv) {
    int tracked = argc > 1, depth = 99, i;
    uint64_t id = 0;
    gpurt_nvtx_domain_t domain = NULL, stale;

    EXPECT(gpurt_nvtx_mark("hello"), GPURT_SUCCESS);
    EXPECT(gpurt_nvtx_range_push("outer", &depth), GPURT_SUCCESS);
    CHECK(depth == (tracked ? 0 : GPURT_NVTX_NO_TRACKING), "outer depth %d", depth);
    EXPECT(gpurt_nvtx_range_push("inner", &depth), GPURT_SUCCESS);
    CHECK(depth == (tracked ? 1 : GPURT_NVTX_NO_TRACKING), "inner depth %d", depth);
    EXPECT(gpurt_nvtx_range_pop(&depth), GPURT_SUCCESS);
    EXPECT(gpurt_nvtx_range_pop(NULL), GPURT_SUCCESS);
    EXPECT(gpurt_nvtx_range_start("across threads", &id), GPURT_SUCCESS);
    EXPECT(gpurt_nvtx_range_end(id), GPURT_SUCCESS);
    EXPECT(gpurt_nvtx_domain_create("engine", &domain), GPURT_SUCCESS);
    EXPECT(gpurt_nvtx_name_category(domain, 7, "decode"), GPURT_SUCCESS);
    EXPECT(gpurt_nvtx_mark_ex(domain, "tick", 0xff00ff00u, 7), GPURT_SUCCESS);
    EXPECT(gpurt_nvtx_range_push_ex(domain, "layer", 0xffff0000u, 7, &depth), GPURT_SUCCESS);
    EXPECT(gpurt_nvtx_range_pop_ex(domain, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_nvtx_range_start_ex(domain, "request", 0, 0, &id), GPURT_SUCCESS);
    EXPECT(gpurt_nvtx_range_end_ex(domain, id), GPURT_SUCCESS);
    stale = domain;
    EXPECT(gpurt_nvtx_domain_destroy(domain), GPURT_SUCCESS);

    /* Misuse: nothing reaches the tool. */
    EXPECT(gpurt_nvtx_mark(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_nvtx_range_push(NULL, &depth), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_nvtx_range_start("x", NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_nvtx_domain_create(NULL, &domain), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_nvtx_domain_create("x", NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_nvtx_mark_ex(stale, "late", 0, 0), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_nvtx_range_pop_ex(stale, &depth), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_nvtx_domain_destroy(stale), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_nvtx_domain_destroy(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_nvtx_mark_ex((gpurt_nvtx_domain_t)(uintptr_t)0x1234, "forged", 0, 0), GPURT_ERROR_INVALID_HANDLE);

    if (tracked) {
        char text[256];
        FILE *f = fopen(argv[1], "r");
        CHECK(f != NULL, "the tool wrote %s", argv[1]);
        for (i = 0; f && i < (int)(sizeof expected / sizeof *expected); i++) {
            if (!fgets(text, sizeof text, f)) text[0] = 0;
            text[strcspn(text, "\n")] = 0;
            CHECK(strcmp(text, expected[i]) == 0, "call %d: the tool saw '%s', expected '%s'", i, text, expected[i]);
        }
        if (f) {
            CHECK(!fgets(text, sizeof text, f), "nothing more reached the tool: '%s'", text);
            fclose(f);
        }
    }
    printf("nvtx_test (%s): %d checks, %d failures\n", tracked ? "recording tool" : "no tool", checks, failures);
    return failures != 0;
}
