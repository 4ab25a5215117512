// The checks of the C++ tests: CHECK counts a condition and prints a failed one with
// its place; each test ends with `return report("its name");`, which prints the counts
// and gives the exit status.
#ifndef GPURT_TEST_CHECK_HPP
#define GPURT_TEST_CHECK_HPP
#include <cstdio>

static int checks = 0, failures = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        ++checks;                                                                    \
        if (!(cond)) {                                                               \
            ++failures;                                                              \
            std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);              \
        }                                                                            \
    } while (0)

static inline int report(const char *test) {
    std::printf("%s: %d checks, %d failed\n", test, checks, failures);
    return failures == 0 ? 0 : 1;
}

#endif
