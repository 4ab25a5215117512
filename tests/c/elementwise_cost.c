/* gpurt's own host cost of an elementwise call on a cached expression, beside a plain
 * launch of a cached kernel: CALLS calls of one kind, after one untimed call that
 * compiles. Run on the stand-in driver and NVRTC under callgrind (tests/run-all.sh),
 * whose instruction counts repeat exactly: the difference between two call counts,
 * divided by their difference, is the cost of one call.
 *
 *   elementwise_cost elementwise|launch CALLS */
#include <gpurt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(gpurt_status_t status, const char *what) {
    if (status != GPURT_SUCCESS) {
        fprintf(stderr, "elementwise_cost: %s: %s\n", what, gpurt_last_error_message());
        exit(1);
    }
}

int main(int argc, char **argv) {
    const char *names[] = {"a", "b", "c"};
    const void *inputs[3];
    void *buffers[4];
    gpurt_stream_t stream = NULL;
    gpurt_kernel_t kernel = NULL;
    long calls, i;
    int elementwise, j;
    if (argc != 3 || (strcmp(argv[1], "elementwise") != 0 && strcmp(argv[1], "launch") != 0) || (calls = atol(argv[2])) < 0) {
        fprintf(stderr, "usage: elementwise_cost elementwise|launch CALLS\n");
        return 2;
    }
    elementwise = strcmp(argv[1], "elementwise") == 0;
    check(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), "gpurt_stream_create");
    for (j = 0; j < 4; j++) check(gpurt_malloc(1024 * sizeof(float), stream, &buffers[j]), "gpurt_malloc");
    for (j = 0; j < 3; j++) inputs[j] = buffers[j];
    check(gpurt_rtc_get_kernel("extern \"C\" __global__ void bump(float *x) { x[threadIdx.x] += 1.0f; }", "bump", NULL, 0, &kernel),
          "gpurt_rtc_get_kernel");
    for (i = 0; i <= calls; i++) { /* call 0 compiles */
        if (elementwise) {
            check(gpurt_elementwise("out = a * b + c", names, inputs, 3, GPURT_DTYPE_F32, 1024, buffers[3], stream), "gpurt_elementwise");
        } else {
            void *args[] = {&buffers[3]};
            check(gpurt_launch_kernel(kernel, 1, 1, 1, 256, 1, 1, 0, stream, args), "gpurt_launch_kernel");
        }
    }
    check(gpurt_stream_synchronize(stream), "gpurt_stream_synchronize");
    for (j = 0; j < 4; j++) check(gpurt_free(buffers[j]), "gpurt_free");
    check(gpurt_stream_destroy(stream), "gpurt_stream_destroy");
    return 0;
}
