"""Two llama-servers whose models do not fit the GPU together take turns through a
gpurt share group (issue #70 item 4; docs/integrations.md "Servers in a share group").

    llama_share.py WORK unpatched=BIN gpurt=BIN

Each model is served alone first (its tokens and device memory, NVML). Then a process
holds all of the GPU but room for the larger server and a sleeping one's floor, less
than both servers together. gpurt's build: both servers join one group from their
environment (GPURT_ALLOC_CONF=share:...,share_offer:sleep-offload), with no sleep of
their own; the second one's load and every switch put the idle one's pools to sleep
(offloaded) and wake the other's (ggml touches its pool before each use). Requests
alternate between the two, LLAMA_SHARE_ROUNDS times: none may fail, tokens identical
to each server alone, and a switch's extra time against copying the woken model's
bytes from pinned host memory. Unpatched llama.cpp on the same setup: what the second
server does. LLAMA_SHARE_MODELS (default dense,gqa), LLAMA_SHARE_IDLE_MS (default
20: how long a server's pools must be idle before the other may take them).
"""
import os
import statistics
import subprocess
import sys
import threading
import time

from llama import bare_context_mib, builds, complete, device_mib, http, pinned_copy_ms, wait_until

HOG = """
import ctypes, sys
c = ctypes.CDLL("libcuda.so.1")
c.cuInit(0)
ctx = ctypes.c_void_p()
c.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
c.cuCtxSetCurrent(ctx)
free, total = ctypes.c_size_t(), ctypes.c_size_t()
c.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
ptr = ctypes.c_uint64()
take = free.value - int(sys.argv[1]) * 2**20
assert c.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(take)) == 0, "the hog's allocation"
c.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
print(free.value // 2**20, flush=True)
sys.stdin.read()
"""


def hog(leave_mib):
    """A process holding all of the GPU's free memory but `leave_mib`; it and the MiB
    it left free."""
    proc = subprocess.Popen([sys.executable, "-c", HOG, str(leave_mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def start(bindir, model, port, env=None):
    cmd = [os.path.join(bindir, "llama-server"), "-m", model, "-ngl", "99", "--port", str(port), "-c", "4096", "-np", "1", "--no-ui"]
    log = open(f"/tmp/llama-share-{port}.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log


def stop(proc, log):
    proc.terminate()
    proc.wait()
    log.close()


def tail(log, lines=40):
    log.flush()
    return "".join(open(log.name, errors="replace").readlines()[-lines:])


def loaded(proc, log, port, what):
    """Waits for the server on `port` to load; one that exits meanwhile fails at once,
    with the end of its log."""
    def ready():
        if proc.poll() is not None:
            raise RuntimeError(f"{what}: the server exited with {proc.returncode}:\n{tail(log)}")
        return http(port, "/health").get("status") == "ok"
    wait_until(ready, 300, what)


def alone(bindir, model, port):
    """A server alone on the GPU: its tokens, device memory awake and a steady request's ms."""
    proc, log = start(bindir, model, port)
    try:
        loaded(proc, log, port, "the server to load")
        tokens, _ = complete(port)
        return {"tokens": tokens, "mib": device_mib(proc.pid), "steady_ms": statistics.median(complete(port)[1] for _ in range(3))}
    finally:
        stop(proc, log)


class Sampler:
    """The device memory each process holds (NVML), sampled every 20 ms: the largest
    the processes held together, and the samples as (ms since the start, MiB each)."""

    def __init__(self, pids):
        self.pids, self.peak, self.samples, self.running = pids, 0.0, [], True
        self.start = time.monotonic()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while self.running:
            each = [device_mib(pid) for pid in self.pids]
            self.samples.append(((time.monotonic() - self.start) * 1e3, each))
            self.peak = max(self.peak, sum(each))
            time.sleep(0.02)

    def stop(self):
        self.running = False
        self.thread.join()
        return self.peak

    def series(self, points=25):
        """The samples thinned to about `points`, as "ms: MiB+MiB" in words."""
        step = max(1, len(self.samples) // points)
        return ", ".join(f"{ms:.0f}: {'+'.join(f'{m:.0f}' for m in each)}" for ms, each in self.samples[::step])


def together(bins, paths, solo, leave, rounds, copies):
    """gpurt's build: both servers in one group under the hog; requests alternate."""
    idle_ms = int(os.environ.get("LLAMA_SHARE_IDLE_MS", "20"))
    # gpurt's warnings in the servers' logs: what the group refused, if anything.
    env = dict(os.environ, GPURT_ALLOC_CONF=f"share:llama-share,share_offer:sleep-offload,share_idle_ms:{idle_ms}",
               GPURT_LOG=os.environ.get("GPURT_LOG", "warn"))
    servers, ports, ok = [], [8200, 8201], True
    hogger, free = hog(leave)
    print(f"the hog leaves {free} MiB free; the servers alone hold {solo[0]['mib']:.0f} and {solo[1]['mib']:.0f} MiB")
    try:
        for path, port in zip(paths, ports):
            servers.append(start(bins["gpurt"], path, port, env))
            loaded(*servers[-1], port, f"{os.path.basename(path)} to load in the group")
        sampler = Sampler([proc.pid for proc, _ in servers])
        switch_ms, same, failed = [[], []], True, 0
        for _ in range(rounds):
            for i, port in enumerate(ports):
                try:
                    tokens, ms = complete(port)
                except OSError as e:
                    failed += 1
                    print(f"request to {os.path.basename(paths[i])} FAILED: {e}")
                    continue
                same &= tokens == solo[i]["tokens"]
                switch_ms[i].append(ms - solo[i]["steady_ms"])
        peak = sampler.stop()
        for i, path in enumerate(paths):
            copy, both = copies[i], copies[0] + copies[1]
            extra = statistics.median(switch_ms[i]) if switch_ms[i] else float("inf")
            holds = extra <= copy + 50
            print(f"{os.path.basename(path)}: {len(switch_ms[i])} requests served after a switch, each {extra:.0f} ms (median; "
                  f"max {max(switch_ms[i], default=0):.0f}) over one alone, against {copy:.0f} ms to copy its bytes from pinned "
                  f"memory (+50 ms: {'holds' if holds else 'DOES NOT hold'}) and {both:.0f} ms to copy both models' (the "
                  f"other's out, its in; +50 ms: {'holds' if extra <= both + 50 else 'does not hold'})")
            ok &= holds
        print(f"{2 * rounds} requests, {failed} failed; tokens {'identical' if same else 'DIFFER'} to each server alone; "
              f"the two servers together at most {peak:.0f} MiB (NVML, every 20 ms) with {free} MiB free beside the hog")
        print(f"NVML over the requests (ms: MiB of {' + '.join(os.path.basename(p) for p in paths)}): {sampler.series()}")
        return ok and same and failed == 0
    except Exception:
        for _, log in servers:
            print(tail(log))
        raise
    finally:
        for proc, log in servers:
            stop(proc, log)
        hogger.stdin.close()
        hogger.wait()


def unpatched_second(bins, paths, leave):
    """Unpatched llama.cpp under the same hog: the first server loads; what the second does."""
    hogger, free = hog(leave)
    first, first_log = start(bins["unpatched"], paths[0], 8210)
    try:
        loaded(first, first_log, 8210, "unpatched's first server to load")
        second, second_log = start(bins["unpatched"], paths[1], 8211)
        try:
            wait_until(lambda: second.poll() is not None or http(8211, "/health").get("status") == "ok", 300, "the second")
            said = [line for line in tail(second_log, 40).splitlines() if "out of memory" in line or "failed" in line]
            outcome = f"exited with {second.returncode}" if second.poll() is not None else "loaded"
            print(f"unpatched, {free} MiB free beside the hog: the second server {outcome}: {said[-1].strip() if said else '(nothing said)'}")
        finally:
            stop(second, second_log)
    finally:
        stop(first, first_log)
        hogger.stdin.close()
        hogger.wait()


def main():
    work, bins = sys.argv[1], builds(sys.argv[2:])
    names = os.environ.get("LLAMA_SHARE_MODELS", "dense,gqa").split(",")
    paths = [os.path.join(work, f"{name}.gguf") for name in names]
    solo = [alone(bins["gpurt"], path, 8190 + i) for i, path in enumerate(paths)]
    bare = bare_context_mib()
    # Room for the larger server and the other's floor asleep (a bare context and what
    # stays above it, 66 MiB), with 256 MiB to spare; less than both awake.
    leave = int(max(s["mib"] for s in solo) + bare + 66 + 256)
    if leave >= sum(s["mib"] for s in solo):
        print(f"llama share: SKIPPED: the models are too small for a test ({leave} MiB left would hold both)")
        return 0
    # Measured before the hog: beside it and the servers, the copy's own buffers do not fit.
    copies = [pinned_copy_ms(os.path.getsize(path)) for path in paths]
    ok = together(bins, paths, solo, leave, int(os.environ.get("LLAMA_SHARE_ROUNDS", "10")), copies)
    if "unpatched" in bins:
        unpatched_second(bins, paths, leave)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
