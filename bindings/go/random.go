package gpurt

/*
#include <gpurt.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Generator is a seeded Philox generator of one device (torch.Generator):
// the same seed gives the same numbers.
type Generator struct{ owner }

// NewGenerator creates a generator on device with seed.
func NewGenerator(device int, seed uint64) (*Generator, error) {
	var h C.gpurt_generator_t
	if err := call(func() C.gpurt_status_t { return C.gpurt_generator_create(C.int(device), C.uint64_t(seed), &h) }); err != nil {
		return nil, err
	}
	g := &Generator{owner{handle: unsafe.Pointer(h)}}
	runtime.SetFinalizer(g, (*Generator).Close)
	return g, nil
}

// Uniform fills the first n float32s of b with uniform numbers in [0, 1), on b's stream.
func (g *Generator) Uniform(b *DeviceBuffer, n int) error {
	defer runtime.KeepAlive(g)
	defer runtime.KeepAlive(b)
	if n < 0 || n*4 > b.size {
		return errorf("gpurt.Generator.Uniform: %d float32s do not fit a buffer of %d bytes", n, b.size)
	}
	return call(func() C.gpurt_status_t {
		return C.gpurt_random_uniform(C.gpurt_generator_t(g.get()), b.get(), C.size_t(n), C.GPURT_DTYPE_F32, b.stream.c())
	})
}

// Close destroys the generator.
func (g *Generator) Close() error {
	runtime.SetFinalizer(g, nil)
	return g.closeWith(func(h unsafe.Pointer) C.gpurt_status_t { return C.gpurt_generator_destroy(C.gpurt_generator_t(h)) })
}
