/* The checks of the C tests: CHECK counts a condition and prints the failed ones
 * with their place, a message and gpurt's last error message; EXPECT checks a
 * call's status. Each test prints `checks` and `failures` at its end. fill_pattern
 * writes the bytes a test compares: a seed's xorshift stream, so that another
 * process or stream can check them from the seed alone. */
#ifndef GPURT_TEST_CHECK_H
#define GPURT_TEST_CHECK_H
#include <gpurt.h>
#include <stdint.h>
#include <stdio.h>

static int failures = 0, checks = 0;

#define CHECK(cond, ...)                                                                    \
    do {                                                                                    \
        checks++;                                                                           \
        if (!(cond)) {                                                                      \
            failures++;                                                                     \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                          \
            printf(__VA_ARGS__);                                                            \
            printf(" (%s)\n", gpurt_last_error_message());                                  \
        }                                                                                   \
    } while (0)
#define EXPECT(call, status) CHECK((call) == (status), "%s", #call)

static inline void fill_pattern(unsigned char *bytes, size_t n, uint64_t seed) {
    size_t i;
    for (i = 0; i < n; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        bytes[i] = (unsigned char)seed;
    }
}

#endif
