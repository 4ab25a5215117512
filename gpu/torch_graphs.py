"""PyTorch's own CUDA graphs with gpurt as its allocator (issue #68), each mode run
once on PyTorch's own allocator and once on gpurt, the outputs compared bit for bit.

    python3 torch_graphs.py LIB run ALLOC OUT_DIR       ALLOC: native | native-expandable | gpurt
        torch.cuda.graph (own pool; capture_error_mode global / thread_local / relaxed),
        make_graphed_callables (forward and backward), 20 graphs of a Transformer
        block at 20 batch sizes sharing one pool (graph_pool_handle, largest first as
        vLLM captures, then other_graph.pool(); each warmed on one side stream, or with
        TORCH_GRAPHS_WARM=each on a stream of its own), 100 capture / replay / destroy cycles;
        every output saved to OUT_DIR/ALLOC.pt; the shared captures' peak device
        memory (NVML, this process, sampled every 2 ms) printed as "peak20 MIB".
    python3 torch_graphs.py LIB peak20 ALLOC BLOCK ORDER     BLOCK: transformer | mlp; ORDER: down | up
        The 20 shared-pool captures alone (TORCH_GRAPHS_WARM as above), of either
        block, the batch sizes largest first or smallest first: "peak20 MIB".
    python3 torch_graphs.py LIB compile ALLOC TREES OUT_DIR      TREES: on | off
        torch.compile(mode="reduce-overhead") on GPT-2 (GPT2Config(), fp32, seeded),
        with CUDA graph trees on or off (torch._inductor.config.triton.cudagraph_trees):
        logits against eager on fresh input, saved to OUT_DIR/compile-ALLOC.pt. On
        gpurt, trees on reports what PyTorch does (graph trees ask the allocator for
        checkPoolLiveAllocations, which a pluggable allocator lacks) and saves nothing;
        trees off is the route that works. The NVML peak over four shapes is printed
        (with trees off no memory is shared between the shapes' graphs: the cost).
    python3 torch_graphs.py LIB compare OUT_DIR
        gpurt's outputs against PyTorch's own allocator's: identical bits.
    python3 torch_graphs.py LIB sleep
        gpurt as the whole allocator: GPT-2's decode step captured as a CUDA graph,
        gpurt.device_sleep (offload) releases its memory too, another process then
        allocates most of the GPU, the wake, and the graph replays the same tokens;
        the process asleep against a process that ran the same kernels on PyTorch's
        own allocator and emptied its cache (NVML).
    python3 torch_graphs.py LIB mempool
        The torch.cuda.MemPool route (PyTorch's allocator, a MemPool whose allocator
        is gpurt's, as vLLM and torch_memory_saver route memory): a graph captured
        with pool=mempool.id replays; gpurt.device_sleep releases its memory; woken,
        it replays exactly.
"""
import os
import subprocess
import sys
import time

from llama import PeakSampler, device_mib  # beside this script

MIB = 1 << 20
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def setup(lib, alloc):
    """Imports torch on `alloc`; gpurt's package when it is used."""
    if alloc == "native-expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch

    gpurt = None
    if alloc in ("gpurt", "package"):
        os.environ.setdefault("GPURT_LIBRARY", lib)
        import gpurt
        if alloc == "gpurt":
            gpurt.torch.use_as_allocator()
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch, gpurt


def process_mib():
    """This process's device memory on GPU 0 as NVML sees it (MiB)."""
    return device_mib(os.getpid())


def peak_sampler():
    """This process's largest NVML figure from now until `.stop()`, sampled every 2 ms."""
    return PeakSampler(os.getpid(), interval=0.002)


def memory_report(torch, gpurt):
    """The allocator's reserved and allocated MiB, and NVML's figure."""
    if gpurt is not None:
        stats = gpurt.memory_stats(0)
        reserved, allocated = stats["reserved_bytes.all.current"], stats["allocated_bytes.all.current"]
    else:
        reserved, allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    return f"reserved {reserved / MIB:.1f} MiB, allocated {allocated / MIB:.1f} MiB, NVML {process_mib():.1f} MiB"


def segments(torch, gpurt):
    """The allocator's segments by stream and pool from its snapshot (PyTorch's format):
    "stream/pool: N segs, total MiB (allocated MiB)" for each."""
    snapshot = gpurt.memory_snapshot(0) if gpurt is not None else torch.cuda.memory._snapshot()
    groups = {}
    for seg in snapshot["segments"]:
        if seg.get("device", 0) != 0:
            continue
        key = (seg.get("stream", 0), tuple(seg.get("segment_pool_id", (0, 0))))
        count, total, used = groups.get(key, (0, 0, 0))
        groups[key] = (count + 1, total + seg["total_size"], used + seg["allocated_size"])
    return "; ".join(f"stream {stream:#x} pool {pool}: {n} segs {total / MIB:.1f} MiB ({used / MIB:.1f} allocated)"
                     for (stream, pool), (n, total, used) in sorted(groups.items()))


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    return bool(ok)


def block(torch, width=1024, kind="transformer"):
    """A Transformer encoder block (16 heads), or an MLP block (`kind` "mlp")."""
    torch.manual_seed(11)
    if kind == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)).cuda().eval()
    return torch.nn.TransformerEncoderLayer(width, 16, 4 * width, dropout=0.0, batch_first=True).cuda().eval()


def inputs(torch, batch, seq=128, width=1024, seed=0):
    return torch.randn(batch, seq, width, device="cuda", generator=torch.Generator("cuda").manual_seed(1000 + seed + batch))


def warm(torch, fn, side=None):
    """Three eager runs of `fn` on a side stream (a new one from PyTorch's pool unless given)."""
    side = torch.cuda.Stream() if side is None else side
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)


#: TORCH_GRAPHS_WARM=one (the default): the 20 shared-pool captures' warm-ups on one side
#: stream, as vLLM warms each batch size on one stream; "each": on a new pooled stream
#: per batch size, whose caches (and cuBLAS workspaces) the allocator then keeps apart.
WARM_STREAMS = os.environ.get("TORCH_GRAPHS_WARM", "one")


def shared_captures(torch, gpurt, model, alloc, results, order=None):
    """20 batch sizes sharing one pool, largest first (vLLM's order) unless `order`
    says, NVML's peak; the outputs' heads into `results["shared"]`."""
    ok = True
    order = list(range(40, 0, -2)) if order is None else order
    torch.cuda.synchronize()
    print(f"before the 20 captures: {memory_report(torch, gpurt)}", flush=True)
    peak = peak_sampler()
    pool = torch.cuda.graph_pool_handle()
    graphs, outs, ins = {}, {}, {}
    side = torch.cuda.Stream() if WARM_STREAMS == "one" else None

    def show(batch, stage):  # where the peak is made: each allocator's segments
        if batch in (40, 38, 20, 2):
            torch.cuda.synchronize()
            print(f"  batch {batch} {stage}: {memory_report(torch, gpurt)}, peak so far {peak.peak:.1f}\n    {segments(torch, gpurt)}", flush=True)

    with torch.no_grad():
        for batch in order:
            ins[batch] = inputs(torch, batch)
            warm(torch, lambda: model(ins[batch]), side)
            show(batch, "warmed")
            graphs[batch] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graphs[batch], pool=pool):
                outs[batch] = model(ins[batch])
            show(batch, "captured")
        # one more through other_graph.pool()
        extra = torch.cuda.CUDAGraph()
        with torch.cuda.graph(extra, pool=graphs[order[0]].pool()):
            extra_out = model(ins[order[0]])
    for batch in graphs:
        graphs[batch].replay()
    extra.replay()
    torch.cuda.synchronize()
    peak20 = max(peak.stop(), process_mib())
    print(f"peak20 {peak20:.1f} (warm-ups on {WARM_STREAMS} side stream{'s' if WARM_STREAMS == 'each' else ''})", flush=True)
    print(f"after the 20 captures: {memory_report(torch, gpurt)}", flush=True)
    if gpurt is not None:  # where gpurt's reserve is: the graphs' shared pool, the rest the default pool's
        shared = gpurt.MemPool.stats(gpurt.torch._shared_pools[tuple(pool)])
        print(f"  the graphs' shared gpurt pool: reserved {shared['reserved_bytes.all.current'] / MIB:.1f} MiB, "
              f"allocated {shared['allocated_bytes.all.current'] / MIB:.1f} MiB, segments {shared.get('segment.all.current')}", flush=True)
    with torch.no_grad():
        for batch in (40, 22, 2):
            ok &= check(torch.equal(outs[batch], model(ins[batch])), f"{alloc}: shared-pool graph at batch {batch} replays exactly")
        ok &= check(torch.equal(extra_out, outs[order[0]]), f"{alloc}: the graph of other_graph.pool() replays exactly")
    results["shared"] = torch.cat([outs[b].flatten()[:4096] for b in sorted(outs)]).cpu()
    del graphs, outs, ins, extra, extra_out
    return ok


def run(lib, alloc, out_dir):
    torch, gpurt = setup(lib, alloc)
    results, ok = {}, True
    model = block(torch)
    if gpurt is not None:  # torch.cuda.empty_cache() reaches gpurt's cache (torch.cuda.graph calls it)
        scratch = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
        del scratch
        cached = gpurt.memory_stats(0)["reserved_bytes.all.current"]
        torch.cuda.empty_cache()
        ok &= check(gpurt.memory_stats(0)["reserved_bytes.all.current"] < cached, "torch.cuda.empty_cache() gives gpurt's cached memory back")

    # torch.cuda.graph with the graph's own pool, in each capture mode.
    for mode in ("global", "thread_local", "relaxed"):
        x = inputs(torch, 8)
        with torch.no_grad():
            warm(torch, lambda: model(x))
            eager = model(x)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, capture_error_mode=mode):
                y = model(x)
            fresh = inputs(torch, 8, seed=5)  # new data through the same static input
            x.copy_(fresh)
            g.replay()
            torch.cuda.synchronize()
            ok &= check(torch.equal(y, model(fresh)), f"{alloc}: torch.cuda.graph ({mode}) replays what eager computes, bit for bit")
        results[f"graph-{mode}"] = y.cpu()
        ok &= check(not torch.equal(eager, y), f"{alloc}: the replay wrote new data ({mode})")
        del g, y

    # make_graphed_callables: forward and backward.
    torch.manual_seed(3)
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
    sample = torch.randn(64, 512, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(mlp, (sample,))
    data = torch.randn(64, 512, device="cuda", generator=torch.Generator("cuda").manual_seed(9), requires_grad=True)
    out = graphed(data)
    out.square().sum().backward()
    results["graphed-out"], results["graphed-grad"] = out.detach().cpu(), data.grad.cpu()
    results["graphed-wgrad"] = mlp[0].weight.grad.cpu()
    ok &= check(bool(torch.isfinite(data.grad).all()) and data.grad.abs().sum() > 0, f"{alloc}: make_graphed_callables ran forward and backward")

    ok &= shared_captures(torch, gpurt, model, alloc, results)

    # 100 capture / replay / destroy cycles: nothing grows.
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    x = inputs(torch, 4)
    with torch.no_grad():
        warm(torch, lambda: model(x))
        before = None
        for cycle in range(100):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = model(x)
            g.replay()
            del g, y
            if cycle == 9:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                before = process_mib()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    after = process_mib()
    print(f"cycles: {before:.1f} MiB after 10, {after:.1f} after 100", flush=True)
    ok &= check(after <= before + 2, f"{alloc}: 100 capture / replay / destroy cycles leave device memory flat ({before:.0f} -> {after:.0f} MiB)")
    if gpurt is not None:
        stats = gpurt.memory_stats(0)
        print(f"gpurt after the cycles: reserved {stats['reserved_bytes.all.current'] / MIB:.1f} MiB, allocated {stats['allocated_bytes.all.current'] / MIB:.1f} MiB")
    torch.save(results, os.path.join(out_dir, f"{alloc}.pt"))
    return ok


def compile_gpt2(lib, alloc, trees, out_dir):
    torch, _ = setup(lib, alloc)
    import torch._inductor.config as inductor
    from transformers import GPT2Config, GPT2LMHeadModel

    inductor.triton.cudagraph_trees = trees == "on"
    torch.manual_seed(1234)
    model = GPT2LMHeadModel(GPT2Config()).cuda().eval()
    ids = torch.randint(0, 50257, (4, 64), generator=torch.Generator().manual_seed(7)).cuda()
    fresh = torch.randint(0, 50257, (4, 64), generator=torch.Generator().manual_seed(8)).cuda()
    compiled = torch.compile(lambda i: model(i).logits, mode="reduce-overhead")
    peak = peak_sampler()
    try:
        with torch.no_grad():
            for _ in range(3):
                compiled(ids)
            for length in (48, 32, 16):  # graphs of other shapes: what trees share, the others do not
                for _ in range(3):
                    compiled(ids[:, :length])
            again = compiled(fresh).clone()
        torch.cuda.synchronize()
        print(f"reduce-overhead, graph trees {trees}, on {alloc}: NVML peak {max(peak.stop(), process_mib()):.1f} MiB over 4 shapes", flush=True)
        with torch.no_grad():
            eager = model(fresh).logits
    except Exception as e:  # noqa: BLE001 - on gpurt with trees on, the refusal is the finding
        peak.stop()
        print(f"reduce-overhead, graph trees {trees}, on {alloc}: {type(e).__name__}: {str(e).strip().splitlines()[0][:300]}", flush=True)
        return alloc == "gpurt" and trees == "on"
    print(f"reduce-overhead, graph trees {trees}, on {alloc}: ran", flush=True)
    ok = check(torch.allclose(again, eager, rtol=1e-4, atol=1e-4), f"{alloc}: reduce-overhead GPT-2 (trees {trees}) matches eager on fresh input")
    if (alloc, trees) in (("native", "on"), ("gpurt", "off")):  # the pair `compare` judges
        torch.save({"fresh": again.cpu()}, os.path.join(out_dir, f"compile-{alloc}.pt"))
    return ok


def compare(out_dir):
    import torch

    ok = True
    for prefix in ("", "compile-"):
        native_path, gpurt_path = (os.path.join(out_dir, f"{prefix}{a}.pt") for a in ("native", "gpurt"))
        if not (os.path.exists(native_path) and os.path.exists(gpurt_path)):
            ok &= check(False, f"{prefix or 'run-'}outputs of both allocators present")
            continue
        native, gpurt = torch.load(native_path), torch.load(gpurt_path)
        for key in native:
            ok &= check(torch.equal(native[key], gpurt[key]), f"{prefix}{key}: gpurt's output identical to PyTorch's own allocator's")
    return ok


def gpt2_graph(torch):
    """GPT-2's decode step captured as a graph: (generate, captured graph's replay)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpt2_reference import captured_step, decode_steps, static_cache
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1234)
    model = GPT2LMHeadModel(GPT2Config()).eval().cuda()
    model.generation_config.eos_token_id = None
    prompts = torch.randint(0, model.config.vocab_size, (8, 16), generator=torch.Generator().manual_seed(7)).cuda()
    cache = static_cache(model, 8, 1024)
    prefill, decode, out_tokens = decode_steps(model, model.forward, prompts, 48, cache)
    with torch.no_grad():
        prefill()  # the cache's positions before the warm-up steps, as sleep_torch.py's decode runs
    step = captured_step(prefill, decode)

    def generate():
        with torch.no_grad():
            prefill()
            for _ in range(47):
                step()
        torch.cuda.synchronize()
        return out_tokens.cpu().clone()

    return model, generate


def same_kernels_native():
    """The child of `sleep`: GPT-2's decode (eager and graph) on PyTorch's own
    allocator, everything freed and the cache emptied; prints its NVML figure."""
    import gc
    import torch

    model, generate = gpt2_graph(torch)
    generate()
    del model, generate
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    time.sleep(0.2)
    print(f"native-emptied {process_mib():.1f}", flush=True)


def hog(fraction):
    """The other process: allocates `fraction` of the free memory, touches it, frees it."""
    import torch

    free = torch.cuda.mem_get_info()[0]
    x = torch.empty(int(free * fraction) // 4, dtype=torch.float32, device="cuda")
    x.fill_(1.5)
    torch.cuda.synchronize()
    print(f"hog {x.numel() * 4 / MIB:.0f}", flush=True)


def child(*args):
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"})
    return out.stdout + out.stderr


def sleep(lib):
    native_out = child(lib, "same-kernels-native")
    native = float(native_out.split("native-emptied ")[-1].split()[0]) if "native-emptied " in native_out else float("nan")
    if native != native:
        print("the process on PyTorch's own allocator failed:\n" + native_out[-3000:], flush=True)
    torch, gpurt = setup(lib, "gpurt")
    _, generate = gpt2_graph(torch)
    ok = True
    before = generate()
    free_awake = torch.cuda.mem_get_info()[0]
    awake = process_mib()
    reserved = gpurt.memory_stats(0)["reserved_bytes.all.current"]
    gpurt.device_sleep(0, offload=True)
    asleep = process_mib()
    freed = torch.cuda.mem_get_info()[0] - free_awake
    print(f"awake {awake:.1f} MiB (gpurt reserving {reserved / MIB:.1f}); asleep {asleep:.1f} MiB; freed {freed / MIB:.1f} MiB; "
          f"PyTorch's own allocator after the same kernels and empty_cache: {native:.1f} MiB", flush=True)
    ok &= check(gpurt.memory_stats(0)["reserved_bytes.all.current"] == 0, "asleep, gpurt reserves nothing, the graph's pool included")
    ok &= check(asleep <= native + 16, f"asleep {asleep:.1f} MiB <= PyTorch's own emptied {native:.1f} + 16")
    hogged = child(lib, "hog", "0.9")
    ok &= check("hog " in hogged, f"another process allocated the freed memory ({hogged.strip().splitlines()[-1] if hogged.strip() else 'nothing'} MiB)")
    gpurt.device_wake(0)
    ok &= check(torch.equal(generate(), before), "woken, the captured decode replays the same tokens")
    return ok


def mempool(lib):
    torch, gpurt = setup(lib, "package")
    allocator = torch.cuda.memory.CUDAPluggableAllocator(gpurt.library_path, "gpurt_torch_alloc", "gpurt_torch_free")
    pool = torch.cuda.MemPool(allocator.allocator())
    ok = True
    model = block(torch)
    with torch.cuda.use_mem_pool(pool):
        x = inputs(torch, 16)
    with torch.no_grad():
        warm(torch, lambda: model(x))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool.id):
            y = model(x)
        g.replay()
        torch.cuda.synchronize()
        expected = model(x).clone()
        ok &= check(torch.equal(y, expected), "a graph captured into the MemPool replays exactly")
        gpurt_reserved = gpurt.memory_stats(0)["reserved_bytes.all.current"]
        free_before = torch.cuda.mem_get_info()[0]
        gpurt.device_sleep(0, offload=True)
        freed = torch.cuda.mem_get_info()[0] - free_before
        print(f"gpurt held {gpurt_reserved / MIB:.1f} MiB (the MemPool's segments and the graph's); the sleep freed {freed / MIB:.1f} MiB", flush=True)
        ok &= check(gpurt_reserved > 0 and freed >= 0.99 * gpurt_reserved, "the sleep released the MemPool's memory, the graph's included")
        gpurt.device_wake(0)
        y.zero_()
        g.replay()
        torch.cuda.synchronize()
        ok &= check(torch.equal(y, expected), "woken, the graph replays exactly")
    return ok


def main():
    lib, mode = sys.argv[1], sys.argv[2]
    if mode == "run":
        ok = run(lib, sys.argv[3], sys.argv[4])
    elif mode == "peak20":
        torch, gpurt = setup(lib, sys.argv[3])
        order = None if sys.argv[5] == "down" else list(range(2, 41, 2))  # None: largest first
        ok = shared_captures(torch, gpurt, block(torch, kind=sys.argv[4]), sys.argv[3], {}, order)
    elif mode == "compile":
        ok = compile_gpt2(lib, sys.argv[3], sys.argv[4], sys.argv[5])
    elif mode == "compare":
        ok = compare(sys.argv[3])
    elif mode == "sleep":
        ok = sleep(lib)
    elif mode == "mempool":
        ok = mempool(lib)
    elif mode == "same-kernels-native":
        same_kernels_native()
        return
    elif mode == "hog":
        hog(float(sys.argv[3]))
        return
    else:
        raise SystemExit(__doc__)
    print("torch_graphs: " + ("ok" if ok else "FAILED"), flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
