"""Two PyTorch processes that take turns on one GPU through a gpurt share group (issue
#70 item 5): an RL-style trainer (forward, backward, SGD on 8 GiB of fp32 weights) and
a generator (forward passes on 8 GiB of its own), each with gpurt as PyTorch's
allocator, joined with offer "sleep-offload". A third process holds all but FREE_GIB of
the GPU, so that each fits alone and both do not. Neither calls sleep: a step that the
device refuses asks the other, whose idle pool goes to sleep (weights to host memory),
and its own next allocation wakes it in turn.

    python3 share_torch.py [FREE_GIB [ROUNDS]]

Runs each worker alone (its results are the reference), then both in turns on gpurt,
then both in turns on PyTorch's own allocator; prints each step's time and result,
whether the shared results equal the lone ones bit for bit, and what PyTorch's own
allocator did. The library comes from GPURT_LIBRARY, the package from PYTHONPATH."""
import os
import subprocess
import sys
import time

GIB = 1 << 30
WIDTH, LAYERS, BATCH = 16384, 8, 4096  # 1 GiB a layer's weights, 256 MiB an activation


def worker(role, allocator):
    """Serves "step" lines on stdin with one step each: "done RESULT MS" or "oom MESSAGE"."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    if allocator == "gpurt":
        import gpurt
        import gpurt.torch

        gpurt.torch.use_as_allocator()
        gpurt.share.join("share-torch", offer="sleep-offload", idle_ms=200, deadline_ms=5000)
    torch.use_deterministic_algorithms(True)
    generator = torch.Generator(device="cuda").manual_seed(1 if role == "trainer" else 2)
    weights = [torch.randn(WIDTH, WIDTH, device="cuda", generator=generator) / WIDTH**0.5 for _ in range(LAYERS)]
    inputs = torch.randn(BATCH, WIDTH, device="cuda", generator=generator)
    for w in weights:
        w.requires_grad_(role == "trainer")
    torch.cuda.synchronize()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "step":
            break
        start = time.perf_counter()
        try:
            if role == "trainer":
                x = inputs
                for w in weights:
                    x = torch.tanh(x @ w)
                loss = (x * x).mean()
                loss.backward()
                with torch.no_grad():
                    for w in weights:
                        w -= 0.5 * w.grad
                        w.grad = None
                result = loss.item()
            else:
                with torch.no_grad():
                    x = inputs
                    for w in weights:
                        x = torch.tanh(x @ w)
                    inputs = x.roll(1, 0)
                    result = x.double().sum().item()
            torch.cuda.synchronize()
            del x
            print(f"done {result!r} {1e3 * (time.perf_counter() - start):.1f}", flush=True)
        except torch.OutOfMemoryError as e:
            print("oom " + str(e).splitlines()[0][:300], flush=True)


def hog(free_gib):
    """Holds all of the GPU but `free_gib` GiB (PyTorch's own allocator) until stdin closes."""
    import torch

    free, _ = torch.cuda.mem_get_info()
    held = torch.empty(free - free_gib * GIB, dtype=torch.uint8, device="cuda")
    print(f"ready {held.numel() / GIB:.1f}", flush=True)
    sys.stdin.read()


def start(*args):
    p = subprocess.Popen([sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    said = p.stdout.readline().split()
    assert said and said[0] == "ready", f"{args}: {said}"
    return p


def step(p):
    """One step of worker `p`: its answer's words ([] where it died)."""
    try:
        p.stdin.write("step\n")
        p.stdin.flush()
    except BrokenPipeError:
        return []
    return p.stdout.readline().split(maxsplit=2)


def stop(p):
    p.stdin.close()
    p.wait(timeout=60)


def free_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    used, total = map(int, out.split(","))
    return total - used


def turns(roles, allocator, rounds, alone):
    """Steps of `roles` in turns, `rounds` each; {role: [(result, ms) or ("oom", message)]}."""
    procs = {r: start("worker", r, allocator) for r in roles}
    out = {r: [] for r in roles}
    for _ in range(rounds):
        for r in roles:
            time.sleep(0.3)  # the other one idle past its 200 ms
            said = step(procs[r]) or ["died"]
            out[r].append((said[1], float(said[2])) if said[0] == "done" else ("oom", " ".join(said)))
            if not alone:
                print(f"  {allocator} {r}: {out[r][-1][0]} ({out[r][-1][1] if said[0] == 'done' else ''} ms), GPU free {free_mib()} MiB", flush=True)
    for p in procs.values():
        try:
            stop(p)
        except BrokenPipeError:
            p.wait(timeout=60)
    return out


def main():
    free_gib = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    held = start("hog", str(free_gib))
    print(f"GPU free with the hog: {free_mib()} MiB")
    alone = {"trainer": [], "generator": []}
    for role in ["trainer", "generator"] if "alone" in os.environ.get("SHARE_TORCH_PARTS", "alone own") else []:
        alone[role] = turns([role], "gpurt", rounds, True)[role]
        print(f"alone, {role}: " + ", ".join(f"{res} ({ms:.0f} ms)" for res, ms in alone[role]), flush=True)
    shared = turns(["trainer", "generator"], "gpurt", rounds, False)
    bad = 0
    for role in ["trainer", "generator"]:
        same = [s[0] == a[0] for s, a in zip(shared[role], alone[role])]
        lone_ms = sorted(ms for _, ms in alone[role])[len(alone[role]) // 2]
        shared_ms = [ms for res, ms in shared[role] if res != "oom"]
        print(f"gpurt, {role} in turns: {sum(same)} of {rounds} steps identical to alone; step ms alone (median) {lone_ms:.0f}, in turns "
              + ", ".join(f"{ms:.0f}" for ms in shared_ms))
        bad += sum(not s for s in same)
    own = turns(["trainer", "generator"], "torch", rounds, False) if "own" in os.environ.get("SHARE_TORCH_PARTS", "alone own") else {"trainer": [], "generator": []}
    for role in ["trainer", "generator"]:
        ooms = sum(res == "oom" for res, _ in own[role])
        print(f"PyTorch's own allocator, {role} in turns: {rounds - ooms} of {rounds} steps ran, {ooms} out of memory"
              + (f" ({next(m for r, m in own[role] if r == 'oom')})" if ooms else ""))
    stop(held)
    print("share_torch: " + ("FAILED" if bad else "passed"))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "hog":
        hog(int(sys.argv[2]))
    else:
        sys.exit(main())
