"""Seeded random drop-in scenarios: PyTorch's peak device memory on gpurt's defaults
against PyTorch's own allocator (expandable_segments:True, and its default), on
workloads no one here picked. A scenario is two or three of families.py's workloads
at random sizes, in a random order, in one process, with or without empty_cache
between them (each workload's model and tensors dropped before the next). Each
scenario runs in three processes (four with BASELINE_LIB), one per allocator, their
order rotated from one scenario to the next; the figure is NVML's device memory of
the process at its highest (sampled every 5 ms, every process by one sampler), with
each allocator's own peak reserved beside it. Scenarios run several at a time (SCENARIO_JOBS, default 6):
the peaks are per process, the GPU has room for all of them.

    python3 scenarios.py LIB OUT_DIR [SEED ...]   # no seeds: SCENARIOS (default 48) new ones, drawn
                                                  # from the clock and printed, so that a reported
                                                  # figure is not one tuned on a fixed list;
                                                  # SCENARIO_RECORD=1 records the traces of those
                                                  # above +0.5 % afterwards (OUT_DIR/traces)
    python3 scenarios.py LIB worker ALLOCATOR SPEC  # one process of one scenario (the runner's child)
    python3 scenarios.py - draw SEED ...          # the scenarios of those seeds, drawn (no GPU needed)
    python3 scenarios.py LIB record OUT_DIR SEED ...  # each scenario's allocation traces (record_traces.py's
                                                  # format), s<SEED>_<N>_<FAMILY>.trace, recorded on
                                                  # PyTorch's expandable segments in a process of its own,
                                                  # so that its first trace holds the cuBLAS workspace

gpurt's results must be PyTorch's (expandable) bit for bit, where PyTorch's two
configurations agree with each other (deterministic algorithms, no TF32). Prints a
row per scenario and the distribution of gpurt / PyTorch expandable: min, median,
max, the share at or below 1 and the number above +0.5 % (issue #69's target: at or
below in 95 %, never above +0.5 %). OUT_DIR/scenarios.json keeps every figure.
"""
import concurrent.futures
import gc
import gzip
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

MiB = 1 << 20
ALLOCATORS = {  # name: the environment that chooses it
    "PyTorch expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "GPURT_ALLOC_CONF": ""},
    "PyTorch default": {"PYTORCH_CUDA_ALLOC_CONF": "", "GPURT_ALLOC_CONF": ""},
    "gpurt": {"PYTORCH_CUDA_ALLOC_CONF": "", "GPURT_ALLOC_CONF": ""},
}
# BASELINE_LIB (an earlier build of gpurt, run.sh's name for it) adds it as a fourth
# allocator, its process alternating with the others: a policy change measured against
# the library before it on the same scenarios in one call.
BASELINE = os.environ.get("BASELINE_LIB")
if BASELINE:
    ALLOCATORS["gpurt baseline"] = ALLOCATORS["gpurt"]
TARGET, LIMIT = 0.95, 1.005
# Families whose results PyTorch's own allocator does not reproduce from run to run: their
# comparison is printed, not judged. Three runs of one scenario on PyTorch's expandable
# segments (H200): transformers' GPT-2 in fp16 generating greedily gave three token
# sequences (2026-11-28); the GQA Llama in fp16 two of three, the mixture of experts'
# weights after training three of three (scenario 864924120, 2026-11-29).
UNREPRODUCIBLE = {"gpt2_generate", "llama_generate", "moe_train"}
# families.py's workloads: the sizes of each, drawn from a random.Random
SIZES = {
    "gpt2_generate": lambda r: dict(batch=r.randint(1, 32), prompt=r.randint(16, 512), new_tokens=r.randint(16, 64)),
    "llama_generate": lambda r: dict(batch=r.randint(1, 32), prompt=r.randint(16, 1024), new_tokens=r.randint(16, 64)),
    "resnet50_train": lambda r: dict(batch=r.randrange(16, 129, 8), steps=3),
    "bert_train": lambda r: dict(batch=r.randint(4, 48), steps=4),
    "moe_train": lambda r: dict(batch=r.randint(2, 24), steps=4),
}


def scenario(seed):
    """Seed -> the scenario: its workloads (family, sizes) in order, and whether the
    cache is emptied between them."""
    rng = random.Random(seed)
    names = rng.sample(sorted(SIZES), rng.choice((2, 3)))
    workloads = [[name, dict(SIZES[name](rng), seed=rng.randrange(1 << 30))] for name in names]
    return {"seed": seed, "empty_cache": rng.random() < 0.5, "workloads": workloads}


def describe(spec):
    def sizes(s):
        return ",".join(f"{k}={v}" for k, v in s.items() if k not in ("seed", "steps"))
    return " -> ".join(f"{n}({sizes(s)})" for n, s in spec["workloads"]) + (
        ", empty_cache between" if spec["empty_cache"] else ", cache kept")


def worker(lib_path, allocator, spec):
    """One allocator's run of one scenario: prints its figures as a JSON line."""
    import ctypes
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    import torch
    gpurt = ctypes.CDLL(lib_path)
    on_gpurt = allocator.startswith("gpurt")
    if on_gpurt:
        torch.cuda.memory.change_current_allocator(
            torch.cuda.memory.CUDAPluggableAllocator(lib_path, "gpurt_torch_alloc", "gpurt_torch_free"))
    from families import FAMILIES
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    results = []
    if allocator == "record":
        from record_traces import record
    for i, (name, sizes) in enumerate(spec["workloads"]):
        gc.collect()  # the workload before's model and tensors, wherever a cycle held them
        torch.cuda.synchronize()
        if i and spec["empty_cache"] and on_gpurt:
            assert gpurt.gpurt_empty_cache() == 0
        elif i and spec["empty_cache"]:
            torch.cuda.empty_cache()
        if allocator == "record":
            record(f"s{spec['seed']}_{i}_{name}", lambda: FAMILIES[name](**sizes), spec["record_dir"])
            continue
        results.append(hashlib.sha256(FAMILIES[name](**sizes)).hexdigest())
        torch.cuda.synchronize()
    if on_gpurt:
        peak = ctypes.c_uint64()
        assert gpurt.gpurt_memory_usage(0, None, None, None, ctypes.byref(peak)) == 0
        reserved = peak.value
    else:
        reserved = torch.cuda.max_memory_reserved()
    print(json.dumps({"results": results, "reserved_mib": reserved / MiB}))


class Peaks:
    """NVML's device memory of each process it is told of, at its highest: one thread
    asks NVML for every process on GPU 0 every `interval` s."""

    def __init__(self, interval=0.005):
        from llama import nvml_handle
        self.nvml, self.handle = nvml_handle(0)
        self.interval, self.peaks, self.lock = interval, {}, threading.Lock()
        threading.Thread(target=self.sample, daemon=True).start()

    def sample(self):
        while True:
            used = {p.pid: p.usedGpuMemory or 0 for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)}
            with self.lock:
                for pid in self.peaks:
                    self.peaks[pid] = max(self.peaks[pid], used.get(pid, 0) / MiB)
            time.sleep(self.interval)

    def watch(self, pid):
        with self.lock:
            self.peaks[pid] = 0.0

    def take(self, pid):
        time.sleep(2 * self.interval)  # the last sample of a process that ended after its peak
        with self.lock:
            return self.peaks.pop(pid)


def run_scenario(lib_path, spec, turn, peaks):
    """The scenario on each allocator, one process after another (the order rotated by
    `turn`): {allocator: {nvml_mib, reserved_mib, results}}."""
    here = os.path.dirname(os.path.abspath(__file__))
    names = list(ALLOCATORS)
    figures = {}
    for allocator in names[turn % len(names):] + names[:turn % len(names)]:
        env = dict(os.environ, **ALLOCATORS[allocator])
        lib = os.path.abspath(BASELINE) if allocator == "gpurt baseline" else lib_path
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), lib, "worker", allocator, json.dumps(spec)],
                                cwd=here, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        peaks.watch(proc.pid)
        output = proc.communicate()[0]
        nvml = peaks.take(proc.pid)
        if proc.returncode != 0:
            raise RuntimeError(f"seed {spec['seed']} on {allocator} failed ({proc.returncode}):\n{output[-3000:]}")
        figures[allocator] = dict(json.loads(output.strip().splitlines()[-1]), nvml_mib=nvml)
    return figures


def summary(rows):
    ratios = sorted(r["ratio"] for r in rows)
    at_or_below = sum(x <= 1 for x in ratios)
    above = sum(x > LIMIT for x in ratios)
    print(f"\ngpurt / PyTorch expandable over {len(rows)} scenarios: min {ratios[0]:.3f}, median "
          f"{statistics.median(ratios):.3f}, max {ratios[-1]:.3f}; at or below in {at_or_below} "
          f"({at_or_below / len(rows):.0%}), above +0.5 % in {above}")
    by_default = sorted(r["gpurt"]["nvml_mib"] / r["PyTorch default"]["nvml_mib"] for r in rows)
    print(f"gpurt / PyTorch default: min {by_default[0]:.3f}, median {statistics.median(by_default):.3f}, "
          f"max {by_default[-1]:.3f}")
    if BASELINE:
        old = sorted(r["gpurt baseline"]["nvml_mib"] / r["PyTorch expandable"]["nvml_mib"] for r in rows)
        print(f"the baseline ({BASELINE}) / PyTorch expandable: min {old[0]:.3f}, median {statistics.median(old):.3f}, "
              f"max {old[-1]:.3f}; at or below in {sum(x <= 1 for x in old)}, above +0.5 % in {sum(x > LIMIT for x in old)}")
    different = [r["seed"] for r in rows if r["different"]]
    print(f"results: gpurt's identical to PyTorch's in every scenario where PyTorch agrees with itself"
          if not different else f"results DIFFERENT from PyTorch's in seeds {different}")
    return at_or_below >= TARGET * len(rows) and not above and not different


def record_scenarios(lib_path, out_dir, seeds):
    """Each scenario's traces into `out_dir` (gzipped), a process a scenario."""
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, **ALLOCATORS["PyTorch expandable"])
    for seed in seeds:
        spec = dict(scenario(seed), record_dir=os.path.abspath(out_dir))
        subprocess.run([sys.executable, os.path.abspath(__file__), lib_path, "worker", "record", json.dumps(spec)],
                       cwd=os.path.dirname(os.path.abspath(__file__)), env=env, check=True, stdout=subprocess.DEVNULL)
    for name in (n for n in os.listdir(out_dir) if n.endswith(".trace")):  # as gpu/traces keeps them
        with open(os.path.join(out_dir, name), "rb") as plain, gzip.open(os.path.join(out_dir, name + ".gz"), "wb") as packed:
            packed.write(plain.read())
        os.remove(os.path.join(out_dir, name))


def main():
    lib_path, out_dir, seeds = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3:]]
    if not seeds:
        draw = random.Random(time.time_ns())
        seeds = [draw.randrange(1 << 31) for _ in range(int(os.environ.get("SCENARIOS", "48")))]
    print("seeds:", " ".join(map(str, seeds)), flush=True)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    peaks, rows = Peaks(), []
    with concurrent.futures.ThreadPoolExecutor(int(os.environ.get("SCENARIO_JOBS", "6"))) as pool:
        specs = [scenario(seed) for seed in seeds]
        runs = [pool.submit(run_scenario, lib_path, spec, turn, peaks) for turn, spec in enumerate(specs)]
        failed = []
        for spec, done in zip(specs, runs):
            try:
                figures = done.result()
            except RuntimeError as e:
                print(e, flush=True)
                failed.append(spec["seed"])
                continue
            torch_expandable, torch_default, ours = (figures[a] for a in ("PyTorch expandable", "PyTorch default", "gpurt"))
            # gpurt's results against PyTorch's, workload by workload, where PyTorch's two
            # configurations agree and the family reproduces its results at all.
            different = any(mine != theirs and theirs == default and name not in UNREPRODUCIBLE
                            for (name, _), mine, theirs, default in
                            zip(spec["workloads"], ours["results"], torch_expandable["results"], torch_default["results"]))
            row = {"seed": spec["seed"], "scenario": describe(spec), **figures, "different": different,
                   "ratio": ours["nvml_mib"] / torch_expandable["nvml_mib"]}
            rows.append(row)
            print(f"{spec['seed']}: {row['scenario']}: NVML MiB PyTorch expandable {torch_expandable['nvml_mib']:.0f}, "
                  f"default {torch_default['nvml_mib']:.0f}, gpurt {ours['nvml_mib']:.0f} ({row['ratio']:.3f}); "
                  f"reserved {torch_expandable['reserved_mib']:.0f} / {torch_default['reserved_mib']:.0f} / "
                  f"{ours['reserved_mib']:.0f}" + (", results DIFFERENT" if different else "")
                  + (f"; baseline {figures['gpurt baseline']['nvml_mib']:.0f}" if BASELINE else ""), flush=True)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "scenarios.json"), "w") as f:
        json.dump(rows, f, indent=1)
    if failed:
        print(f"scenarios that FAILED to run: seeds {failed}")
    lost = [r["seed"] for r in rows if r["ratio"] > LIMIT]
    if lost and os.environ.get("SCENARIO_RECORD") == "1":  # the traces of those above +0.5 %, for tests/traces/main.rs
        record_scenarios(lib_path, os.path.join(out_dir, "traces"), lost)
        print(f"traces of the {len(lost)} scenarios above +0.5 % in {os.path.join(out_dir, 'traces')}")
    sys.exit(0 if summary(rows) and not failed else 1)


if __name__ == "__main__":
    if sys.argv[2] == "record":
        record_scenarios(sys.argv[1], sys.argv[3], [int(seed) for seed in sys.argv[4:]])
    elif sys.argv[2] == "draw":
        for seed in sys.argv[3:]:
            print(f"{seed}: {describe(scenario(int(seed)))}")
    elif sys.argv[2] == "worker":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        worker(sys.argv[1], sys.argv[3], json.loads(sys.argv[4]))
    else:
        main()
