package gpurt

/*
#include <time.h>
#include <gpurt.h>

// The benchmark's C side: n alloc+free pairs of size bytes on stream, called from
// C itself; the nanoseconds they took.
static long long c_alloc_free_pairs(long long n, size_t size, gpurt_stream_t stream) {
    struct timespec t0, t1;
    void *p;
    long long i;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 0; i < n; i++) {
        if (gpurt_malloc(size, stream, &p) != GPURT_SUCCESS || gpurt_free(p) != GPURT_SUCCESS) return -1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
}
*/
import "C"

import "runtime"

// cAllocFreePairs times n gpurt_malloc+gpurt_free pairs made from C, the
// reference for what a Go call adds (BenchmarkAllocFree).
func cAllocFreePairs(n, size int, s *Stream) (nanoseconds int64, err error) {
	defer runtime.KeepAlive(s)
	ns := int64(C.c_alloc_free_pairs(C.longlong(n), C.size_t(size), s.c()))
	if ns < 0 {
		return 0, &Error{Status: InvalidArgument, Message: "the C loop's alloc or free failed"}
	}
	return ns, nil
}
