/* Conan's test_package: links gpurt from the package and calls it. */
#include <gpurt.h>
#include <stdio.h>

int main(void) {
    int version = gpurt_version(), count = -1;
    if (version != GPURT_VERSION) {
        fprintf(stderr, "gpurt_version: %d, header %d\n", version, GPURT_VERSION);
        return 1;
    }
    if (gpurt_device_count(&count) != GPURT_SUCCESS) {
        fprintf(stderr, "gpurt_device_count: %s\n", gpurt_last_error_message());
        return 1;
    }
    printf("gpurt %d.%d.%d from the Conan package: %d device(s)\n", GPURT_VERSION_MAJOR, GPURT_VERSION_MINOR,
           GPURT_VERSION_PATCH, count);
    return 0;
}
