package gpurt

/*
#include <gpurt.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// PinnedBuffer is page-locked host memory from gpurt's default pinned pool:
// copies from and to it run at full speed and asynchronously.
type PinnedBuffer struct {
	owner
	size int
}

// MallocPinned allocates size bytes of pinned host memory.
func MallocPinned(size int) (*PinnedBuffer, error) {
	if size <= 0 {
		return nil, errorf("gpurt.MallocPinned: size %d is not positive", size)
	}
	var pool C.gpurt_pinned_pool_t
	var p unsafe.Pointer
	err := call(func() C.gpurt_status_t {
		if s := C.gpurt_pinned_pool_default(&pool); s != C.GPURT_SUCCESS {
			return s
		}
		return C.gpurt_pinned_malloc(pool, C.size_t(size), &p)
	})
	if err != nil {
		return nil, err
	}
	b := &PinnedBuffer{owner{handle: p}, size}
	runtime.SetFinalizer(b, (*PinnedBuffer).Close)
	return b, nil
}

// Bytes is the memory as a Go slice, valid until Close.
func (b *PinnedBuffer) Bytes() []byte {
	p := b.get()
	if p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(p), b.size)
}

// RecordStream marks the memory as used by work on stream: after Close, its reuse
// waits for that work.
func (b *PinnedBuffer) RecordStream(s *Stream) error {
	defer runtime.KeepAlive(b)
	defer runtime.KeepAlive(s)
	return call(func() C.gpurt_status_t { return C.gpurt_pinned_record_stream(b.get(), s.c()) })
}

// Close gives the memory back to the pool.
func (b *PinnedBuffer) Close() error {
	runtime.SetFinalizer(b, nil)
	return b.closeWith(func(p unsafe.Pointer) C.gpurt_status_t { return C.gpurt_pinned_free(p) })
}

// PinnedStats are the default pinned pool's statistics.
type PinnedStats struct{ Allocations, AllocatedBytes, ReservedBytes Stat }

// GetPinnedStats reads the default pinned pool's statistics.
func GetPinnedStats() (PinnedStats, error) {
	var pool C.gpurt_pinned_pool_t
	var st C.gpurt_host_memory_stats_t
	st.struct_size = C.size_t(C.sizeof_gpurt_host_memory_stats_t)
	err := call(func() C.gpurt_status_t {
		if s := C.gpurt_pinned_pool_default(&pool); s != C.GPURT_SUCCESS {
			return s
		}
		return C.gpurt_pinned_stats(pool, &st)
	})
	one := func(s C.gpurt_stat_t) Stat {
		return Stat{int64(s.current), int64(s.peak), int64(s.allocated), int64(s.freed)}
	}
	return PinnedStats{one(st.allocations), one(st.allocated_bytes), one(st.reserved_bytes)}, err
}
