/* Capture once, replay many times: a step of an NVRTC kernel and a copy, captured
 * into a graph with its scratch memory from the graph's private pool, then replayed.
 * Each replay adds 1 to every element; the result is checked. */
#include "example.h"

static const char *source =
    "extern \"C\" __global__ void add_one(const int *in, int *out, unsigned n)"
    "{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = in[i] + 1; }";

int main(void) {
    gpurt_stream_t stream;
    gpurt_kernel_t add_one;
    gpurt_graph_t graph;
    gpurt_graph_exec_t exec;
    int *data, *scratch, *host;
    unsigned n = 1 << 20, i;
    int replays = 50, bad = 0, rtc_major, rtc_minor;
    void *args[3];
    require_gpu("graph-replay");
    if (gpurt_rtc_version(&rtc_major, &rtc_minor) != GPURT_SUCCESS) {
        printf("graph-replay: NVRTC is not installed: nothing to run\n");
        return 0;
    }
    CHECK(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream));
    CHECK(gpurt_rtc_get_kernel(source, "add_one", NULL, 0, &add_one));
    CHECK(gpurt_malloc(n * sizeof(int), stream, (void **)&data));
    host = (int *)malloc(n * sizeof(int));
    for (i = 0; i < n; i++) host[i] = (int)(i * 2654435761u >> 8);
    CHECK(gpurt_memcpy(data, host, n * sizeof(int), stream));

    CHECK(gpurt_stream_begin_capture(stream, GPURT_CAPTURE_MODE_THREAD_LOCAL, NULL));
    CHECK(gpurt_malloc(n * sizeof(int), stream, (void **)&scratch)); /* from the graph's pool */
    args[0] = &data;
    args[1] = &scratch;
    args[2] = &n;
    CHECK(gpurt_launch_kernel(add_one, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, args));
    CHECK(gpurt_memcpy_async(data, scratch, n * sizeof(int), stream));
    CHECK(gpurt_free(scratch));
    CHECK(gpurt_stream_end_capture(stream, &graph));
    CHECK(gpurt_graph_instantiate(graph, 0, NULL, &exec));

    for (i = 0; i < (unsigned)replays; i++) CHECK(gpurt_graph_launch(exec, stream));
    {
        int *result = (int *)malloc(n * sizeof(int));
        CHECK(gpurt_memcpy(result, data, n * sizeof(int), stream));
        for (i = 0; i < n; i++) bad += result[i] != host[i] + replays;
        free(result);
    }
    printf("graph-replay: %d replays of a captured kernel + copy over %u ints: %s\n", replays, n,
           bad == 0 ? "every element exact" : "WRONG");
    CHECK(gpurt_graph_exec_destroy(exec));
    CHECK(gpurt_graph_destroy(graph));
    CHECK(gpurt_free(data));
    free(host);
    return bad == 0 ? 0 : 1;
}
