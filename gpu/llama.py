"""llama.cpp unpatched and on gpurt, side by side, as a user measures them (gpu/run.sh's
llama-* steps; docs/integrations.md "llama.cpp on gpurt").

    llama.py models WORK LLAMA_SRC            the models, written offline (make_model.py, and make_hf_model.py
                                              through transformers and convert_hf_to_gguf.py)
    llama.py completion WORK unpatched=BIN gpurt=BIN
                                              greedy tokens of every model, both builds alike;
                                              each run's peak device memory (NVML, sampled)
    llama.py server WORK CYCLES unpatched=BIN gpurt=BIN
                                              llama-server's idle sleep: device memory awake and
                                              asleep (and gpurt's account of it), the first request
                                              after sleep, tokens before and after, CYCLES sleeps
                                              flat; every model of LLAMA_SLEEP_MODELS (dense)
    llama.py bench WORK ROUNDS unpatched=BIN gpurt=BIN
                                              llama-bench pp512 / tg128, the builds alternated
    llama.py big WORK LLAMA_SRC BIN           a 9.5 GiB model's offload sleep on gpurt's build against
                                              copying its weights from pinned host memory
    llama.py split WORK unpatched=BIN gpurt=BIN
                                              two GPUs: greedy tokens with -sm layer and -sm row,
                                              both builds alike; gpurt's offload sleep gives both
                                              devices back
    llama.py server-check BIN MODEL           the server's sleep without a GPU (tests/llama.sh):
                                              both modes sleep, say so, and give the same tokens

Every figure is the process's own device memory as NVML reports it (MiB), and the
process's resident host memory (MiB) where said.
"""
import functools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

MODELS = {  # name: (the script that writes it, its arguments)
    "dense": ("make_model.py", []),  # dim 2048, 14 layers: 1.6 GiB f16
    "gqa": ("make_model.py", ["--dim", "1024", "--layers", "8", "--ff", "2816", "--heads", "16", "--kv-heads", "4", "--seed", "7"]),
    "moe": ("make_model.py", ["--dim", "1024", "--layers", "6", "--ff", "1408", "--heads", "8", "--kv-heads", "8", "--experts", "8",
                              "--experts-used", "2", "--seed", "11"]),
    # transformers' LlamaForCausalLM with an offline SentencePiece tokenizer, through convert_hf_to_gguf.py
    "hf": ("make_hf_model.py", []),
}
PROMPT = "Once upon a time, in a land far away, there lived"


@functools.cache
def nvml_handle(index=0):
    """NVML, initialised once, and GPU `index`'s handle (the peak sampler asks every 20 ms)."""
    import pynvml
    pynvml.nvmlInit()
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)


def device_mib(pid, index=0):
    """`pid`'s device memory on GPU `index` (MiB; 0 when it holds none)."""
    pynvml, handle = nvml_handle(index)
    used = [p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid == pid]
    return sum(used) / 2**20 if used else 0.0


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class PeakSampler:
    """The largest device memory a process held on `devices` together (NVML's GPU
    numbers, which CUDA_VISIBLE_DEVICES does not change), sampled every `interval` s."""

    def __init__(self, pid, interval=0.02, devices=(0,)):
        self.pid, self.interval, self.devices, self.peak, self.running = pid, interval, devices, 0.0, True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while self.running:
            self.peak = max(self.peak, sum(device_mib(self.pid, i) for i in self.devices))
            time.sleep(self.interval)

    def stop(self):
        self.running = False
        self.thread.join()
        return self.peak


def builds(args):
    return dict(a.split("=", 1) for a in args)


def models(work, src):
    os.makedirs(work, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    for name, (maker, extra) in MODELS.items():
        path = os.path.join(work, f"{name}.gguf")
        if not os.path.exists(path):
            subprocess.run([sys.executable, os.path.join(here, "..", "integrations", "llama.cpp", maker), src, path, *extra], check=True)
        print(f"{name}: {os.path.getsize(path) / 2**30:.2f} GiB")


def completion(work, bins, models=MODELS, extra=()):
    ok = True
    for name in models:
        outputs = {}
        for build, bindir in bins.items():
            cmd = [os.path.join(bindir, "llama-completion"), "-m", os.path.join(work, f"{name}.gguf"), "-p", PROMPT,
                   "-n", "64", "--temp", "0", "--ignore-eos", "-ngl", "99", "-no-cnv", "--no-display-prompt", "--seed", "1", *extra]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            sampler = PeakSampler(proc.pid)
            out, err = proc.communicate()  # bytes: random weights give any token, whole or part of a character
            peak = sampler.stop()
            if proc.returncode != 0:
                print(err[-3000:].decode(errors="replace"))
                ok = False
            outputs[build] = out
            print(f"{name} {build}: peak {peak:.0f} MiB, {len(out)} bytes: {out[:60]!r}")
        same = len(set(outputs.values())) == 1 and next(iter(outputs.values()))
        print(f"{name}: tokens {'identical' if same else 'DIFFER'}")
        ok &= bool(same)
    return ok


def http(port, path, body=None, timeout=600):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:  # the server's own message, not only its status (an OSError, as HTTPError is)
        raise OSError(f"{path}: HTTP {e.code}: {e.read().decode(errors='replace')[:500]}") from None


# The Llama 2 vocabulary's byte tokens (<0x00> to <0xFF>), never sampled: random weights
# otherwise end a completion inside a character, and this llama.cpp's server answers
# /completion with HTTP 500 when its output is not UTF-8 (its chat parser runs on it).
NO_BYTE_TOKENS = [[token, False] for token in range(3, 259)]


def complete(port):
    t = time.perf_counter()
    r = http(port, "/completion", {"prompt": PROMPT, "n_predict": 32, "temperature": 0, "seed": 1, "cache_prompt": False,
                                   "logit_bias": NO_BYTE_TOKENS})
    return r["content"], (time.perf_counter() - t) * 1000


def wait_until(cond, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if cond():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(what)


def bare_context_mib():
    """A process that only made its CUDA context (the driver's primary one)."""
    code = ("import ctypes,time,sys; c=ctypes.CDLL('libcuda.so.1'); c.cuInit(0); ctx=ctypes.c_void_p(); "
            "c.cuDevicePrimaryCtxRetain(ctypes.byref(ctx),0); c.cuCtxSetCurrent(ctx); print('ready',flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    time.sleep(0.5)
    mib = device_mib(proc.pid)
    proc.stdin.close()
    proc.wait()
    return mib


def server_run(bindir, model, mode, cycles, port, measure=True, patched=True, extra=(), devices=1, library=None):
    """One server: its figures awake, asleep and after each wake (device memory, summed
    over its `devices` GPUs, only with `measure`; what the patch adds to /health and
    /props only when `patched`, with ggml's info messages in the log, gpurt's memory
    report among them). `library`: a libgpurt.so.0 the build loads instead of its own."""
    per_device = (lambda pid: [device_mib(pid, i) for i in range(devices)]) if measure else (lambda pid: [0.0])
    memory = lambda pid: sum(per_device(pid))  # noqa: E731
    cmd = [os.path.join(bindir, "llama-server"), "-m", model, "-ngl", "99", "--port", str(port), "-c", "4096", "-np", "1",
           "--sleep-idle-seconds", "1", "--no-ui", *extra]
    if mode == "offload":
        cmd += ["--sleep-mode", "offload"]
    if patched:
        cmd += ["-lv", "4"]  # ggml's info messages: the server's own threshold (3) keeps them out
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(os.path.abspath(library))) if library else None
    log = open(f"/tmp/llama-server-{port}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: http(port, "/health").get("status") == "ok", 300, "the server to load")
        tokens, _ = complete(port)
        result_awake_per_device = per_device(proc.pid)
        awake = sum(result_awake_per_device)
        assert not patched or http(port, "/props").get("sleep_mode") == mode, "/props says how it sleeps"
        result = {"awake_mib": awake, "awake_per_device_mib": result_awake_per_device, "tokens": tokens, "asleep_mib": [], "wake_ms": [], "rss_mib": [], "awake_after_mib": [],
                  "same_tokens": True}
        for _ in range(cycles):
            wait_until(lambda: http(port, "/props").get("is_sleeping"), 60, "the server to sleep")
            assert not patched or http(port, "/health").get("is_sleeping") is True, "/health says it sleeps"
            time.sleep(0.3)
            result["asleep_per_device_mib"] = per_device(proc.pid)
            result["asleep_mib"].append(sum(result["asleep_per_device_mib"]))
            result["rss_mib"].append(rss_mib(proc.pid))
            again, ms = complete(port)
            result["wake_ms"].append(ms)
            result["awake_after_mib"].append(memory(proc.pid))
            result["same_tokens"] &= again == tokens
        result["steady_ms"] = complete(port)[1]
        return result
    except Exception:  # what the server said of it
        log.flush()
        print("".join(open(log.name, errors="replace").readlines()[-15:]), flush=True)
        raise
    finally:
        proc.terminate()
        proc.wait()
        log.close()
        report = [line.strip() for line in open(log.name, errors="replace") if "ggml_cuda_gpurt_log_memory" in line]
        if report:  # gpurt's account of what the process held at its last sleep
            print(report[-1])


def server(work, cycles, bins):
    """The idle sleep of each model in LLAMA_SLEEP_MODELS (default: dense) on both builds
    and modes; a model past the first sleeps max(3, CYCLES // 10) times."""
    bare = bare_context_mib()
    print(f"a process with only its CUDA context: {bare:.0f} MiB")
    ok = True
    for index, name in enumerate(os.environ.get("LLAMA_SLEEP_MODELS", "dense").split(",")):
        try:  # a model the server cannot serve fails, and the next one still runs
            ok &= server_model(os.path.join(work, f"{name}.gguf"), cycles if index == 0 else max(3, cycles // 10), bins, 8100 + 10 * index)
        except OSError as e:
            print(f"{name}: FAILED: {e}", flush=True)
            ok = False
    return ok


def server_model(model, cycles, bins, port):
    """Each build in each mode; `gpurt-before` (LLAMA_BASELINE_LIB: an earlier
    libgpurt.so.0) is gpurt's build on that library; a build not given is left out."""
    print(f"== {os.path.basename(model)}")
    before = os.environ.get("LLAMA_BASELINE_LIB")
    runs = [(b, m) for b, m in [("unpatched", "unload"), ("gpurt", "unload"), ("gpurt", "offload")] if b in bins]
    runs += [("gpurt-before", m) for m in ("unload", "offload") if before and "gpurt" in bins]
    results, ok = {}, True
    for i, (build, mode) in enumerate(runs):
        n = cycles if mode == "offload" else max(3, cycles // 10)
        library = before if build == "gpurt-before" else None
        r = server_run(bins[build.removesuffix("-before")], model, mode, n, port + i, patched=build != "unpatched", library=library)
        results[(build, mode)] = r
        med = statistics.median
        print(f"{build} --sleep-mode {mode}: awake {r['awake_mib']:.0f} MiB; asleep median {med(r['asleep_mib']):.0f} "
              f"(max {max(r['asleep_mib']):.0f}) MiB; first request after sleep median {med(r['wake_ms']):.0f} ms "
              f"(min {min(r['wake_ms']):.0f}, max {max(r['wake_ms']):.0f}) against {r['steady_ms']:.0f} ms awake; "
              f"tokens after every wake {'identical' if r['same_tokens'] else 'DIFFER'}; {n} cycles: "
              f"asleep {r['asleep_mib'][0]:.0f} -> {r['asleep_mib'][-1]:.0f} MiB, awake {r['awake_after_mib'][0]:.0f} -> "
              f"{r['awake_after_mib'][-1]:.0f} MiB, RSS {r['rss_mib'][0]:.0f} -> {r['rss_mib'][-1]:.0f} MiB")
        ok &= r["same_tokens"]
    ok &= len({r["tokens"] for r in results.values()}) == 1
    base = results.get(("unpatched", "unload"))
    if base is None:
        print("unpatched's build not given: gpurt's figures stand alone")
        return ok
    for key in [("gpurt", "unload"), ("gpurt", "offload")]:
        r = results[key]
        holds = max(r["asleep_mib"]) <= max(base["asleep_mib"])
        print(f"{key[0]} {key[1]} asleep {max(r['asleep_mib']):.0f} MiB <= unpatched's {max(base['asleep_mib']):.0f}: {holds}")
        ok &= holds
    fast = statistics.median(results[("gpurt", "offload")]["wake_ms"]) <= statistics.median(base["wake_ms"]) / 2
    print(f"offload's first request after sleep at most half of unpatched's reload: {fast}")
    return ok


def server_check(bindir, model):
    """Both sleep modes on a build without a GPU: each sleeps (offload falls back to
    unloading where no backend can sleep), says so, and gives the same tokens after."""
    tokens = set()
    for i, mode in enumerate(["unload", "offload"]):
        r = server_run(bindir, model, mode, 2, 8180 + i, measure=False)
        print(f"{mode}: slept and woke twice, tokens after each wake {'identical' if r['same_tokens'] else 'DIFFER'}: {r['tokens'][:50]!r}")
        if not r["same_tokens"]:
            return False
        tokens.add(r["tokens"])
    print(f"both modes give the same tokens: {len(tokens) == 1}")
    return len(tokens) == 1


def split(work, bins):
    """Two GPUs: tokens of both builds alike with the model split by layer and by row,
    and gpurt's offload sleep of a server split by layer: each device's memory asleep
    within 100 MiB of a process that only made its context (on device 0)."""
    pynvml, _ = nvml_handle()
    if pynvml.nvmlDeviceGetCount() < 2:
        print("llama split: SKIPPED: this machine has one GPU (run PART=llama on nvidia-h100-x2)")
        return True
    ok = True
    bare = bare_context_mib()
    for mode in ["layer", "row"]:
        refusal = upstream_refuses(bins["unpatched"], os.path.join(work, "dense.gguf"), ("-sm", mode))
        if refusal:
            print(f"-sm {mode}: not compared: unpatched llama.cpp refuses it itself ({refusal})")
            continue
        print(f"-sm {mode}:")
        ok &= completion(work, bins, models=["dense", "moe"], extra=("-sm", mode))
    r = server_run(bins["gpurt"], os.path.join(work, "dense.gguf"), "offload", 3, 8160, extra=("-sm", "layer"), devices=2)
    for i, (up, down) in enumerate(zip(r["awake_per_device_mib"], r["asleep_per_device_mib"])):
        print(f"device {i}: awake {up:.0f} MiB, asleep {down:.0f} MiB (a bare context: {bare:.0f})")
        ok &= down <= bare + 100
    print(f"offload over two GPUs: tokens after every wake {'identical' if r['same_tokens'] else 'DIFFER'}")
    return ok and r["same_tokens"]


def upstream_refuses(bindir, model, extra):
    """The error line with which unpatched llama-completion refuses `extra` on `model`
    (llama.cpp 5de25a74's CUDA backend has no split buffers for -sm row), or None."""
    cmd = [os.path.join(bindir, "llama-completion"), "-m", model, "-p", PROMPT, "-n", "1", "-ngl", "99", "-no-cnv", *extra]
    err = subprocess.run(cmd, capture_output=True, text=True, errors="replace").stderr
    lines = [line for line in err.splitlines() if "does not support" in line]
    return lines[0].split(": ", 1)[-1].strip() if lines else None


def bench(work, rounds, bins):
    """llama-bench of both builds, the order reversed every round (ABBA), each round's
    ratio kept: the medians of those ratios judge, as the host and clocks drift."""
    model = os.path.join(work, "dense.gguf")
    figures = {b: {"pp512": [], "tg128": []} for b in bins}
    order = list(bins)
    for _ in range(rounds):
        for build in order:
            out = subprocess.run([os.path.join(bins[build], "llama-bench"), "-m", model, "-ngl", "99", "-p", "512", "-n", "128",
                                  "-r", "5", "-o", "json"], capture_output=True, text=True, check=True).stdout
            for row in json.loads(out):
                figures[build]["pp512" if row["n_prompt"] == 512 else "tg128"].append(row["avg_ts"])
        order.reverse()
    ok = True
    for test in ["pp512", "tg128"]:
        u, g = figures["unpatched"][test], figures["gpurt"][test]
        ratio = statistics.median(b / a for a, b in zip(u, g))
        within = abs(ratio - 1) <= 0.02
        print(f"{test}: unpatched median {statistics.median(u):.1f} t/s, gpurt {statistics.median(g):.1f} t/s; gpurt / unpatched "
              f"per round {' '.join(f'{b / a:.3f}' for a, b in zip(u, g))}: median {ratio:.3f} x, {'within' if within else 'OUTSIDE'} 2 %")
        ok &= within
    return ok


def pinned_copy_ms(nbytes):
    """The median of five copies of `nbytes` from pinned host memory to the device (ms)."""
    import torch
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    copies = []
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        copies.append((time.perf_counter() - t) * 1000)
    del host, dev
    torch.cuda.empty_cache()
    return statistics.median(copies)


def big(work, src, bindir):
    """A 9.5 GiB model on gpurt with --sleep-mode offload: the first request after sleep
    against one awake and against copying the weights from pinned host memory."""
    path = os.path.join(work, "big.gguf")
    if not os.path.exists(path):
        maker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integrations", "llama.cpp", "make_model.py")
        subprocess.run([sys.executable, maker, src, path, "--dim", "4096", "--layers", "24", "--ff", "11008", "--heads", "32",
                        "--kv-heads", "32", "--seed", "5"], check=True)
    size = os.path.getsize(path)
    copy_ms = pinned_copy_ms(size)
    r = server_run(bindir, path, "offload", 5, 8150)
    wake, steady = statistics.median(r["wake_ms"]), r["steady_ms"]
    holds = wake - steady <= copy_ms + 50
    print(f"{size / 2**30:.2f} GiB model, offload: awake {r['awake_mib']:.0f} MiB, asleep {max(r['asleep_mib']):.0f} MiB; "
          f"first request after sleep median {wake:.0f} ms (each: {' '.join(f'{m:.0f}' for m in r['wake_ms'])}), one awake "
          f"{steady:.0f} ms: {wake - steady:.0f} ms more, against {copy_ms:.0f} ms to copy the file's bytes from pinned memory "
          f"(+50 ms: {'holds' if holds else 'DOES NOT hold'}); tokens after every wake {'identical' if r['same_tokens'] else 'DIFFER'}")
    return holds and r["same_tokens"]


def main():
    what, work = sys.argv[1], sys.argv[2]
    if what == "models":
        models(work, sys.argv[3])
        return 0
    if what == "completion":
        return 0 if completion(work, builds(sys.argv[3:])) else 1
    if what == "server":
        return 0 if server(work, int(sys.argv[3]), builds(sys.argv[4:])) else 1
    if what == "split":
        return 0 if split(work, builds(sys.argv[3:])) else 1
    if what == "server-check":
        return 0 if server_check(work, sys.argv[3]) else 1
    if what == "big":
        return 0 if big(work, sys.argv[3], sys.argv[4]) else 1
    if what == "bench":
        return 0 if bench(work, int(sys.argv[3]), builds(sys.argv[4:])) else 1
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
