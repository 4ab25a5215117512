/* A stand-in NVRTC for machines without CUDA (CI), beside the stand-in driver: it
 * "compiles" any source to a small PTX text, which the stand-in driver loads and whose
 * kernels do nothing, so that gpurt's run-time compilation paths (its caches, elementwise
 * kernels, random fills) run without a GPU. A source holding "#error" fails with a log,
 * as NVRTC's compile errors do. Built as libnvrtc.so.13 in a directory of its own. */
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *source;
    int failed;
} Program;

enum { SUCCESS = 0, INVALID_INPUT = 3, INVALID_PROGRAM = 5, COMPILATION = 6 };

static const char PTX[] = ".version 8.0\n.target sm_90\n.address_size 64\n";
static const char FAILED[] = "gpurt_rtc.cu(1): error: the stand-in NVRTC met #error";

int nvrtcVersion(int *major, int *minor) {
    if (!major || !minor) return INVALID_INPUT;
    *major = 13, *minor = 0;
    return SUCCESS;
}
int nvrtcGetNumSupportedArchs(int *count) {
    if (!count) return INVALID_INPUT;
    *count = 2;
    return SUCCESS;
}
int nvrtcGetSupportedArchs(int *archs) {
    if (!archs) return INVALID_INPUT;
    archs[0] = 80, archs[1] = 90;
    return SUCCESS;
}
int nvrtcCreateProgram(Program **prog, const char *source, const char *name, int headers, const char *const *contents, const char *const *names) {
    (void)name, (void)headers, (void)contents, (void)names;
    if (!prog || !source) return INVALID_INPUT;
    *prog = calloc(1, sizeof **prog);
    if (!*prog || !((*prog)->source = strdup(source))) return INVALID_INPUT;
    return SUCCESS;
}
int nvrtcCompileProgram(Program *prog, int count, const char *const *options) {
    (void)count, (void)options;
    if (!prog) return INVALID_PROGRAM;
    prog->failed = strstr(prog->source, "#error") != NULL;
    return prog->failed ? COMPILATION : SUCCESS;
}
static const char *log_of(const Program *prog) { return prog->failed ? FAILED : ""; }
int nvrtcGetProgramLogSize(Program *prog, size_t *size) {
    if (!prog || !size) return INVALID_INPUT;
    *size = strlen(log_of(prog)) + 1;
    return SUCCESS;
}
int nvrtcGetProgramLog(Program *prog, char *log) {
    if (!prog || !log) return INVALID_INPUT;
    strcpy(log, log_of(prog));
    return SUCCESS;
}
int nvrtcGetPTXSize(Program *prog, size_t *size) {
    if (!prog || !size || prog->failed) return INVALID_PROGRAM;
    *size = sizeof PTX;
    return SUCCESS;
}
int nvrtcGetPTX(Program *prog, char *ptx) {
    if (!prog || !ptx || prog->failed) return INVALID_PROGRAM;
    memcpy(ptx, PTX, sizeof PTX);
    return SUCCESS;
}
int nvrtcGetCUBINSize(Program *prog, size_t *size) { /* PTX only, as for a virtual architecture */
    if (!prog || !size) return INVALID_PROGRAM;
    *size = 0;
    return SUCCESS;
}
int nvrtcGetCUBIN(Program *prog, char *cubin) {
    (void)cubin;
    return prog ? SUCCESS : INVALID_PROGRAM;
}
int nvrtcDestroyProgram(Program **prog) {
    if (!prog || !*prog) return INVALID_PROGRAM;
    free((*prog)->source);
    free(*prog);
    *prog = NULL;
    return SUCCESS;
}
