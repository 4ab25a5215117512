// Package gpurt is Go over gpurt's C ABI: devices, streams, events, the caching
// device allocator and its statistics, memory pools, pinned host memory, graphs
// and random numbers, as torch.cuda gives them to Python.
//
// Threading: a goroutine moves between OS threads, and gpurt keeps some state per
// OS thread (the current device and stream, the last error message). This package
// never relies on that state between two calls: every call names its device or
// stream explicitly, and each C call runs with its goroutine locked to its OS
// thread until gpurt's message for it has been read, so an error carries the
// message of its own call whatever other goroutines do.
//
// Ownership: every owner (Stream, Event, DeviceBuffer, PinnedBuffer, MemPool,
// Graph, GraphExec, Generator) has Close, safe to call more than once and from any
// goroutine; a finalizer closes an owner the program dropped without Close.
// gpurt's frees are safe from any thread, so the finalizer goroutine may run them.
// At exit, live owners need nothing: gpurt leaves the driver to the process's end.
package gpurt

/*
#cgo pkg-config: gpurt
#include <stdlib.h>
#include <gpurt.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Status is a gpurt_status_t.
type Status int

// The statuses a caller tells apart.
const (
	Success         Status = C.GPURT_SUCCESS
	InvalidArgument Status = C.GPURT_ERROR_INVALID_ARGUMENT
	InvalidHandle   Status = C.GPURT_ERROR_INVALID_HANDLE
	NoDriver        Status = C.GPURT_ERROR_NO_DRIVER
	NoDevice        Status = C.GPURT_ERROR_NO_DEVICE
	OutOfMemory     Status = C.GPURT_ERROR_OUT_OF_MEMORY
	NotReady        Status = C.GPURT_ERROR_NOT_READY
	NotSupported    Status = C.GPURT_ERROR_NOT_SUPPORTED
)

func (s Status) String() string {
	return C.GoString(C.gpurt_status_string(C.int(s)))
}

// Error is a failed call: its status and gpurt's message for it (the C function,
// the argument, the CUDA error).
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Status.String()
	}
	return e.Message
}

// Is matches an *Error of the same status, so that errors.Is(err, &gpurt.Error{Status: gpurt.OutOfMemory}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status
}

// call runs one C call with the goroutine on one OS thread until gpurt's message
// for a failure has been read from that thread.
func call(c func() C.gpurt_status_t) error {
	runtime.LockOSThread()
	s := c()
	var err error
	if s != C.GPURT_SUCCESS {
		err = &Error{Status: Status(s), Message: C.GoString(C.gpurt_last_error_message())}
	}
	runtime.UnlockOSThread()
	return err
}

// query is call for a query: false for GPURT_ERROR_NOT_READY, true for success.
func query(c func() C.gpurt_status_t) (bool, error) {
	err := call(c)
	if e, ok := err.(*Error); ok && e.Status == NotReady {
		return false, nil
	}
	return err == nil, err
}

// Version is the C library's version, MAJOR*10000 + MINOR*100 + PATCH.
func Version() int { return int(C.gpurt_version()) }

// CurrentDevice is gpurt's value for "this thread's current device". Go code
// should name devices: a goroutine's thread, and so its current device, can change.
const CurrentDevice = int(C.GPURT_CURRENT_DEVICE)

// owner holds one C handle or pointer, closed once by whichever of Close or the
// finalizer comes first. The values are C's: device or host memory that Go's
// collector does not manage, or gpurt's handles, whose kind in the top byte puts
// them far above any Go heap address.
type owner struct {
	handle unsafe.Pointer
}

func (o *owner) take() unsafe.Pointer { return atomic.SwapPointer(&o.handle, nil) }
func (o *owner) get() unsafe.Pointer  { return atomic.LoadPointer(&o.handle) }

// closeWith releases the handle once with release.
func (o *owner) closeWith(release func(unsafe.Pointer) C.gpurt_status_t) error {
	h := o.take()
	if h == nil {
		return nil
	}
	return call(func() C.gpurt_status_t { return release(h) })
}

func errorf(format string, args ...interface{}) error {
	return &Error{Status: InvalidArgument, Message: fmt.Sprintf(format, args...)}
}
