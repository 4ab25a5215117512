"""Device-present paths, on the stand-in driver in CI and on a GPU in the GPU suite:
handles, ownership, statistics and the misuse of each."""
import gc
import os
import random
import subprocess
import sys
import threading
import time

import pytest

import gpurt


def test_device_properties_and_context(device):
    props = gpurt.get_device_properties(0)
    assert isinstance(props.name, str) and props.name
    assert props.total_memory > 0 and props.multiprocessor_count > 0
    assert len(props.uuid) == 16 and len(props.max_grid_dim) == 3
    assert gpurt.get_device_capability(0) == (props.major, props.minor)
    free, total = gpurt.mem_get_info()
    assert 0 < free <= total
    before = gpurt.current_device()
    with gpurt.Device(0) as d:
        assert gpurt.current_device() == 0 and d.name == props.name
    assert gpurt.current_device() == before
    with pytest.raises(gpurt.InvalidArgumentError):
        gpurt.set_device(gpurt.device_count())


def test_stream_lifecycle(device):
    s = gpurt.Stream(priority=0)
    assert s.device == 0 and s.non_blocking and s.native != 0
    assert s.__cuda_stream__() == (0, s.native)
    assert s.query()
    s.synchronize()
    blocking = gpurt.Stream(non_blocking=False)
    assert not blocking.non_blocking
    s.close()
    with pytest.raises(gpurt.InvalidHandleError):
        s.query()
    s.close()  # closing twice is harmless


def test_current_stream_follows_the_with_block(device):
    s = gpurt.Stream()
    outer = gpurt.current_stream()
    with gpurt.stream(s):
        assert gpurt.current_stream() == s
        with gpurt.Stream() as inner:
            assert gpurt.current_stream() == inner
        assert gpurt.current_stream() == s
    assert gpurt.current_stream() == outer
    seen = []
    thread = threading.Thread(target=lambda: seen.append(gpurt.current_stream()))
    with s:
        thread.start()
        thread.join()
    assert seen[0] != s  # the current stream is per thread


def test_borrowed_streams_are_not_destroyed(device):
    pooled = gpurt.stream_from_pool()
    native = pooled.native
    del pooled
    gc.collect()
    assert gpurt.stream_from_pool().query()
    legacy = gpurt.default_stream()
    assert legacy.native in (0, 1) and legacy.__cuda_stream__() == (0, legacy.native)  # CU_STREAM_LEGACY
    owned = gpurt.Stream()
    with owned:
        current = gpurt.current_stream()
        del current
        gc.collect()
        assert owned.query()  # dropping the borrowed view left the stream alive
    external = gpurt.ExternalStream(owned)
    assert external.native == owned.native
    external.close()
    assert owned.query()  # closing a wrapper releases the handle, not the stream
    assert native != 0


def test_events(device):
    s = gpurt.Stream()
    start, end = gpurt.Event(enable_timing=True), gpurt.Event(enable_timing=True)
    start.record(s)
    end.record(s)
    end.synchronize()
    assert end.query() and end.device == 0
    assert start.elapsed_time(end) >= 0
    other = gpurt.Stream()
    other.wait_event(end)
    other.wait_stream(s)
    e = s.record_event()
    e.wait()
    with pytest.raises(TypeError):
        start.elapsed_time(s)
    e.close()
    with pytest.raises(gpurt.InvalidHandleError):
        e.query()
    with s:
        marker = gpurt.Event()
        marker.record()  # on the current stream


def test_device_buffer_changes_the_statistics_exactly(device):
    gpurt.empty_cache()
    base = gpurt.memory_allocated()
    s = gpurt.Stream()
    buf = gpurt.DeviceBuffer(1 << 20, stream=s)
    assert gpurt.memory_allocated() == base + (1 << 20)
    stats = gpurt.memory_stats()
    assert stats["allocated_bytes.all.current"] == base + (1 << 20)
    assert stats["allocation.all.current"] >= 1 and stats["num_ooms"] >= 0
    assert gpurt.max_memory_allocated() >= base + (1 << 20)
    assert gpurt.memory_reserved() >= gpurt.memory_allocated()
    assert "Allocated memory" in gpurt.memory_summary()
    interface = buf.__cuda_array_interface__
    assert interface["data"] == (buf.ptr, False) and interface["shape"] == (1 << 20,)
    assert interface["typestr"] == "|u1" and interface["stream"] == s.native
    buf.free()
    assert gpurt.memory_allocated() == base
    with pytest.raises(gpurt.InvalidHandleError):
        buf.ptr
    buf.free()
    gpurt.empty_cache()
    assert gpurt.memory_reserved() == gpurt.memory_allocated() == base


def test_memory_report_moves_by_what_was_made(device):
    gpurt.empty_cache()
    before = gpurt.memory_report(0)
    assert before["device_total"] == gpurt.mem_get_info()[1] and before["local_memory"] > 0
    size = random.randrange(1, 4096) * 512
    buf = gpurt.DeviceBuffer(size)
    pool = gpurt.MemPool()
    with gpurt.use_mem_pool(pool):
        pooled = gpurt.DeviceBuffer(4096)
    vb = gpurt.VBuffer(64 << 20)
    vb.map(0, vb.granularity)
    after = gpurt.memory_report(0)
    assert after["default_pool_live"] - before["default_pool_live"] == size + vb.granularity  # the pool counts a vbuffer's mappings
    assert after["user_pools_live"] - before["user_pools_live"] == 4096
    assert after["vbuffers_mapped"] - before["vbuffers_mapped"] == vb.granularity
    if after["process"] is None:  # no NVML figure (the stand-in driver)
        assert after["unattributed"] is None
    else:
        assert after["process"] >= after["default_pool_reserved"] + after["user_pools_reserved"]
    with pytest.raises(gpurt.InvalidArgumentError):
        gpurt.memory_report(gpurt.device_count())
    pooled.free()
    buf.free()
    vb.close()


def test_typed_buffers(device):
    a = gpurt.empty((4, 8), "float32")
    assert a.nbytes == 128 and a.__cuda_array_interface__["typestr"] == "<f4"
    assert a.__cuda_array_interface__["shape"] == (4, 8)
    assert a.__cuda_array_interface__["stream"] == 1  # the legacy default stream is 1 in the interface
    assert gpurt.DeviceBuffer(0).ptr == 0


def test_out_of_memory_raises_and_changes_nothing(device):
    before = gpurt.memory_stats()
    with pytest.raises(gpurt.OutOfMemoryError) as raised:
        gpurt.DeviceBuffer(1 << 60)
    assert "tried to allocate 1.00 EiB" in str(raised.value)
    after = gpurt.memory_stats()
    assert after["num_ooms"] == before["num_ooms"] and after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]


def test_buffers_are_freed_by_the_collector(device):
    base = gpurt.memory_allocated()
    for _ in range(100):
        gpurt.DeviceBuffer(4096)
    gc.collect()
    assert gpurt.memory_allocated() == base


def test_pinned_memory(device):
    pool = gpurt.PinnedPool()
    buf = pool.malloc(4096)
    view = memoryview(buf.view())
    view[:5] = b"hello"
    assert bytes(buf.view()[:5]) == b"hello"
    buf.record_stream(gpurt.Stream())
    usage = pool.usage()
    assert usage["used_bytes"] >= 4096 and pool.stats()["allocations.current"] == 1
    buf.free()
    pool.empty_cache()
    assert pool.usage()["total_bytes"] == 0
    with pytest.raises(gpurt.InvalidHandleError):
        buf.view()
    with gpurt.PinnedBuffer(100) as default_pooled:
        assert default_pooled.ptr != 0
    pool.close()
    with pytest.raises(gpurt.InvalidHandleError):
        pool.malloc(16)


def test_graph_capture_allocates_from_its_pool(device):
    s = gpurt.Stream()
    g = gpurt.Graph()
    pool = gpurt.graph_pool_handle()
    with gpurt.graph(g, pool=pool, stream=s):
        assert gpurt.current_stream() == s and s.is_capturing()
        inside = gpurt.DeviceBuffer(1024)
    assert not s.is_capturing()
    g.replay(s)
    g.upload(s)
    s.synchronize()
    g.reset()
    with pytest.raises(RuntimeError):
        g.replay()
    inside.free()


def test_graph_captured_into_a_mem_pool_shares_its_memory(device):
    s = gpurt.Stream()
    pool = gpurt.MemPool()
    g = gpurt.Graph()
    with gpurt.graph(g, pool=pool, stream=s):
        inside = gpurt.DeviceBuffer(4096, stream=s, pool=pool)
        ptr = inside.ptr
        inside.free()
    after = gpurt.DeviceBuffer(4096, stream=s, pool=pool)
    assert after.ptr == ptr  # the block freed during the capture serves the stream next
    after.free()
    total = pool.usage()["total_bytes"]
    pool.empty_cache()
    assert pool.usage()["total_bytes"] == total  # kept mapped for the graph's replays
    g.replay(s)
    s.synchronize()
    g.reset()
    pool.empty_cache()
    assert pool.usage()["total_bytes"] == 0
    pool.close()


def test_foreign_captures_share_the_bound_pool(device):
    """Captures begun with the driver's own call (as torch.cuda.graph begins them)
    allocate from the pool gpurt.capture_pool binds, and keep it until the driver
    destroys their graphs; outside the block each gets a pool of its own."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    s = gpurt.Stream()
    native = ctypes.c_void_p(s.native)

    def foreign_capture():
        graph = ctypes.c_void_p()
        assert cuda.cuStreamBeginCapture_v2(native, 2) == 0  # relaxed
        block = gpurt.DeviceBuffer(1 << 20, stream=s)
        ptr = block.ptr
        block.free()
        assert cuda.cuStreamEndCapture(native, ctypes.byref(graph)) == 0
        return ptr, graph

    gpurt.empty_cache()
    before = gpurt.memory_stats(0)["reserved_bytes.all.current"]
    pool = gpurt.graph_pool_handle()
    with gpurt.capture_pool(pool) as bound:
        assert bound is pool
        first, g1 = foreign_capture()
        second, g2 = foreign_capture()
    third, g3 = foreign_capture()
    assert first == second  # one pool, reused across the captures
    assert third != first  # a capture of its own outside the block
    pool.close()
    for g in (g1, g2, g3):
        assert cuda.cuGraphDestroy(g) == 0
    # The driver runs a graph's user-object destructor later, on a thread of its own
    # (nothing waits for it): gpurt gives the pools back at its next collection after.
    deadline = time.monotonic() + 5
    while gpurt.memory_stats(0)["reserved_bytes.all.current"] != before and time.monotonic() < deadline:
        time.sleep(0.001)
        gpurt.empty_cache()
    assert gpurt.memory_stats(0)["reserved_bytes.all.current"] == before


def test_streams_from_many_threads(device):
    errors = []

    def work():
        try:
            for _ in range(50):
                with gpurt.Stream() as s, gpurt.stream(s):
                    buf = gpurt.DeviceBuffer(512)
                    gpurt.Event().record()
                    buf.free()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_mem_pools_route_count_and_refuse_to_go_while_used(device):
    s = gpurt.Stream()
    before = gpurt.memory_allocated()
    pool = gpurt.MemPool(config="max_split_size_mb:64", limit=256 << 20)
    assert pool.device == 0 and gpurt.MemPool.default() == gpurt.MemPool.default()
    with gpurt.use_mem_pool(pool):
        routed = gpurt.DeviceBuffer(4096, stream=s)
        with gpurt.use_mem_pool(gpurt.MemPool.default()):
            outside = gpurt.DeviceBuffer(4096, stream=s)
    direct = gpurt.DeviceBuffer(1 << 20, stream=s, pool=pool)
    assert pool.stats()["allocation.all.current"] == 2
    assert pool.usage()["used_bytes"] == 4096 + (1 << 20)
    assert gpurt.memory_allocated() == before + 2 * 4096 + (1 << 20)
    with pytest.raises(gpurt.InvalidArgumentError, match="2 live allocation"):
        pool.close()
    assert pool.used_bytes() == 4096 + (1 << 20), "a refused close changes nothing"
    with pytest.raises(gpurt.OutOfMemoryError, match="limit"):
        gpurt.DeviceBuffer(512 << 20, stream=s, pool=pool)
    for buf in (routed, outside, direct):
        buf.free()
    s.synchronize()
    pool.free_all_blocks()
    assert pool.total_bytes() == 0
    pool.close()
    assert gpurt.memory_allocated() == before
    with pytest.raises(gpurt.InvalidHandleError):
        pool.usage()
    with pytest.raises(gpurt.InvalidArgumentError):
        gpurt.MemPool(config="expandable_segments:Maybe")


def test_a_pools_options_apply_over_the_processs(device):
    s = gpurt.Stream()
    gpurt.set_allocator_config("expandable_segments:True")
    try:
        with gpurt.MemPool(config="exact_segments:True") as pool:
            first = gpurt.DeviceBuffer(3 << 20, stream=s, pool=pool)
            second = gpurt.DeviceBuffer(3 << 20, stream=s, pool=pool)
            assert int(second) == int(first) + (3 << 20), "expandable, from the process's options"
            # 4 MiB, then the 2 MiB the second block lacks: no step of 8 MiB.
            assert pool.stats()["reserved_bytes.all.current"] == 6 << 20
            first.free()
            second.free()
            s.synchronize()
    finally:
        gpurt.set_allocator_config("")


@pytest.mark.parametrize("upstream", ["async", "managed"])
def test_mem_pools_over_other_upstreams(device, upstream):
    s = gpurt.Stream()
    before = gpurt.memory_allocated()
    with gpurt.MemPool(upstream=upstream) as pool:
        buf = gpurt.DeviceBuffer(1 << 20, stream=s, pool=pool)
        assert pool.usage()["used_bytes"] == 1 << 20
        assert gpurt.memory_allocated() == before + (1 << 20)
        buf.free()
        s.synchronize()
    assert gpurt.memory_allocated() == before
    with pytest.raises(ValueError):
        gpurt.MemPool(upstream="elsewhere")


def test_managed_buffers_count_prefetch_advise_and_check_their_arguments(device):
    before = gpurt.memory_allocated()
    buf = gpurt.ManagedBuffer(shape=(1024,), dtype="float32")
    assert buf.nbytes == 4096 and len(buf.view()) == 4096
    assert gpurt.memory_allocated() == before + 4096
    buf.advise("preferred_location", 0)
    buf.advise("accessed_by", "host")
    buf.prefetch(0)
    buf.prefetch("host", stream=gpurt.Stream())
    with pytest.raises(ValueError):
        buf.advise("sideways")
    with pytest.raises(gpurt.InvalidArgumentError):
        buf.prefetch(gpurt.device_count())
    with pytest.raises(ValueError):
        gpurt.ManagedBuffer(64, attach="nowhere")
    buf.free()
    assert gpurt.memory_allocated() == before


_IPC_CONSUMER = r"""
import random, sys
import gpurt
handle, nbytes, seed = bytes.fromhex(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
buf = gpurt.IpcBuffer(handle, nbytes)
if sys.argv[4] == "gpu":
    assert bytes(buf.copy_to_host()) == random.Random(seed).randbytes(nbytes), "other bytes than the producer's"
print("open", flush=True)
sys.stdin.readline()
buf.free()
print("closed", flush=True)
sys.stdin.readline()
"""


def test_ipc_buffers_are_kept_while_another_process_holds_them(device):
    from conftest import DRIVER
    nbytes, seed = (1 << 20) + 3, random.randrange(1 << 30)
    buf = gpurt.DeviceBuffer(nbytes)
    if DRIVER == "gpu":
        buf.copy_from_host(random.Random(seed).randbytes(nbytes))
    handle = buf.ipc_handle()
    assert len(handle) == 256 and handle == gpurt.ipc_handle(buf.ptr)
    with pytest.raises(gpurt.InvalidArgumentError, match="this process exported"):
        gpurt.IpcBuffer(handle, nbytes)
    with pytest.raises(ValueError):
        gpurt.IpcBuffer(handle[:100], nbytes)
    child = subprocess.Popen([sys.executable, "-c", _IPC_CONSUMER, handle.hex(), str(nbytes), str(seed), DRIVER],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "open"
        buf.free()
        kept = gpurt.ipc_kept()
        assert kept[0] == 1 and kept[1] >= nbytes, kept
        gpurt.ipc_collect()
        assert gpurt.ipc_kept()[0] == 1, "the other process still holds it"
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "closed"
        gpurt.ipc_collect()
        assert gpurt.ipc_kept() == (0, 0)
    finally:
        child.stdin.close()
        assert child.wait(timeout=60) == 0


def test_the_allocator_backend_is_named(device):
    assert gpurt.allocator_backend() == "native"
    with pytest.raises(gpurt.InvalidArgumentError, match="chosen once"):
        gpurt.set_allocator_config("backend:cudaMallocAsync")


def test_random_generators_seed_restore_and_refuse_bad_fills(device):
    gpurt.random.manual_seed(1234)
    assert gpurt.random.initial_seed() == 1234 and gpurt.random.get_rng_state() == (1234, 0)
    with gpurt.random.Generator(seed=5) as gen:
        gpurt.random.set_rng_state((9, 77), gen)
        assert gpurt.random.get_rng_state(gen) == (9, 77)
        ints = gpurt.DeviceBuffer(shape=16, dtype="int32")
        with pytest.raises(gpurt.InvalidArgumentError, match="floating-point"):
            gpurt.random.uniform_(ints, gen)
        with pytest.raises(gpurt.InvalidArgumentError, match="low < high"):
            gpurt.random.random_(ints, 5, 5, gen)
        with pytest.raises(TypeError):
            gpurt.random.uniform_(gpurt.DeviceBuffer(16))
        assert gpurt.random.get_rng_state(gen) == (9, 77), "a refused fill draws nothing"
    with pytest.raises(gpurt.InvalidHandleError):
        gpurt.random.get_rng_state(gen)


def test_random_fills_repeat_with_their_seed(gpu):
    import numpy
    out = gpurt.DeviceBuffer(shape=100_001, dtype="float32")
    gpurt.random.manual_seed(99)
    first = gpurt.random.uniform_(out).to_numpy()
    assert ((first >= 0) & (first < 1)).all() and abs(first.mean() - 0.5) < 0.01
    gpurt.random.manual_seed(99)
    assert numpy.array_equal(gpurt.random.uniform_(out).to_numpy(), first)
    perm = gpurt.random.randperm_(gpurt.DeviceBuffer(shape=1000, dtype="int64")).to_numpy()
    assert sorted(perm.tolist()) == list(range(1000))
    normal = gpurt.random.normal_(gpurt.DeviceBuffer(shape=100_000, dtype="float64"), 2.0, 3.0).to_numpy()
    assert abs(normal.mean() - 2.0) < 0.1 and abs(normal.std() - 3.0) < 0.1


def test_telemetry_reads_nvml_or_says_why_not(device):
    from conftest import DRIVER
    if DRIVER == "stub":
        with pytest.raises(gpurt.NotSupportedError, match="libnvidia-ml"):
            gpurt.telemetry()
        return
    t = gpurt.telemetry()
    assert 0 < t.memory_used <= t.memory_total and 0 < t.temperature_c < 120
    assert gpurt.utilization() in range(0, 101) and gpurt.power_draw() > 0 and gpurt.clock_rate() > 0
    assert gpurt.device_memory_used() > 0
    assert all(pid > 0 for pid, _ in gpurt.list_gpu_processes())


def test_arch_list_and_bf16(device):
    from conftest import DRIVER
    major = gpurt.get_device_capability()[0]
    assert gpurt.is_bf16_supported() == (major >= 8)
    if DRIVER == "gpu":
        assert "sm_%d%d" % gpurt.get_device_capability() in gpurt.get_arch_list()


def test_elementwise_writes_several_outputs(gpu):
    import numpy
    a = numpy.arange(1000, dtype=numpy.float32) / 7
    b = numpy.flip(a).copy()
    da, db = gpurt.DeviceBuffer(shape=1000, dtype="float32"), gpurt.DeviceBuffer(shape=1000, dtype="float32")
    da.copy_from_host(a)
    db.copy_from_host(b)
    s, d = gpurt.DeviceBuffer(shape=1000, dtype="float32"), gpurt.DeviceBuffer(shape=1000, dtype="float32")
    gpurt.elementwise("s = a + b; d = s * a", {"a": da, "b": db}, [s, d])
    assert numpy.array_equal(s.to_numpy(), a + b) and numpy.array_equal(d.to_numpy(), (a + b) * a)


def test_memory_history_snapshot_and_annotations(device, tmp_path):
    """torch.cuda.memory's history calls: a snapshot with PyTorch's structure, whose
    live blocks carry the annotation they were allocated under."""
    gpurt.empty_cache()
    gpurt.record_memory_history(max_entries=1000, clear=True)
    try:
        with gpurt.annotate("request 1"):
            with gpurt.annotate("layer 2"):
                kept = [gpurt.DeviceBuffer(size) for size in (1000, 70_000, 3 << 20)]
        freed = gpurt.DeviceBuffer(4096)
        del freed
    finally:
        gpurt.record_memory_history(enabled=False)
    snap = gpurt.memory_snapshot()
    live = {b["address"]: b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"}
    for buf in kept:
        block = live[buf.__cuda_array_interface__["data"][0]]
        assert block["annotation"] == "request 1 > layer 2"
        assert block["requested_size"] == buf.nbytes
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert actions.count("alloc") == 4 and actions.count("free_requested") == 1
    assert snap["gpurt"]["allocated_bytes"] == gpurt.memory_allocated()
    for fmt in ("json", "pickle", "html"):
        gpurt.dump_snapshot(tmp_path / f"s.{fmt}", format=fmt)
        assert (tmp_path / f"s.{fmt}").stat().st_size > 100
    with pytest.raises(ValueError):
        gpurt.dump_snapshot(tmp_path / "s.x", format="x")


def test_comm_helpers_hand_out_owned_buffers(device):
    buf = gpurt.DeviceBuffer(4000, dtype="float32")
    copies = gpurt.comm.broadcast(buf, [0, 0])
    assert [c.nbytes for c in copies] == [4000, 4000] and copies[0].ptr != copies[1].ptr
    parts = gpurt.comm.scatter(buf, [0, 0], chunk_sizes=[1000, 0])
    assert parts[1] is None and parts[0].nbytes == 4000
    with pytest.raises(gpurt.InvalidArgumentError, match="add up"):
        gpurt.comm.scatter(buf, [0, 0], chunk_sizes=[1, 1])
    with pytest.raises(ValueError, match="dtype"):
        gpurt.comm.reduce_add([gpurt.DeviceBuffer(3, dtype="uint8")])


def test_math_library_handles_check_first_then_name_the_missing_library(device):
    """Bad arguments fail before any library is looked for; where cuBLAS is missing
    (CI's stand-in driver) each call says so; where it is there, one handle per
    thread, bound to each stream asked for."""
    with pytest.raises(ValueError, match="unknown math library"):
        gpurt.blas.library_version("cufft")
    with pytest.raises(TypeError):
        gpurt.blas.blas_handle(object())
    closed = gpurt.Stream()
    closed.close()
    with pytest.raises(gpurt.InvalidHandleError):
        gpurt.blas.blas_handle(closed)
    gpurt.blas.set_allow_tf32(True)
    assert gpurt.blas.get_allow_tf32()
    gpurt.blas.set_allow_tf32(False)
    assert not gpurt.blas.get_allow_tf32()
    try:
        gpurt.blas.library_version("cublas")
    except gpurt.NotSupportedError:
        with pytest.raises(gpurt.NotSupportedError, match="cuBLAS"):
            gpurt.current_blas_handle()
        with pytest.raises(gpurt.NotSupportedError, match="cuBLASLt"):
            gpurt.blas.blaslt_handle()
        gpurt.blas.release_handles()  # nothing made: nothing to give back
        return
    s1, s2 = gpurt.Stream(), gpurt.Stream()
    handle = gpurt.blas.blas_handle(s1)
    assert handle != 0 and gpurt.blas.blas_handle(s2) == handle
    assert gpurt.get_cublas_handle() == gpurt.current_blas_handle() == handle
    lt, workspace, size = gpurt.blas.blaslt_handle(s1)
    assert lt not in (0, handle) and workspace != 0 and size > 0
    created, idle = gpurt.blas.handle_counts("cublas")
    assert created >= 1 and idle >= 0
    gpurt.blas.release_handles()
    assert gpurt.blas.blas_handle(s1) != 0 and gpurt.blas.handle_counts("cublas")[0] == created + 1


def test_pools_sleep_and_wake_keeping_addresses_and_with_offload_their_bytes(device):
    from conftest import DRIVER
    s = gpurt.Stream()
    payload = random.randbytes(3 << 20)
    with gpurt.MemPool(config="expandable_segments:True") as pool:
        kept = gpurt.DeviceBuffer(len(payload), stream=s, pool=pool)
        freed_asleep = gpurt.DeviceBuffer(1 << 20, stream=s, pool=pool)
        kept.copy_from_host(payload)
        address = int(kept)
        with pool.sleeping(offload=True):
            assert pool.asleep
            stats = pool.stats()
            assert stats["reserved_bytes.all.current"] == 0
            # Only the live blocks' bytes are copied; all the mapped memory sleeps.
            assert stats["asleep_bytes"] >= stats["offloaded_bytes"] >= len(payload) + (1 << 20)
            assert stats["offload_host_bytes"] >= stats["offloaded_bytes"]
            with pytest.raises(gpurt.InvalidArgumentError, match="asleep"):
                gpurt.DeviceBuffer(4096, stream=s, pool=pool)
            with pytest.raises(gpurt.InvalidArgumentError, match="wake it"):
                pool.touch()  # the owner's own sleep: work on its memory would fault
            freed_asleep.free()
        pool.touch()
        assert not pool.asleep and int(kept) == address
        if DRIVER == "gpu":
            assert bytes(kept.copy_to_host()) == payload
        pool.sleep(offload=False)
        with pytest.raises(gpurt.InvalidArgumentError, match="already asleep"):
            pool.sleep()
        pool.wake()
        with pytest.raises(gpurt.InvalidArgumentError, match="not asleep"):
            pool.wake()
        kept.free()
        s.synchronize()
    with gpurt.MemPool(config="expandable_segments:False") as plain:
        held = gpurt.DeviceBuffer(1 << 20, stream=s, pool=plain)
        with pytest.raises(gpurt.NotSupportedError, match=hex(int(held))):
            plain.sleep()
        assert not plain.asleep
        held.free()
        s.synchronize()


def test_the_device_sleeps_whole_and_wakes_what_it_put_to_sleep(device):
    from conftest import DRIVER
    s = gpurt.Stream()
    payload = random.randbytes(2 << 20)
    with gpurt.MemPool(config="expandable_segments:True") as pool, gpurt.MemPool(config="expandable_segments:True") as own:
        in_pool = gpurt.DeviceBuffer(len(payload), stream=s, pool=pool)
        in_default = gpurt.DeviceBuffer(len(payload), stream=s)
        in_pool.copy_from_host(payload)
        in_default.copy_from_host(payload)
        own.sleep(offload=False)
        assert not gpurt.device_is_asleep()
        with gpurt.device_sleeping(offload=True):
            assert gpurt.device_is_asleep() and pool.asleep
            assert gpurt.memory_stats()["reserved_bytes.all.current"] == 0
            with pytest.raises(gpurt.InvalidArgumentError, match="asleep already"):
                gpurt.device_sleep()
            with pytest.raises(gpurt.InvalidArgumentError, match="asleep"):
                gpurt.DeviceBuffer(4096, stream=s)
        assert not gpurt.device_is_asleep() and not pool.asleep
        assert own.asleep, "a pool asleep before keeps its own sleep"
        own.wake()
        with pytest.raises(gpurt.InvalidArgumentError, match="not asleep"):
            gpurt.device_wake()
        if DRIVER == "gpu":
            assert bytes(in_pool.copy_to_host()) == payload and bytes(in_default.copy_to_host()) == payload
        in_pool.free()
        in_default.free()
        s.synchronize()


def test_a_buffer_marked_discard_is_not_offloaded(device):
    from conftest import DRIVER
    s = gpurt.Stream()
    payload = random.randbytes(1 << 20)
    with gpurt.MemPool(config="expandable_segments:True") as pool:
        kept = gpurt.DeviceBuffer(len(payload), stream=s, pool=pool)
        cache = gpurt.DeviceBuffer(8 << 20, stream=s, pool=pool)
        kept.copy_from_host(payload)
        cache.discard_on_sleep()
        pool.sleep(offload=True)
        assert pool.stats()["offloaded_bytes"] < 2 << 20, "the 8 MiB cache is not copied"
        pool.wake()
        if DRIVER == "gpu":
            assert bytes(kept.copy_to_host()) == payload
        cache.free()
        with pytest.raises(gpurt.InvalidHandleError, match="freed"):
            cache.discard_on_sleep()
        kept.free()
        s.synchronize()


def test_a_buffer_promised_read_only_keeps_its_host_copy_across_sleeps(device):
    from conftest import DRIVER
    s = gpurt.Stream()
    weights, other = random.randbytes(4 << 20), random.randbytes(1 << 20)
    with gpurt.MemPool(config="expandable_segments:True") as pool:
        w = gpurt.DeviceBuffer(len(weights), stream=s, pool=pool)
        o = gpurt.DeviceBuffer(len(other), stream=s, pool=pool)
        w.copy_from_host(weights)
        w.read_only()
        for round in range(3):
            if round == 2:  # taken back, written, promised again: copied again
                w.read_only(False)
                weights = random.randbytes(len(weights))
                w.copy_from_host(weights)
                w.read_only()
            other = random.randbytes(len(other))
            o.copy_from_host(other)
            pool.sleep(offload=True)
            pool.wake()
            if DRIVER == "gpu":
                assert bytes(w.copy_to_host()) == weights and bytes(o.copy_to_host()) == other
        o.free()
        with pytest.raises(gpurt.InvalidHandleError, match="freed"):
            o.read_only()
        w.free()
        s.synchronize()


def test_batched_copies_move_every_byte_and_refuse_overlaps(device):
    from conftest import DRIVER
    s = gpurt.Stream()
    piece = 16 << 10
    payload = random.randbytes(4 * piece)
    a = gpurt.DeviceBuffer(4 * piece, stream=s)
    b = gpurt.DeviceBuffer(4 * piece, stream=s)
    a.copy_from_host(payload)
    # Piece i of a goes to piece 3 - i of b.
    gpurt.memcpy_batch_async([int(b) + (3 - i) * piece for i in range(4)], [int(a) + i * piece for i in range(4)], [piece] * 4, stream=s)
    s.synchronize()
    if DRIVER == "gpu":
        got = bytes(b.copy_to_host())
        assert all(got[(3 - i) * piece:(4 - i) * piece] == payload[i * piece:(i + 1) * piece] for i in range(4))
    with pytest.raises(gpurt.InvalidArgumentError, match="overlapping"):
        gpurt.memcpy_batch_async([int(b), int(b) + piece // 2], [int(a), int(a) + piece], [piece, piece], stream=s)
    with pytest.raises(ValueError):
        gpurt.memcpy_batch_async([int(b)], [], [piece], stream=s)
    a.free()
    b.free()
    s.synchronize()


def test_green_contexts_share_sms_and_their_streams_work(device):
    with pytest.raises(gpurt.InvalidArgumentError):
        gpurt.GreenContext(0)
    with pytest.raises(gpurt.InvalidArgumentError):
        gpurt.GreenContext.split([0, 16])  # only the last may take the rest
    ctx = gpurt.GreenContext(20)
    assert 20 <= ctx.sm_count <= 32  # rounded up to the granularity
    stream = ctx.stream()
    assert stream.non_blocking and stream.device == 0
    with pytest.raises(gpurt.InvalidArgumentError):
        ctx.close()  # refused while its stream lives: nothing changes
    assert ctx.sm_count >= 20
    data = bytes(range(256)) * 4096
    with gpurt.DeviceBuffer(len(data), stream=stream) as buf:
        buf.copy_from_host(data)
        back = bytes(buf.copy_to_host())
        if gpurt.get_device_name() != "Fake GPU":
            assert back == data
    stream.close()
    ctx.close()
    decode, prefill = gpurt.GreenContext.split([16, 0])
    assert decode.sm_count == 16 and prefill.sm_count >= 16
    for c in (decode, prefill):
        c.close()


def test_conditional_bodies_capture_on_the_same_stream(device):
    s = gpurt.Stream()
    flag = gpurt.DeviceBuffer(4, stream=s)
    with pytest.raises(gpurt.StreamCaptureError):
        gpurt.conditional_handle(s)  # not capturing
    g = gpurt.Graph()
    with gpurt.graph(g, stream=s):
        handle = gpurt.conditional_handle(s, default=1, assign_default=True)
        gpurt.conditional_set(handle, flag, stream=s)
        with gpurt.conditional(handle, "if", bodies=2, stream=s) as node:
            assert s.native != 0
            inside = gpurt.DeviceBuffer(256, stream=s)  # from the graph's pool
            node.next_body()
            with pytest.raises(gpurt.InvalidArgumentError):
                node.next_body()  # an IF has two bodies at most
        with pytest.raises(gpurt.InvalidArgumentError):
            gpurt.conditional(handle, "while", bodies=2, stream=s).__enter__()
    g.replay(s)
    s.synchronize()
    inside.free()


def test_a_vbuffer_grows_at_its_address_and_counts_its_bytes(device):
    vb = gpurt.VBuffer(32 << 20)
    g, base = vb.granularity, vb.ptr
    before = gpurt.memory_allocated()
    with pytest.raises(gpurt.InvalidArgumentError):
        vb.map(1, g)  # not aligned
    vb.map(0, 2 * g)
    with pytest.raises(gpurt.InvalidArgumentError):
        vb.map(g, g)  # overlaps
    vb.map(2 * g, g)
    assert vb.ptr == base and vb.mapped_bytes == 3 * g
    assert gpurt.memory_allocated() == before + 3 * g
    with pytest.raises(gpurt.InvalidArgumentError):
        vb.unmap(0, g)  # cuts the first mapping
    vb.unmap(2 * g, g)
    assert vb.mapped_bytes == 2 * g
    vb.close()
    assert gpurt.memory_allocated() == before


def test_a_sleep_prepared_ahead_uses_that_host_memory(device):
    s = gpurt.Stream()
    payload = random.randbytes(4 << 20)
    with gpurt.MemPool(config="expandable_segments:True") as pool:
        buf = gpurt.DeviceBuffer(len(payload), stream=s, pool=pool)
        buf.copy_from_host(payload)
        made = pool.sleep_prepare()
        assert made >= len(payload) and pool.stats()["offload_host_bytes"] == made
        assert pool.sleep_prepare() == 0  # enough kept already
        with pool.sleeping(offload=True):
            assert pool.stats()["offload_host_bytes"] == made  # the sleep made none of its own
            with pytest.raises(gpurt.InvalidArgumentError):
                pool.sleep_prepare()
        if gpurt.get_device_name() != "Fake GPU":
            assert bytes(buf.copy_to_host()) == payload
        buf.free()
    assert gpurt.device_sleep_prepare() >= 0


def test_share_group_join_and_leave(device, tmp_path, monkeypatch):
    monkeypatch.setenv("GPURT_SHARE_DIR", str(tmp_path))
    with pytest.raises(ValueError):
        gpurt.share.join("py-test", offer="sometimes")
    gpurt.share.join("py-test", deadline_ms=500)
    assert [p.name for p in tmp_path.iterdir()] == [f"gpurt-share-{os.geteuid()}-py-test"]
    with pytest.raises(gpurt.InvalidArgumentError, match="in a share group already"):
        gpurt.share.join("other")
    gpurt.share.leave()
    with pytest.raises(gpurt.InvalidArgumentError, match="in no share group"):
        gpurt.share.leave()
    # Pools offered asleep after an idle spell of the caller's choosing, one pool kept.
    gpurt.share.join("py-test", offer="sleep-offload", idle_ms=250)
    kept = gpurt.MemPool()
    gpurt.share.offer_pool(kept, "never")
    with pytest.raises(ValueError):
        gpurt.share.offer_pool(kept, "sometimes")
    gpurt.share.leave()
    with pytest.raises(gpurt.InvalidArgumentError, match="in no share group"):
        gpurt.share.offer_pool(kept, "cached")
    kept.close()


def test_torch_record_stream_reaches_gpurt(device, monkeypatch):
    """gpurt.torch's Tensor.record_stream calls PyTorch's (which drops it for a pluggable
    allocator) and gpurt_record_stream_native with the storage's address and the raw
    stream, once however often it is installed; memory gpurt did not allocate is let
    be, as PyTorch lets it be. A stand-in Tensor class: PyTorch is not needed."""
    from gpurt import torch as gpurt_torch
    from gpurt._native import ffi

    class Storage:
        def __init__(self, address):
            self.address = address

        def data_ptr(self):
            return self.address

    class Tensor:
        is_cuda = True
        seen = []

        def __init__(self, address):
            self.address = address

        def record_stream(self, stream):
            Tensor.seen.append(stream)

        def untyped_storage(self):
            return Storage(self.address)

    class TorchStream:
        def __init__(self, native):
            self.cuda_stream = native

    class Recording:  # gpurt's library, its record-stream calls and answers noted
        def __init__(self, lib):
            self.lib, self.calls = lib, []

        def __getattr__(self, name):
            return getattr(self.lib, name)

        def gpurt_record_stream_native(self, ptr, stream):
            status = self.lib.gpurt_record_stream_native(ptr, stream)
            self.calls.append((int(ffi.cast("uintptr_t", ptr)), int(ffi.cast("uintptr_t", stream)), status))
            return status

    recording = Recording(gpurt_torch.lib)
    monkeypatch.setattr(gpurt_torch, "lib", recording)
    gpurt_torch._record_streams_too(Tensor)
    gpurt_torch._record_streams_too(Tensor)
    home, side = gpurt.Stream(), gpurt.Stream()
    buf = gpurt.DeviceBuffer(1 << 20, stream=home)
    address, use = int(ffi.cast("uintptr_t", buf._handle)), TorchStream(side.native)
    Tensor(address).record_stream(use)
    assert Tensor.seen == [use], "PyTorch's own record_stream ran once"
    Tensor(12345).record_stream(use)  # not gpurt's: let be

    class Sparse(Tensor):
        def untyped_storage(self):
            raise RuntimeError("sparse tensors do not have storage")

    Sparse(address).record_stream(use)  # no storage of its own: PyTorch's call only
    buf.free()
    lib = recording.lib
    assert recording.calls == [(address, side.native, lib.GPURT_SUCCESS), (12345, side.native, lib.GPURT_ERROR_INVALID_ARGUMENT)]
