/* dlopen, use and dlclose libgpurt (this program does not link it), then fork and
 * exit: nothing of the unloaded library (a fork handler, a thread-local destructor,
 * an atexit handler) may run afterwards. Usage: dlclose_test PATH_TO_LIBGPURT_SO */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*malloc_fn)(int, size_t, void **);
typedef int (*free_fn)(void *);
typedef int (*count_fn)(int *);

int main(int argc, char **argv) {
    void *lib, *p = NULL;
    malloc_fn gpurt_malloc_device;
    free_fn gpurt_free;
    count_fn gpurt_device_count;
    int count = 0, status = 0, round;
    pid_t pid;
    if (argc < 2) {
        fprintf(stderr, "usage: dlclose_test PATH_TO_LIBGPURT_SO\n");
        return 2;
    }
    for (round = 0; round < 2; round++) { /* load, use and unload twice */
        lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            printf("FAIL dlopen: %s\n", dlerror());
            return 1;
        }
        /* POSIX: function pointers from dlsym */
        *(void **)(&gpurt_malloc_device) = dlsym(lib, "gpurt_malloc_device");
        *(void **)(&gpurt_free) = dlsym(lib, "gpurt_free");
        *(void **)(&gpurt_device_count) = dlsym(lib, "gpurt_device_count");
        if (gpurt_device_count(&count) != 0) {
            printf("FAIL gpurt_device_count\n");
            return 1;
        }
        if (count > 0 && (gpurt_malloc_device(0, 1 << 20, &p) != 0 || gpurt_free(p) != 0)) {
            printf("FAIL allocating through the loaded library\n");
            return 1;
        }
        if (dlclose(lib) != 0) {
            printf("FAIL dlclose: %s\n", dlerror());
            return 1;
        }
    }
    pid = fork();
    if (pid == 0) _exit(0);
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL a fork after dlclose\n");
        return 1;
    }
    printf("dlclose_test: %d device(s); loaded, used and unloaded twice, then forked: 1 passed, 0 failed\n", count);
    return 0;
}
