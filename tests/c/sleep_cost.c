/* gpurt's own host cost of a discarded sleep and wake, beside the driver calls that
 * cycle needs made directly: a pool of expandable segments holding one block of 8 GiB
 * (one mapping) slept with GPURT_SLEEP_DISCARD and woken CYCLES times, or the same
 * mapping unmapped after a synchronize and made, mapped and made accessible again with
 * raw calls. Run on the stand-in driver under callgrind (tests/run-all.sh), whose
 * instruction counts repeat exactly: the difference between two cycle counts, divided
 * by their difference, is one cycle's cost; gpurt's minus the raw one is gpurt's own.
 * (On the GPU the driver's calls take 0.5-36 ms a cycle: gpu/sleep_bench.c.)
 *
 *   sleep_cost gpurt|raw CYCLES */
#include <cuda.h>
#include <gpurt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BYTES ((size_t)8 << 30)

static void check(gpurt_status_t status, const char *what) {
    if (status != GPURT_SUCCESS) {
        fprintf(stderr, "sleep_cost: %s: %s\n", what, gpurt_last_error_message());
        exit(1);
    }
}

static void check_driver(CUresult result, const char *what) {
    if (result != CUDA_SUCCESS) {
        fprintf(stderr, "sleep_cost: %s: %d\n", what, (int)result);
        exit(1);
    }
}

static void gpurt_cycles(long cycles) {
    gpurt_mem_pool_options_t options = GPURT_MEM_POOL_OPTIONS_INIT;
    gpurt_mem_pool_t pool = NULL;
    gpurt_stream_t stream = NULL;
    void *block = NULL;
    long i;
    check(gpurt_stream_create(0, GPURT_STREAM_NON_BLOCKING, 0, &stream), "gpurt_stream_create");
    options.config = "expandable_segments:True";
    check(gpurt_mem_pool_create(0, &options, &pool), "gpurt_mem_pool_create");
    check(gpurt_mem_pool_malloc(pool, BYTES, stream, &block), "gpurt_mem_pool_malloc");
    for (i = 0; i < cycles; i++) {
        check(gpurt_mem_pool_sleep(pool, GPURT_SLEEP_DISCARD), "gpurt_mem_pool_sleep");
        check(gpurt_mem_pool_wake(pool), "gpurt_mem_pool_wake");
    }
}

static void raw_cycles(long cycles) {
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
    CUmemGenericAllocationHandle handle;
    CUdeviceptr va = 0;
    CUdevice device;
    CUcontext context;
    long i;
    check(gpurt_init(), "gpurt_init"); /* cuInit, as in the other kind */
    check_driver(cuDeviceGet(&device, 0), "cuDeviceGet");
    check_driver(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
    check_driver(cuCtxSetCurrent(context), "cuCtxSetCurrent");
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check_driver(cuMemAddressReserve(&va, BYTES, 0, 0, 0), "cuMemAddressReserve");
    for (i = 0; i <= cycles; i++) {
        if (i > 0) { /* the sleep: the device's work waited for, the memory unmapped */
            check_driver(cuCtxSynchronize(), "cuCtxSynchronize");
            check_driver(cuMemUnmap(va, BYTES), "cuMemUnmap");
        }
        check_driver(cuMemCreate(&handle, BYTES, &prop, 0), "cuMemCreate");
        check_driver(cuMemMap(va, BYTES, 0, handle, 0), "cuMemMap");
        check_driver(cuMemRelease(handle), "cuMemRelease");
        check_driver(cuMemSetAccess(va, BYTES, &access, 1), "cuMemSetAccess");
    }
}

int main(int argc, char **argv) {
    long cycles;
    if (argc != 3 || (strcmp(argv[1], "gpurt") != 0 && strcmp(argv[1], "raw") != 0) || (cycles = atol(argv[2])) < 0) {
        fprintf(stderr, "usage: sleep_cost gpurt|raw CYCLES\n");
        return 2;
    }
    if (strcmp(argv[1], "gpurt") == 0) {
        gpurt_cycles(cycles);
    } else {
        raw_cycles(cycles);
    }
    return 0;
}
