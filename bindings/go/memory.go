package gpurt

/*
#include <stdint.h>
#include <gpurt.h>

// The allocation hot path in C terms that pass no Go pointer, so cgo checks none:
// the status and the address come back by value.
typedef struct { gpurt_status_t status; void *ptr; } go_allocation;
static go_allocation go_malloc(size_t size, uintptr_t stream) {
    void *p = NULL;
    gpurt_status_t s = gpurt_malloc(size, (gpurt_stream_t)stream, &p);
    return (go_allocation){s, p};
}
static go_allocation go_pool_malloc(uintptr_t pool, size_t size, uintptr_t stream) {
    void *p = NULL;
    gpurt_status_t s = gpurt_mem_pool_malloc((gpurt_mem_pool_t)pool, size, (gpurt_stream_t)stream, &p);
    return (go_allocation){s, p};
}
static gpurt_status_t go_free(uintptr_t p) { return gpurt_free((void *)p); }
*/
import "C"

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// DeviceBuffer is device memory from gpurt's caching allocator (or a MemPool),
// for one stream: Close gives it back in that stream's order.
type DeviceBuffer struct {
	owner
	size   int
	stream *Stream
	pool   *MemPool // kept reachable while the buffer lives
}

func adoptBuffer(ptr unsafe.Pointer, size int, s *Stream) *DeviceBuffer {
	b := &DeviceBuffer{owner: owner{handle: ptr}, size: size, stream: s}
	runtime.SetFinalizer(b, (*DeviceBuffer).Close)
	return b
}

// Malloc allocates size bytes on stream's device for use on stream.
func Malloc(size int, s *Stream) (*DeviceBuffer, error) {
	defer runtime.KeepAlive(s)
	if size < 0 {
		return nil, errorf("gpurt.Malloc: size %d is negative", size)
	}
	var a C.go_allocation
	if err := call(func() C.gpurt_status_t {
		a = C.go_malloc(C.size_t(size), C.uintptr_t(uintptr(s.get())))
		return a.status
	}); err != nil {
		return nil, err
	}
	return adoptBuffer(a.ptr, size, s), nil
}

// Close frees the memory (stream-ordered: it is reused after the stream's work).
func (b *DeviceBuffer) Close() error {
	runtime.SetFinalizer(b, nil)
	return b.closeWith(func(p unsafe.Pointer) C.gpurt_status_t { return C.go_free(C.uintptr_t(uintptr(p))) })
}

// Ptr is the device address (0 once closed).
func (b *DeviceBuffer) Ptr() uintptr { return uintptr(b.get()) }

// Size is the buffer's size in bytes.
func (b *DeviceBuffer) Size() int { return b.size }

// Stream is the stream the buffer was allocated for.
func (b *DeviceBuffer) Stream() *Stream { return b.stream }

func (b *DeviceBuffer) checkRange(n int, what string) error {
	if n > b.size {
		return errorf("gpurt: %s of %d bytes does not fit a buffer of %d", what, n, b.size)
	}
	if b.get() == nil {
		return &Error{Status: InvalidHandle, Message: "gpurt: the buffer is closed"}
	}
	return nil
}

// CopyFromHost copies src to the start of the buffer on its stream and waits for it.
func (b *DeviceBuffer) CopyFromHost(src []byte) error {
	defer runtime.KeepAlive(b)
	if err := b.checkRange(len(src), "a copy"); err != nil || len(src) == 0 {
		return err
	}
	return call(func() C.gpurt_status_t {
		return C.gpurt_memcpy(b.get(), unsafe.Pointer(&src[0]), C.size_t(len(src)), b.stream.c())
	})
}

// CopyToHost copies the start of the buffer into dst on its stream and waits for it.
func (b *DeviceBuffer) CopyToHost(dst []byte) error {
	defer runtime.KeepAlive(b)
	if err := b.checkRange(len(dst), "a copy"); err != nil || len(dst) == 0 {
		return err
	}
	return call(func() C.gpurt_status_t {
		return C.gpurt_memcpy(unsafe.Pointer(&dst[0]), b.get(), C.size_t(len(dst)), b.stream.c())
	})
}

// Stat is one statistic: current value, peak, totals added and removed.
type Stat struct{ Current, Peak, Allocated, Freed int64 }

func stat(s C.gpurt_stat_array_t) Stat {
	return Stat{int64(s.all.current), int64(s.all.peak), int64(s.all.allocated), int64(s.all.freed)}
}

// MemoryStats are torch.cuda.memory_stats()'s "all" figures.
type MemoryStats struct {
	Allocations, Segments, AllocatedBytes, ReservedBytes, ActiveBytes, RequestedBytes Stat
	NumAllocRetries, NumOOMs                                                          int64
}

func memoryStats(st *C.gpurt_memory_stats_t) MemoryStats {
	return MemoryStats{
		Allocations:     stat(st.allocation),
		Segments:        stat(st.segment),
		AllocatedBytes:  stat(st.allocated_bytes),
		ReservedBytes:   stat(st.reserved_bytes),
		ActiveBytes:     stat(st.active_bytes),
		RequestedBytes:  stat(st.requested_bytes),
		NumAllocRetries: int64(st.num_alloc_retries),
		NumOOMs:         int64(st.num_ooms),
	}
}

// GetMemoryStats reads device's allocator statistics.
func GetMemoryStats(device int) (MemoryStats, error) {
	var st C.gpurt_memory_stats_t
	st.struct_size = C.size_t(C.sizeof_gpurt_memory_stats_t)
	err := call(func() C.gpurt_status_t { return C.gpurt_memory_stats(C.int(device), &st) })
	return memoryStats(&st), err
}

// EmptyCache gives every device's cached, unused memory back to the driver.
func EmptyCache() error {
	return call(func() C.gpurt_status_t { return C.gpurt_empty_cache() })
}

// MemPool is a memory pool of its own beside the device's default one
// (torch.cuda.MemPool); Close refuses while it holds live allocations.
type MemPool struct{ owner }

func (p *MemPool) c() C.gpurt_mem_pool_t { return C.gpurt_mem_pool_t(p.get()) }

// NewMemPool creates a pool on device with the process's allocator configuration.
func NewMemPool(device int) (*MemPool, error) {
	var opts C.gpurt_mem_pool_options_t
	var h C.gpurt_mem_pool_t
	err := call(func() C.gpurt_status_t {
		if s := C.gpurt_mem_pool_options_init(&opts); s != C.GPURT_SUCCESS {
			return s
		}
		return C.gpurt_mem_pool_create(C.int(device), &opts, &h)
	})
	if err != nil {
		return nil, err
	}
	p := &MemPool{owner{handle: unsafe.Pointer(h)}}
	runtime.SetFinalizer(p, (*MemPool).Close)
	return p, nil
}

// Malloc allocates size bytes from the pool for use on stream.
func (p *MemPool) Malloc(size int, s *Stream) (*DeviceBuffer, error) {
	defer runtime.KeepAlive(p)
	defer runtime.KeepAlive(s)
	if size < 0 {
		return nil, errorf("gpurt.MemPool.Malloc: size %d is negative", size)
	}
	var a C.go_allocation
	if err := call(func() C.gpurt_status_t {
		a = C.go_pool_malloc(C.uintptr_t(uintptr(p.get())), C.size_t(size), C.uintptr_t(uintptr(s.get())))
		return a.status
	}); err != nil {
		return nil, err
	}
	b := adoptBuffer(a.ptr, size, s)
	b.pool = p // the pool outlives its buffers
	return b, nil
}

// Stats reads the pool's statistics.
func (p *MemPool) Stats() (MemoryStats, error) {
	defer runtime.KeepAlive(p)
	var st C.gpurt_memory_stats_t
	st.struct_size = C.size_t(C.sizeof_gpurt_memory_stats_t)
	err := call(func() C.gpurt_status_t { return C.gpurt_mem_pool_stats(p.c(), &st) })
	return memoryStats(&st), err
}

// Close destroys the pool; refused (and kept) while it holds live allocations.
func (p *MemPool) Close() error {
	h := p.take()
	if h == nil {
		return nil
	}
	err := call(func() C.gpurt_status_t { return C.gpurt_mem_pool_destroy(C.gpurt_mem_pool_t(h)) })
	if err != nil {
		atomic.StorePointer(&p.handle, h) // still the pool's: its buffers are live
		return err
	}
	runtime.SetFinalizer(p, nil)
	return nil
}
