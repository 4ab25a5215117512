/* GPUDirect Storage calls through the C ABI: round trips between files and device
 * memory at odd sizes and offsets (fresh random bytes), short files, a file removed
 * while open, stream-ordered reads and writes, registered and unregistered
 * buffers, and misuse (a read-only file written, a host pointer, stale handles).
 *
 * On a GPU every byte is checked; the stub driver moves no bytes, so there only the
 * statuses and counts are. Needs a device; without one it says so and exits 0,
 * unless GPURT_REQUIRE_GPU=1.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <gpurt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static int real = 0;
static char dir[256];

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/gpurt_gds_test_%d_%s", dir, (int)getpid(), name); }

static void write_host_file(const char *path, const unsigned char *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(bytes, 1, n, f) == n, "write %s", path);
    if (f) fclose(f);
}

/* Device bytes at `dev` equal `expected` (on a GPU; the stub moves nothing). */
static int device_equals(const void *dev, const unsigned char *expected, size_t n, gpurt_stream_t stream) {
    unsigned char *back;
    int same;
    if (!real) return 1;
    back = malloc(n);
    EXPECT(gpurt_memcpy(back, dev, n, stream), GPURT_SUCCESS);
    same = memcmp(back, expected, n) == 0;
    free(back);
    return same;
}

static int file_equals(const char *path, long offset, const unsigned char *expected, size_t n) {
    unsigned char *back = malloc(n);
    FILE *f = fopen(path, "rb");
    int same = f != NULL && fseek(f, offset, SEEK_SET) == 0 && fread(back, 1, n, f) == n && memcmp(back, expected, n) == 0;
    if (f) fclose(f);
    free(back);
    return same || !real;
}

static void round_trips(gpurt_stream_t stream) {
    static const size_t sizes[] = {1, 4095, (1u << 20) + 3, (9u << 20) + 17};
    static const long offsets[] = {0, 7, 4097};
    char in_path[300], out_path[300];
    size_t s, o;
    path_of(in_path, sizeof in_path, "in");
    path_of(out_path, sizeof out_path, "out");
    for (s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        for (o = 0; o < sizeof offsets / sizeof *offsets; o++) {
            size_t n = sizes[s], done = 0, file_size = n + (size_t)offsets[o];
            unsigned char *bytes = malloc(file_size);
            void *dev = NULL;
            gpurt_gds_file_t in = NULL, out = NULL;
            fill_pattern(bytes, file_size, 0x1234 + s * 7 + o);
            write_host_file(in_path, bytes, file_size);
            EXPECT(gpurt_malloc(n, stream, &dev), GPURT_SUCCESS);
            EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
            if (o == 1) EXPECT(gpurt_gds_register_buffer(dev, n), GPURT_SUCCESS);
            EXPECT(gpurt_gds_file_open(in_path, O_RDONLY, &in), GPURT_SUCCESS);
            EXPECT(gpurt_gds_read(in, dev, n, offsets[o], &done), GPURT_SUCCESS);
            CHECK(done == n, "read %zu of %zu", done, n);
            CHECK(device_equals(dev, bytes + offsets[o], n, stream), "read %zu bytes at offset %ld", n, offsets[o]);
            /* Back out, at another offset, synchronously and in stream order. */
            EXPECT(gpurt_gds_file_open(out_path, O_RDWR | O_CREAT | O_TRUNC, &out), GPURT_SUCCESS);
            EXPECT(gpurt_gds_write(out, dev, n, offsets[o] + 3, &done), GPURT_SUCCESS);
            CHECK(done == n && file_equals(out_path, offsets[o] + 3, bytes + offsets[o], n), "write %zu at %ld", n, offsets[o] + 3);
            EXPECT(gpurt_gds_write_async(out, dev, n, 11, stream), GPURT_SUCCESS);
            EXPECT(gpurt_stream_synchronize(stream), GPURT_SUCCESS);
            CHECK(file_equals(out_path, 11, bytes + offsets[o], n), "queued write of %zu", n);
            EXPECT(gpurt_memset_async(dev, 0, 1, n, stream), GPURT_SUCCESS);
            EXPECT(gpurt_gds_read_async(out, dev, n, 11, stream), GPURT_SUCCESS);
            CHECK(device_equals(dev, bytes + offsets[o], n, stream), "queued read of %zu", n);
            EXPECT(gpurt_gds_file_close(in), GPURT_SUCCESS);
            EXPECT(gpurt_gds_file_close(out), GPURT_SUCCESS);
            if (o == 1) EXPECT(gpurt_gds_deregister_buffer(dev), GPURT_SUCCESS);
            EXPECT(gpurt_free(dev), GPURT_SUCCESS);
            free(bytes);
        }
    }
    remove(in_path);
    remove(out_path);
}

static void short_and_removed_files(gpurt_stream_t stream) {
    char path[300];
    unsigned char bytes[10000];
    void *dev = NULL;
    size_t done = 0;
    gpurt_gds_file_t f = NULL;
    path_of(path, sizeof path, "short");
    fill_pattern(bytes, sizeof bytes, 99);
    write_host_file(path, bytes, sizeof bytes);
    EXPECT(gpurt_malloc(20000, stream, &dev), GPURT_SUCCESS);
    EXPECT(gpurt_gds_file_open(path, O_RDONLY, &f), GPURT_SUCCESS);
    EXPECT(gpurt_gds_read(f, dev, 20000, 0, &done), GPURT_SUCCESS);
    CHECK(done == sizeof bytes, "a short file gives what it has: %zu", done);
    EXPECT(gpurt_gds_read(f, dev, 20000, 0, NULL), GPURT_ERROR_IO);
    CHECK(strstr(gpurt_last_error_message(), "short read") != NULL || strstr(gpurt_last_error_message(), "file ends") != NULL, "says why");
    EXPECT(gpurt_gds_read(f, dev, 100, 20000, &done), GPURT_SUCCESS);
    CHECK(done == 0, "past the end: nothing");
    EXPECT(gpurt_gds_read_async(f, dev, 20000, 0, stream), GPURT_ERROR_IO);
    /* Removed while open: still readable through the open file. */
    CHECK(remove(path) == 0, "remove");
    EXPECT(gpurt_gds_read(f, dev, sizeof bytes, 0, &done), GPURT_SUCCESS);
    CHECK(done == sizeof bytes && device_equals(dev, bytes, sizeof bytes, stream), "read after the file was removed");
    /* Written while read-only: a clear error, and the file and buffer untouched. */
    EXPECT(gpurt_gds_write(f, dev, 16, 0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpurt_last_error_message(), "read-only") != NULL, "names read-only");
    EXPECT(gpurt_gds_write_async(f, dev, 16, 0, stream), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_gds_file_close(f), GPURT_SUCCESS);
    EXPECT(gpurt_gds_read(f, dev, 16, 0, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_gds_file_close(f), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_free(dev), GPURT_SUCCESS);
}

static void misuse(gpurt_stream_t stream) {
    char path[300];
    unsigned char host[64];
    void *dev = NULL;
    gpurt_gds_file_t f = NULL;
    gpurt_gds_mode_t mode = 0;
    path_of(path, sizeof path, "misuse");
    EXPECT(gpurt_gds_file_open("/nonexistent/dir/file", O_RDONLY, &f), GPURT_ERROR_IO);
    CHECK(strstr(gpurt_last_error_message(), "/nonexistent/dir/file") != NULL, "names the path");
    EXPECT(gpurt_gds_file_open(NULL, O_RDONLY, &f), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_gds_file_open(path, O_RDWR | O_CREAT, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_gds_file_open(path, O_WRONLY | O_CREAT | O_TRUNC, &f), GPURT_SUCCESS);
    EXPECT(gpurt_malloc(64, stream, &dev), GPURT_SUCCESS);
    EXPECT(gpurt_gds_read(f, dev, 16, 0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpurt_last_error_message(), "write-only") != NULL, "names write-only");
    EXPECT(gpurt_gds_write(f, host, 16, 0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpurt_last_error_message(), "not device memory") != NULL, "a host pointer");
    EXPECT(gpurt_gds_write(f, dev, 16, -1, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_gds_write(f, NULL, 16, 0, NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_gds_write((gpurt_gds_file_t)(uintptr_t)0x4242, dev, 16, 0, NULL), GPURT_ERROR_INVALID_HANDLE);
    EXPECT(gpurt_gds_write(f, dev, 0, 0, NULL), GPURT_SUCCESS);
    EXPECT(gpurt_gds_register_buffer(host, sizeof host), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_gds_register_buffer(dev, 64), GPURT_SUCCESS);
    EXPECT(gpurt_gds_register_buffer(dev, 64), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_gds_deregister_buffer(dev), GPURT_SUCCESS);
    EXPECT(gpurt_gds_deregister_buffer(dev), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_gds_mode(NULL), GPURT_ERROR_INVALID_ARGUMENT);
    EXPECT(gpurt_gds_mode(&mode), GPURT_SUCCESS);
    CHECK(mode == GPURT_GDS_MODE_GDS || mode == GPURT_GDS_MODE_COMPAT || mode == GPURT_GDS_MODE_STAGED, "mode %d", (int)mode);
    printf("gds_test: mode %s\n", mode == GPURT_GDS_MODE_GDS ? "GDS" : mode == GPURT_GDS_MODE_COMPAT ? "cuFile compatibility" : "staged");
    EXPECT(gpurt_gds_file_close(f), GPURT_SUCCESS);
    EXPECT(gpurt_free(dev), GPURT_SUCCESS);
    remove(path);
}

int main(void) {
    const char *require = getenv("GPURT_REQUIRE_GPU");
    gpurt_device_properties_t props = GPURT_DEVICE_PROPERTIES_INIT;
    gpurt_stream_t stream = NULL;
    int count = 0;
    snprintf(dir, sizeof dir, "%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("gds_test: skipped: no CUDA device (%s)\n", gpurt_last_error_message());
        return require && strcmp(require, "1") == 0 ? 1 : 0;
    }
    EXPECT(gpurt_device_get_properties(0, &props), GPURT_SUCCESS);
    real = strcmp(props.name, "Fake GPU") != 0;
    if (!real) printf("gds_test: byte checks skipped: the stub driver moves no bytes\n");
    EXPECT(gpurt_set_device(0), GPURT_SUCCESS);
    EXPECT(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), GPURT_SUCCESS);
    round_trips(stream);
    short_and_removed_files(stream);
    misuse(stream);
    EXPECT(gpurt_stream_destroy(stream), GPURT_SUCCESS);
    printf("gds_test: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
