"""Graph capture and replay (torch.cuda.CUDAGraph, torch.cuda.graph)."""
from ._handle import Handle, ordinal
from ._native import check, fetch, ffi, lib
from .device import synchronize
from .mempool import MemPool
from .streams import Stream, current_stream

_CAPTURE_MODES = {"global": lib.GPURT_CAPTURE_MODE_GLOBAL, "thread_local": lib.GPURT_CAPTURE_MODE_THREAD_LOCAL,
                  "relaxed": lib.GPURT_CAPTURE_MODE_RELAXED}


class GraphPool(Handle):
    """A private memory pool for captures: graphs captured into the same pool share
    its memory (torch.cuda.graph_pool_handle())."""

    _destroy = "gpurt_graph_pool_destroy"

    def __init__(self, device=None):
        super().__init__(fetch("gpurt_graph_pool_t", lib.gpurt_graph_pool_create, ordinal(device)))


def graph_pool_handle(device=None):
    return GraphPool(device)


class capture_pool:
    """`with gpurt.capture_pool(pool):` makes the captures that gpurt does not begin
    (torch.cuda.graph, CuPy's graphs, a library's own cudaStreamBeginCapture) allocate
    from `pool` (a GraphPool) when their first gpurt allocation is made on this thread
    inside the block, so that their graphs share its memory; outside one, each such
    capture gets a pool of its own (gpurt_graph_pool_bind_thread). The binding in
    force before the block is restored after it."""

    def __init__(self, pool):
        self.pool = pool

    def __enter__(self):
        self._previous = fetch("gpurt_graph_pool_t", lib.gpurt_graph_pool_bound_thread)
        check(lib.gpurt_graph_pool_bind_thread(self.pool.handle))
        return self.pool

    def __exit__(self, *exc):
        check(lib.gpurt_graph_pool_bind_thread(self._previous))


class _Graph(Handle):
    _destroy = "gpurt_graph_destroy"


class _GraphExec(Handle):
    _destroy = "gpurt_graph_exec_destroy"


class Graph:
    """A captured graph (torch.cuda.CUDAGraph): `capture_begin(stream)`, work queued
    on that stream, `capture_end()`, then `replay()` as often as wanted. Allocations
    made during capture come from the graph's pool and stay valid for replays."""

    def __init__(self):
        self._graph = self._exec = self._stream = None
        self.pool = None

    def capture_begin(self, stream=None, pool=None, capture_error_mode="global"):
        """`pool`: a GraphPool (or None: the graph's own pool), or a MemPool, whose
        memory the graph then shares in stream order with the stream's other work
        (gpurt_stream_begin_capture_shared: replay on the capture stream)."""
        self._stream = current_stream() if stream is None else stream
        self.pool = pool
        mode = _CAPTURE_MODES[capture_error_mode]
        if isinstance(pool, MemPool):
            check(lib.gpurt_stream_begin_capture_shared(self._stream.handle, mode, pool.handle))
        else:
            check(lib.gpurt_stream_begin_capture(self._stream.handle, mode, ffi.NULL if pool is None else pool.handle))

    def capture_end(self):
        """Ends the capture and instantiates the graph (uploaded on the capture stream)."""
        self._graph = _Graph(fetch("gpurt_graph_t", lib.gpurt_stream_end_capture, self._stream.handle))
        self._exec = _GraphExec(fetch("gpurt_graph_exec_t", lib.gpurt_graph_instantiate, self._graph.handle, 0,
                                    self._stream.handle))

    def replay(self, stream=None):
        """Launches the graph on `stream` (default: the current stream)."""
        check(lib.gpurt_graph_launch(self._instantiated().handle, (current_stream() if stream is None else stream).handle))

    def upload(self, stream=None):
        check(lib.gpurt_graph_upload(self._instantiated().handle, (current_stream() if stream is None else stream).handle))

    def debug_dump(self, path, verbose=False):
        """Writes the graph in Graphviz dot format."""
        if self._graph is None:
            raise RuntimeError("no graph was captured")
        check(lib.gpurt_graph_debug_dot_print(self._graph.handle, str(path).encode(), int(verbose)))

    def reset(self):
        for part in (self._exec, self._graph):
            if part is not None:
                part.close()
        self._graph = self._exec = None

    def _instantiated(self):
        if self._exec is None:
            raise RuntimeError("replay before capture_end")
        return self._exec


class graph:
    """`with gpurt.graph(g):` captures the block into `g` on a side stream (made
    current for the block), as torch.cuda.graph: `pool` shares memory with other
    graphs (a GraphPool) or, a MemPool, with the stream's other work (see
    Graph.capture_begin); `stream` chooses the capture stream."""

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.graph, self.pool, self.mode = cuda_graph, pool, capture_error_mode
        self.stream = Stream() if stream is None else stream

    def __enter__(self):
        synchronize()
        self.stream.__enter__()
        self.graph.capture_begin(self.stream, self.pool, self.mode)
        return self.graph

    def __exit__(self, *exc):
        try:
            self.graph.capture_end()
        finally:
            self.stream.__exit__(*exc)


_CONDITIONAL_TYPES = {"if": lib.GPURT_GRAPH_CONDITIONAL_IF, "while": lib.GPURT_GRAPH_CONDITIONAL_WHILE,
                      "switch": lib.GPURT_GRAPH_CONDITIONAL_SWITCH}


def conditional_handle(stream=None, default=0, assign_default=False):
    """A conditional handle for the graph `stream` captures into now (an int: pass it to
    your kernel's cudaGraphSetConditional, or to `conditional_set`)."""
    stream = current_stream() if stream is None else stream
    flags = lib.GPURT_GRAPH_CONDITIONAL_ASSIGN_DEFAULT if assign_default else 0
    return fetch("unsigned long long", lib.gpurt_graph_conditional_handle_create, stream.handle, int(default), flags)


def conditional_set(handle, value, stream=None):
    """Captures gpurt's kernel that sets `handle` from the unsigned int at `value` (a
    device buffer or address) when the graph runs."""
    stream = current_stream() if stream is None else stream
    address = value.ptr if hasattr(value, "ptr") else int(value)
    check(lib.gpurt_graph_conditional_set(stream.handle, handle, ffi.cast("unsigned int *", address)))


class conditional:
    """`with gpurt.conditional(handle, "while", stream=s):` captures the block on `s` as
    the body of a conditional node ("if", "while" or "switch"; `bodies` for an IF's else
    or a SWITCH's cases, each after `next_body()`), as torch.cond / torch.while_loop
    are captured."""

    def __init__(self, handle, kind, bodies=1, stream=None):
        self.handle, self.kind, self.bodies = handle, _CONDITIONAL_TYPES[kind], int(bodies)
        self.stream = current_stream() if stream is None else stream

    def __enter__(self):
        check(lib.gpurt_graph_conditional_begin(self.stream.handle, self.handle, self.kind, self.bodies))
        return self

    def next_body(self):
        check(lib.gpurt_graph_conditional_next(self.stream.handle))

    def __exit__(self, *exc):
        check(lib.gpurt_graph_conditional_end(self.stream.handle))
