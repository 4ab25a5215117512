package gpurt

/*
#include <gpurt.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Capture modes for BeginCapture. Go code should use CaptureRelaxed or
// CaptureThreadLocal: under CaptureGlobal, a goroutine of the program that lands on
// any thread and makes an unsafe call (an allocation outside gpurt) ends the capture.
const (
	CaptureGlobal      = int(C.GPURT_CAPTURE_MODE_GLOBAL)
	CaptureThreadLocal = int(C.GPURT_CAPTURE_MODE_THREAD_LOCAL)
	CaptureRelaxed     = int(C.GPURT_CAPTURE_MODE_RELAXED)
)

// BeginCapture starts capturing the work queued on s into a graph; gpurt.Malloc on
// s during the capture serves memory from the graph's private pool.
func (s *Stream) BeginCapture(mode int) error {
	defer runtime.KeepAlive(s)
	return call(func() C.gpurt_status_t { return C.gpurt_stream_begin_capture(s.c(), C.int(mode), nil) })
}

// EndCapture ends the capture on s and gives its graph.
func (s *Stream) EndCapture() (*Graph, error) {
	defer runtime.KeepAlive(s)
	var g C.gpurt_graph_t
	if err := call(func() C.gpurt_status_t { return C.gpurt_stream_end_capture(s.c(), &g) }); err != nil {
		return nil, err
	}
	graph := &Graph{owner{handle: unsafe.Pointer(g)}}
	runtime.SetFinalizer(graph, (*Graph).Close)
	return graph, nil
}

// Graph is a captured graph.
type Graph struct{ owner }

// Close destroys the graph (its execs keep what they need).
func (g *Graph) Close() error {
	runtime.SetFinalizer(g, nil)
	return g.closeWith(func(h unsafe.Pointer) C.gpurt_status_t { return C.gpurt_graph_destroy(C.gpurt_graph_t(h)) })
}

// Instantiate makes an executable graph, uploaded on s.
func (g *Graph) Instantiate(s *Stream) (*GraphExec, error) {
	defer runtime.KeepAlive(g)
	defer runtime.KeepAlive(s)
	var e C.gpurt_graph_exec_t
	err := call(func() C.gpurt_status_t {
		return C.gpurt_graph_instantiate(C.gpurt_graph_t(g.get()), 0, s.c(), &e)
	})
	if err != nil {
		return nil, err
	}
	exec := &GraphExec{owner{handle: unsafe.Pointer(e)}}
	runtime.SetFinalizer(exec, (*GraphExec).Close)
	return exec, nil
}

// GraphExec is an instantiated graph.
type GraphExec struct{ owner }

// Launch replays the graph on s.
func (e *GraphExec) Launch(s *Stream) error {
	defer runtime.KeepAlive(e)
	defer runtime.KeepAlive(s)
	return call(func() C.gpurt_status_t {
		return C.gpurt_graph_launch(C.gpurt_graph_exec_t(e.get()), s.c())
	})
}

// Close destroys the executable graph.
func (e *GraphExec) Close() error {
	runtime.SetFinalizer(e, nil)
	return e.closeWith(func(h unsafe.Pointer) C.gpurt_status_t { return C.gpurt_graph_exec_destroy(C.gpurt_graph_exec_t(h)) })
}
