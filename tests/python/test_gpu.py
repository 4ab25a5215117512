"""On a GPU: exact data through gpurt's buffers, kernels and graphs, and interop
with PyTorch and CuPy in both directions (fresh random data, never zeros)."""
import os
import subprocess
import sys

import pytest

import gpurt

np = pytest.importorskip("numpy")


def random_floats(n, seed):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("nbytes", [1, 4095, 4097, (8 << 20) + 3])
def test_round_trip_is_exact(gpu, nbytes):
    data = os.urandom(nbytes)
    with gpurt.DeviceBuffer(nbytes, stream=gpurt.Stream()) as buf:
        buf.copy_from_host(data)
        assert bytes(buf.copy_to_host()) == data
        copy = gpurt.DeviceBuffer(nbytes, stream=buf.stream)
        copy.copy_from_device(buf)
        assert bytes(copy.copy_to_host()) == data
        copy.fill_bytes(0xA5)
        assert bytes(copy.copy_to_host()) == b"\xa5" * nbytes


def test_pinned_staging_to_device(gpu):
    data = random_floats(1 << 16, 1)
    pinned = gpurt.PinnedBuffer(data.nbytes)
    np.frombuffer(pinned.view(), dtype=np.float32)[:] = data
    buf = gpurt.empty(data.shape, "float32")
    buf.copy_from_host(pinned.view())
    assert np.array_equal(buf.to_numpy(), data)


def test_elementwise_and_graph_replay(gpu):
    n = 1 << 20
    a_host, b_host = random_floats(n, 2), random_floats(n, 3)
    s = gpurt.Stream()
    a, b, out = (gpurt.empty(n, "float32", stream=s) for _ in range(3))
    a.copy_from_host(a_host)
    b.copy_from_host(b_host)
    with s:
        gpurt.elementwise("out = a + b", {"a": a, "b": b}, out)
    assert np.array_equal(out.to_numpy(), a_host + b_host)
    g = gpurt.Graph()
    with gpurt.graph(g, stream=s):
        gpurt.elementwise("out = a - b", {"a": a, "b": b}, out)
    c_host = random_floats(n, 4)
    a.copy_from_host(c_host)  # replays read the inputs' current contents
    g.replay(s)
    s.synchronize()
    assert np.array_equal(out.to_numpy(), c_host - b_host)


def test_event_timing_measures_work(gpu):
    s = gpurt.Stream()
    buf = gpurt.DeviceBuffer(256 << 20, stream=s)
    start, end = gpurt.Event(enable_timing=True), gpurt.Event(enable_timing=True)
    start.record(s)
    for _ in range(10):
        buf.fill_bytes(7)
    end.record(s)
    end.synchronize()
    assert start.elapsed_time(end) > 0


def test_torch_reads_and_writes_gpurt_buffers(gpu):
    torch = pytest.importorskip("torch")
    host = random_floats(4096, 5)
    buf = gpurt.empty(host.shape, "float32")
    buf.copy_from_host(host)
    tensor = torch.as_tensor(buf, device="cuda")  # __cuda_array_interface__: no copy
    assert tensor.data_ptr() == buf.ptr
    assert torch.equal(tensor.cpu(), torch.from_numpy(host))
    source = torch.randn(4096, device="cuda", generator=torch.Generator("cuda").manual_seed(6))
    torch.cuda.synchronize()
    buf.copy_from_device(source.data_ptr())
    assert np.array_equal(buf.to_numpy(), source.cpu().numpy())
    s = gpurt.Stream()
    with torch.cuda.stream(torch.cuda.ExternalStream(s.native)):
        assert torch.cuda.current_stream().cuda_stream == s.native


def test_blas_handle_runs_cupys_sgemm_exactly(gpu):
    """gpurt's cuBLAS handle, as an int, drives CuPy's cuBLAS binding on a gpurt
    stream: integer-valued matrices, so the product is exact."""
    cupy = pytest.importorskip("cupy")
    cublas = pytest.importorskip("cupy_backends.cuda.libs.cublas")
    rng = np.random.default_rng()
    a = rng.integers(-8, 9, (96, 64)).astype(np.float32)
    b = rng.integers(-8, 9, (64, 40)).astype(np.float32)
    da, db = cupy.asfortranarray(cupy.asarray(a)), cupy.asfortranarray(cupy.asarray(b))
    dc = cupy.full((96, 40), np.nan, dtype=np.float32, order="F")
    cupy.cuda.Device().synchronize()
    stream = gpurt.Stream()
    handle = gpurt.blas.blas_handle(stream)
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    cublas.sgemm(handle, 0, 0, 96, 40, 64, one.ctypes.data, da.data.ptr, 96, db.data.ptr, 64, zero.ctypes.data, dc.data.ptr, 96)
    stream.synchronize()
    assert (cupy.asnumpy(dc) == a @ b).all()
    # Released, then asked for again: a new handle computes the same.
    gpurt.blas.release_handles()
    dc.fill(np.nan)
    cublas.sgemm(gpurt.blas.blas_handle(stream), 0, 0, 96, 40, 64, one.ctypes.data, da.data.ptr, 96, db.data.ptr, 64, zero.ctypes.data,
                 dc.data.ptr, 96)
    stream.synchronize()
    assert (cupy.asnumpy(dc) == a @ b).all()


def test_cupy_reads_and_writes_gpurt_buffers(gpu):
    cupy = pytest.importorskip("cupy")
    host = random_floats(4096, 7)
    buf = gpurt.empty(host.shape, "float32")
    buf.copy_from_host(host)
    array = cupy.asarray(buf)
    assert array.data.ptr == buf.ptr
    assert np.array_equal(cupy.asnumpy(array), host)
    array *= 2
    cupy.cuda.runtime.deviceSynchronize()
    assert np.array_equal(buf.to_numpy(), host * 2)
    s = gpurt.Stream()
    # CuPy takes a gpurt stream through the CUDA stream protocol (__cuda_stream__).
    external = cupy.cuda.Stream.from_external(s) if hasattr(cupy.cuda.Stream, "from_external") \
        else cupy.cuda.ExternalStream(s.native)
    with external:
        assert cupy.cuda.get_current_stream().ptr == s.native


# PyTorch's allocator can be swapped only before CUDA starts: a fresh process each.
_TORCH_ON_GPURT = """
import gpurt, torch
gpurt.torch.use_as_allocator()
x = torch.randn(1 << 20, device="cuda", generator=torch.Generator("cuda").manual_seed(8))
y = (x * 3).sum()
assert gpurt.memory_allocated() >= 4 << 20, gpurt.memory_allocated()
ref = (x.cpu() * 3).sum()
assert torch.allclose(y.cpu(), ref, rtol=1e-5), (y, ref)
print("ok")
"""

_CUPY_ON_GPURT = """
import gpurt, cupy, numpy
gpurt.cupy.use_as_allocator()
before = gpurt.memory_allocated()
x = cupy.random.default_rng(9).standard_normal(1 << 20, dtype=cupy.float32)
assert gpurt.memory_allocated() >= before + (4 << 20)
assert numpy.allclose(cupy.asnumpy(x * 3), cupy.asnumpy(x) * 3)
print("ok")
"""


# A prefetch stream's tensor read on the main stream, recorded there and dropped: its
# block must not go to the prefetch stream's next tensor while the main stream reads it
# (PyTorch does not pass record_stream to a pluggable allocator; gpurt.torch does).
_TORCH_RECORD_STREAM = """
import gpurt, torch
gpurt.torch.use_as_allocator()
main, side = torch.cuda.current_stream(), torch.cuda.Stream()
n = 1 << 22
# Every kernel loaded first: CUDA loads a module at its kernel's first launch (lazy
# loading), which can wait for the work queued, and the main stream would be done.
torch.full((n,), 1.0, device="cuda").sum()
torch.cuda._sleep(1)
torch.cuda.synchronize()
with torch.cuda.stream(side):
    x = torch.full((n,), 1.0, device="cuda")
main.wait_stream(side)
torch.cuda._sleep(200_000_000)  # the main stream reads x after ~0.1 s
total = x.sum()
x.record_stream(main)
used = x.data_ptr()
del x
with torch.cuda.stream(side):
    y = torch.full((n,), 2.0, device="cuda")
assert y.data_ptr() != used, "the block went to the side stream while the main stream read it"
torch.cuda.synchronize()
assert total.item() == n, total.item()
print("ok")
"""


@pytest.mark.parametrize("framework,script", [("torch", _TORCH_ON_GPURT), ("cupy", _CUPY_ON_GPURT), ("torch", _TORCH_RECORD_STREAM)])
def test_frameworks_allocate_from_gpurt(gpu, framework, script):
    pytest.importorskip(framework)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_managed_memory_is_exact_on_both_sides(gpu):
    data = os.urandom((4 << 20) + 5)
    s = gpurt.Stream()
    with gpurt.ManagedBuffer(len(data)) as managed:
        managed.view()[:] = data  # the host writes in place
        managed.prefetch(0, stream=s)
        copy = gpurt.DeviceBuffer(len(data), stream=s)
        copy.copy_from_device(managed)
        assert bytes(copy.copy_to_host()) == data
        managed.fill_bytes(0x5A)  # the device writes, on the buffer's stream
        managed.prefetch("host")
        managed.stream.synchronize()
        assert bytes(managed.view()) == b"\x5a" * len(data)


@pytest.mark.parametrize("nbytes", [1, 4097, (5 << 20) + 3])
def test_gds_round_trip_is_exact(gpu, tmp_path, nbytes):
    data = os.urandom(nbytes + 11)
    path = tmp_path / "weights.bin"
    path.write_bytes(data)
    stream = gpurt.Stream()
    with gpurt.DeviceBuffer(nbytes, stream=stream) as buf, gpurt.gds.GdsFile(path, os.O_RDWR) as f:
        assert f.read(buf, offset=11) == nbytes
        assert bytes(buf.copy_to_host()) == data[11:]
        assert f.write(buf, offset=3) == nbytes
        f.write_async(buf, offset=nbytes + 100, stream=stream)
        stream.synchronize()
    back = path.read_bytes()
    assert back[3:3 + nbytes] == data[11:] and back[nbytes + 100:] == data[11:]
    assert gpurt.gds.mode() in ("gds", "cufile-compat", "staged")


def test_sanitizer_reports_an_unordered_pair(device):
    a, b = gpurt.Stream(), gpurt.Stream()
    buf = gpurt.DeviceBuffer(256, stream=a)
    before = gpurt.sanitizer.report_count()
    gpurt.sanitizer.enable()
    try:
        gpurt.sanitizer.access(buf, 256, gpurt.sanitizer.WRITE, a, "producer")
        gpurt.sanitizer.access(buf, 256, gpurt.sanitizer.READ, b, "consumer")
        assert gpurt.sanitizer.report_count() == before + 1
    finally:
        gpurt.sanitizer.enable(False)
    with pytest.raises(gpurt.InvalidArgumentError):
        gpurt.sanitizer.access(buf, 8, 7, a)


def test_gds_errors_are_python_exceptions(device, tmp_path):
    with pytest.raises(gpurt.FileError) as e:
        gpurt.gds.GdsFile(tmp_path / "missing.bin")
    assert "missing.bin" in str(e.value)
    path = tmp_path / "ro.bin"
    path.write_bytes(b"x" * 100)
    buf = gpurt.DeviceBuffer(100, stream=gpurt.Stream())
    with gpurt.gds.GdsFile(path) as f:
        with pytest.raises(gpurt.InvalidArgumentError, match="read-only"):
            f.write(buf)


def test_comm_without_nccl_says_so_or_all_reduces_exactly(device):
    from conftest import DRIVER
    try:
        gpurt.comm.version()
    except gpurt.NotSupportedError as e:
        assert "libnccl.so.2" in str(e)
        with pytest.raises(gpurt.NotSupportedError):
            gpurt.comm.Comm.init_all([0])
        with pytest.raises(gpurt.NotSupportedError):
            gpurt.comm.group_end()
        return
    assert DRIVER == "gpu"
    (comm,) = gpurt.comm.Comm.init_all([0])
    data = np.random.default_rng(5).standard_normal(10_001).astype(np.float32)
    stream = gpurt.Stream()
    buf = gpurt.DeviceBuffer(data.nbytes, stream=stream)
    buf.copy_from_host(data.tobytes())
    out = gpurt.DeviceBuffer(data.nbytes, stream=stream)
    comm.all_reduce(buf, out, op=gpurt.comm.MAX, stream=stream)
    assert bytes(out.copy_to_host()) == data.tobytes()  # one rank: the reduction is the input
    assert comm.info() == (0, 1, 0)
    for collective in (lambda o: comm.bcast(buf, o, stream=stream), lambda o: comm.reduce(buf, o, stream=stream),
                       lambda o: comm.all_gather(buf, o, stream=stream),
                       lambda o: comm.reduce_scatter(buf, o, stream=stream)):
        out.fill_bytes(0)
        collective(out)
        assert bytes(out.copy_to_host()) == data.tobytes()  # one rank: each is a copy
    out.fill_bytes(0)
    gpurt.comm.group_start()
    comm.send(buf, 0, stream=stream)
    comm.recv(out, 0, stream=stream)
    gpurt.comm.group_end()
    assert bytes(out.copy_to_host()) == data.tobytes()
    child = comm.split(color=3)
    assert child.info() == (0, 1, 0) and comm.split(gpurt.comm.NOCOLOR) is None
    out.fill_bytes(0)
    child.all_reduce(buf, out, stream=stream)
    assert bytes(out.copy_to_host()) == data.tobytes()
    child.close()
    with pytest.raises(gpurt.CommError, match="did not join"):
        gpurt.comm.Comm.init_rank(gpurt.comm.unique_id(), 2, 0, 0, timeout_ms=1000)
    comm.close()


def test_comm_helpers_move_and_sum_exactly(gpu):
    """torch.cuda.comm's helpers (no NCCL needed; one GPU takes device 0 twice)."""
    data = random_floats(3001, 21)
    buf = gpurt.DeviceBuffer(data.nbytes, dtype="float32")
    buf.copy_from_host(data.tobytes())
    copies = gpurt.comm.broadcast(buf, [0, 0])
    assert [c.to_numpy().tobytes() for c in copies] == [data.tobytes()] * 2
    parts = gpurt.comm.scatter(buf, [0, 0, 0])
    assert [p.shape for p in parts] == [(1001,), (1001,), (999,)]
    assert gpurt.comm.gather(parts).to_numpy().tobytes() == data.tobytes()
    total = gpurt.comm.reduce_add([buf, copies[0], copies[1]])
    assert total.to_numpy().tobytes() == ((data + data) + data).tobytes()
    sizes = [1, 17, 1000, 5]
    many = []
    for i, n in enumerate(sizes):
        many.append(gpurt.DeviceBuffer(4 * n, dtype="float32"))
        many[-1].copy_from_host(random_floats(n, 100 + i).tobytes())
    per_device = gpurt.comm.broadcast_coalesced(many, [0, 0], buffer_size=64)
    for got in per_device:
        assert [g.to_numpy().tobytes() for g in got] == [m.to_numpy().tobytes() for m in many]
    sums = gpurt.comm.reduce_add_coalesced(per_device)
    assert [s.to_numpy().tobytes() for s in sums] == [(m.to_numpy() + m.to_numpy()).tobytes() for m in many]
