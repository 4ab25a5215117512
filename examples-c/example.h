/* What every example shares: a check that prints gpurt's message and exits, and the
 * "no GPU here" exit (status 0, so that the examples run anywhere). */
#ifndef GPURT_EXAMPLE_H
#define GPURT_EXAMPLE_H
#include <gpurt.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                       \
    do {                                                                                  \
        gpurt_status_t s_ = (call);                                                       \
        if (s_ != GPURT_SUCCESS) {                                                        \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,     \
                    gpurt_status_string(s_), gpurt_last_error_message());                 \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

/* Exits 0 with a note where there is no GPU; `name` is the example's. */
static void require_gpu(const char *name) {
    int count = 0;
    gpurt_status_t s = gpurt_init();
    if (s != GPURT_SUCCESS || gpurt_device_count(&count) != GPURT_SUCCESS || count == 0) {
        printf("%s: no GPU (%s): nothing to run\n", name, gpurt_status_string(s));
        exit(0);
    }
}
#endif
