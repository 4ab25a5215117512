package gpurt

/*
#include <gpurt.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Stream is a gpurt stream. Streams made by NewStream are owned and released by
// Close (queued work still runs); pooled and default streams are borrowed and
// Close leaves them alone.
type Stream struct {
	owner
	device int
}

func (s *Stream) c() C.gpurt_stream_t { return C.gpurt_stream_t(s.get()) }

func adoptStream(h C.gpurt_stream_t, device int) *Stream {
	s := &Stream{owner: owner{handle: unsafe.Pointer(h)}, device: device}
	runtime.SetFinalizer(s, (*Stream).Close)
	return s
}

// NewStream creates a non-blocking stream on device with priority (0: the default).
func NewStream(device, priority int) (*Stream, error) {
	var h C.gpurt_stream_t
	err := call(func() C.gpurt_status_t {
		return C.gpurt_stream_create(C.int(device), C.GPURT_STREAM_NON_BLOCKING, C.int(priority), &h)
	})
	if err != nil {
		return nil, err
	}
	return adoptStream(h, device), nil
}

// StreamFromPool is one of device's pooled streams (no driver call after the first).
func StreamFromPool(device int, highPriority bool) (*Stream, error) {
	var h C.gpurt_stream_t
	high := C.int(0)
	if highPriority {
		high = 1
	}
	err := call(func() C.gpurt_status_t { return C.gpurt_stream_from_pool(C.int(device), high, &h) })
	if err != nil {
		return nil, err
	}
	return adoptStream(h, device), nil // destroying a pooled stream is a no-op
}

// Close releases the stream; later calls on it fail with InvalidHandle.
func (s *Stream) Close() error {
	runtime.SetFinalizer(s, nil)
	return s.closeWith(func(h unsafe.Pointer) C.gpurt_status_t { return C.gpurt_stream_destroy(C.gpurt_stream_t(h)) })
}

// Device is the stream's device.
func (s *Stream) Device() int { return s.device }

// Synchronize waits for the stream's work.
func (s *Stream) Synchronize() error {
	defer runtime.KeepAlive(s) // the finalizer must not run during the call
	return call(func() C.gpurt_status_t { return C.gpurt_stream_synchronize(s.c()) })
}

// Query says whether the stream's work is done.
func (s *Stream) Query() (bool, error) {
	defer runtime.KeepAlive(s) // the finalizer must not run during the call
	return query(func() C.gpurt_status_t { return C.gpurt_stream_query(s.c()) })
}

// Native is the CUstream / cudaStream_t, for cuBLAS, cuDNN and kernels.
func (s *Stream) Native() (uintptr, error) {
	defer runtime.KeepAlive(s) // the finalizer must not run during the call
	var n unsafe.Pointer
	err := call(func() C.gpurt_status_t { return C.gpurt_stream_native(s.c(), &n) })
	return uintptr(n), err
}

// WaitEvent makes the stream's later work wait for event.
func (s *Stream) WaitEvent(e *Event) error {
	defer runtime.KeepAlive(s) // the finalizer must not run during the call
	defer runtime.KeepAlive(e)
	return call(func() C.gpurt_status_t { return C.gpurt_stream_wait_event(s.c(), e.c()) })
}

// Event is a gpurt event.
type Event struct{ owner }

func (e *Event) c() C.gpurt_event_t { return C.gpurt_event_t(e.get()) }

// NewEvent creates an event on device; timing enables ElapsedTime.
func NewEvent(device int, timing bool) (*Event, error) {
	var h C.gpurt_event_t
	flags := C.uint(0)
	if !timing {
		flags = C.GPURT_EVENT_DISABLE_TIMING
	}
	err := call(func() C.gpurt_status_t { return C.gpurt_event_create(C.int(device), flags, &h) })
	if err != nil {
		return nil, err
	}
	e := &Event{owner{handle: unsafe.Pointer(h)}}
	runtime.SetFinalizer(e, (*Event).Close)
	return e, nil
}

// Close destroys the event.
func (e *Event) Close() error {
	runtime.SetFinalizer(e, nil)
	return e.closeWith(func(h unsafe.Pointer) C.gpurt_status_t { return C.gpurt_event_destroy(C.gpurt_event_t(h)) })
}

// Record captures the work queued on stream so far.
func (e *Event) Record(s *Stream) error {
	defer runtime.KeepAlive(e) // the finalizer must not run during the call
	defer runtime.KeepAlive(s)
	return call(func() C.gpurt_status_t { return C.gpurt_event_record(e.c(), s.c()) })
}

// Synchronize waits for the recorded work.
func (e *Event) Synchronize() error {
	defer runtime.KeepAlive(e) // the finalizer must not run during the call
	return call(func() C.gpurt_status_t { return C.gpurt_event_synchronize(e.c()) })
}

// Query says whether the recorded work is done.
func (e *Event) Query() (bool, error) {
	defer runtime.KeepAlive(e) // the finalizer must not run during the call
	return query(func() C.gpurt_status_t { return C.gpurt_event_query(e.c()) })
}

// ElapsedTime is the milliseconds between two recorded timing events.
func (e *Event) ElapsedTime(end *Event) (float32, error) {
	defer runtime.KeepAlive(e) // the finalizer must not run during the call
	defer runtime.KeepAlive(end)
	var ms C.float
	err := call(func() C.gpurt_status_t { return C.gpurt_event_elapsed_time(e.c(), end.c(), &ms) })
	return float32(ms), err
}
