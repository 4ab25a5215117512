/* Memory history and snapshots through the C ABI: misuse first, then a workload
 * with annotations, a deferred free and an out-of-memory failure, whose snapshot is
 * written as JSON, pickle and HTML into the folder given as argv[1] (the viewer's
 * browser test and the Python checks read them), and into a caller's buffer.
 * Runs on the stand-in driver and on a GPU alike. */
#include "check.h"

#include <stdlib.h>
#include <string.h>

#define LIVE 24

static char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    char *text;
    long n;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = malloc((size_t)n + 1);
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (text) text[n] = 0;
    fclose(f);
    *size = (size_t)n;
    return text;
}

static size_t count(const char *text, const char *needle) {
    size_t n = 0;
    for (text = strstr(text, needle); text; text = strstr(text + 1, needle)) n++;
    return n;
}

static void misuse(void) {
    size_t size = 0;
    char small[4];
    EXPECT(gpurt_memory_record_history(1, 10, 4), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_record_history(1, (size_t)GPURT_HISTORY_MAX_ENTRIES + 1, 0), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_annotate_push(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_annotate_pop(), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpurt_last_error_message(), "no annotation") != NULL, "the message says why");
    EXPECT(gpurt_memory_snapshot(0, 3, "/tmp/never.json"), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_snapshot(0, -1, "/tmp/never.json"), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_snapshot(0, GPURT_SNAPSHOT_JSON, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_snapshot(999, GPURT_SNAPSHOT_JSON, "/tmp/never.json"), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_snapshot(0, GPURT_SNAPSHOT_JSON, "/nonexistent-dir/x.json"), GPURT_ERROR_IO);
    CHECK(strstr(gpurt_last_error_message(), "/nonexistent-dir/x.json") != NULL, "the message names the path");
    EXPECT(gpurt_memory_snapshot_buffer(0, GPURT_SNAPSHOT_JSON, NULL, 0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_snapshot_buffer(0, GPURT_SNAPSHOT_JSON, NULL, 10, &size), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_memory_snapshot_buffer(0, GPURT_SNAPSHOT_JSON, NULL, 0, &size), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(size > 2, "asking the size gives it: %zu", size);
    memset(small, 'x', sizeof small);
    EXPECT(gpurt_memory_snapshot_buffer(0, GPURT_SNAPSHOT_JSON, small, sizeof small, &size), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(small[0] == 'x', "a buffer too small is left as it was");
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    char path[4096], needle[128];
    void *live[LIVE], *pending = NULL, *huge = NULL;
    gpurt_stream_t side = NULL;
    gpurt_memory_stats_t stats = GPURT_MEMORY_STATS_INIT;
    size_t size = 0, i;
    char *text, *buffer;
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)(size_t)&size;

    misuse();
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    EXPECT(gpurt_memory_record_history(1, 5000, GPURT_HISTORY_CLEAR | GPURT_HISTORY_STACKS), GPURT_SUCCESS);
    EXPECT(gpurt_memory_annotate_push("request 42"), GPURT_SUCCESS);
    EXPECT(gpurt_memory_annotate_push("layer </script> 3"), GPURT_SUCCESS);
    for (i = 0; i < LIVE; i++) {
        seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
        EXPECT(gpurt_malloc_device(0, 1 + (size_t)(seed % (24u << 20)), &live[i]), GPURT_SUCCESS);
    }
    EXPECT(gpurt_memory_annotate_pop(), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &side), GPURT_SUCCESS);
    EXPECT(gpurt_malloc_device(0, 3 << 20, &pending), GPURT_SUCCESS);
    EXPECT(gpurt_record_stream(pending, side), GPURT_SUCCESS);
    EXPECT(gpurt_free(pending), GPURT_SUCCESS);
    for (i = 0; i < LIVE; i += 3) EXPECT(gpurt_free(live[i]), GPURT_SUCCESS);
    /* 64 TiB: more than any device, within what gpurt tries. */
    EXPECT(gpurt_malloc_device(0, (size_t)1 << 46, &huge), GPURT_ERROR_OUT_OF_MEMORY);
    EXPECT(gpurt_memory_annotate_pop(), GPURT_SUCCESS);
    EXPECT(gpurt_memory_record_history(0, 0, 0), GPURT_SUCCESS);

    EXPECT(gpurt_memory_stats(0, &stats), GPURT_SUCCESS);
    snprintf(path, sizeof path, "%s/snapshot.json", dir);
    EXPECT(gpurt_memory_snapshot(GPURT_CURRENT_DEVICE, GPURT_SNAPSHOT_JSON, path), GPURT_SUCCESS);
    text = read_file(path, &size);
    CHECK(text != NULL && size > 0, "%s was written", path);
    if (text) {
        snprintf(needle, sizeof needle, "\"allocated_bytes\":%lld", (long long)stats.allocated_bytes.all.current);
        CHECK(strstr(text, needle) != NULL, "the snapshot's statistics are gpurt_memory_stats': %s", needle);
        CHECK(count(text, "\"state\":\"active_allocated\"") == LIVE - (LIVE + 2) / 3, "%zu live blocks",
              count(text, "\"state\":\"active_allocated\""));
        CHECK(count(text, "\"action\":\"oom\"") == 1, "one out-of-memory event");
        CHECK(count(text, "\"action\":\"alloc\"") == LIVE + 1, "every allocation is in the history");
        CHECK(count(text, "\"action\":\"free_requested\"") == (LIVE + 2) / 3 + 1, "every free is in the history");
        CHECK(count(text, "\"annotation\":\"request 42 > layer \\u003c/script> 3\"") == 0, "JSON files keep '<' as it is");
        CHECK(count(text, "\"annotation\":\"request 42 > layer </script> 3\"") == LIVE - (LIVE + 2) / 3,
              "each live block carries its annotation");
        CHECK(count(text, "\"user_metadata\":\"request 42\"") >= 2, "events after the inner pop carry the outer annotation");
        CHECK(strstr(text, "\"frames\":[{") != NULL, "stacks were recorded");
        free(text);
    }
    snprintf(path, sizeof path, "%s/snapshot.pickle", dir);
    EXPECT(gpurt_memory_snapshot(0, GPURT_SNAPSHOT_PICKLE, path), GPURT_SUCCESS);
    snprintf(path, sizeof path, "%s/snapshot.html", dir);
    EXPECT(gpurt_memory_snapshot(0, GPURT_SNAPSHOT_HTML, path), GPURT_SUCCESS);
    text = read_file(path, &size);
    CHECK(text != NULL && count(text, "</script>") == 2, "the page's data ends no script element");
    free(text);

    EXPECT(gpurt_memory_snapshot_buffer(0, GPURT_SNAPSHOT_PICKLE, NULL, 0, &size), GPURT_ERROR_INVALID_ARGUMENT);
    buffer = malloc(size + 4096); /* the snapshot event added since is a few bytes */
    EXPECT(gpurt_memory_snapshot_buffer(0, GPURT_SNAPSHOT_PICKLE, buffer, size + 4096, &size), GPURT_SUCCESS);
    CHECK((unsigned char)buffer[0] == 0x80, "a pickle starts with its protocol opcode: %#x", (unsigned char)buffer[0]);
    free(buffer);

    for (i = 1; i < LIVE; i++)
        if (i % 3) EXPECT(gpurt_free(live[i]), GPURT_SUCCESS);
    EXPECT(gpurt_stream_synchronize(side), GPURT_SUCCESS);
    EXPECT(gpurt_stream_destroy(side), GPURT_SUCCESS);
    EXPECT(gpurt_empty_cache(), GPURT_SUCCESS);
    printf("memory_history_test: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
