"""Peak device memory of PyTorch models running on gpurt through the drop-in entry
points, against PyTorch's own allocator, each with and without expandable segments.

    python3 dropin_peak.py LIB native OUT_DIR       # PyTorch's allocator; saves the results
                                                    # (again: checks it gives them again)
    python3 dropin_peak.py LIB gpurt OUT_DIR        # gpurt's; checks them against native's
    python3 dropin_peak.py LIB table OUT_DIR        # prints the table of the runs in OUT_DIR
    python3 dropin_peak.py LIB record OUT_DIR       # records the workloads, one after the other
                                                    # with nothing released between, as one
                                                    # allocation trace (trace_replay's format)

Expandable segments are asked for the usual way: PYTORCH_CUDA_ALLOC_CONF for PyTorch's
allocator, GPURT_ALLOC_CONF for gpurt's (`expandable_segments:True`). Workloads, in
one process, each after an empty_cache (DROPIN_EMPTY_CACHE=0: without one, the cache
kept) and a reset of the peak (DROPIN_WORKLOADS, comma-separated, runs some of them
only): GPT-2 (124 M parameters, fp16) generating 256 tokens for 16
prompts of 128 with a KV cache grown by concatenation; ResNet-50 training (SGD with
momentum, batch 64 at 224 x 224, 6 steps). Peak reserved memory is the allocator's own
figure (torch.cuda.max_memory_reserved; gpurt_memory_usage's max_reserved). Results
must be identical: the generated tokens and the trained weights' bytes. dropin_orders.py
runs it in every order, with NVML's figure of the process.
"""
import ctypes
import hashlib
import json
import os
import sys
import time

lib_path, mode, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
MiB = 1 << 20


def table():
    runs = {}
    for name in sorted(os.listdir(out_dir)):
        if name.endswith(".json") and name.startswith(("PyTorch-", "gpurt-")):
            with open(os.path.join(out_dir, name)) as f:
                run = json.load(f)
            runs[(run["allocator"], run["expandable"])] = run
    print("| workload | allocator | expandable segments | peak reserved (MiB) | wall (s) |")
    print("| --- | --- | --- | ---: | ---: |")
    for workload in ("gpt2_generate", "resnet50_train"):
        for key in sorted(runs):
            r = runs[key]["workloads"][workload]
            print(f"| {workload} | {key[0]} | {key[1]} | {r['peak_reserved'] / MiB:.0f} | {r['seconds']:.2f} |")


if mode == "table":
    table()
    sys.exit(0)

# Deterministic cuBLAS (a fixed workspace), so that results can be compared bytewise.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402  (after the allocator is chosen: it must be swapped before CUDA starts)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_traces import llm_generate, record, resnet50_train  # noqa: E402  (workloads of the recorded traces)

gpurt = ctypes.CDLL(lib_path)
on_gpurt = mode == "gpurt"
if on_gpurt:
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "gpurt_torch_alloc", "gpurt_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    expandable = "expandable_segments:False" not in os.environ.get("GPURT_ALLOC_CONF", "")  # gpurt's default
else:
    expandable = "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
torch.use_deterministic_algorithms(True, warn_only=True)
torch.backends.cuda.matmul.allow_tf32 = False  # after record_traces, which allows it
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.allow_tf32 = False


EMPTY_CACHE = os.environ.get("DROPIN_EMPTY_CACHE", "1") != "0"


def reset():
    torch.cuda.synchronize()
    if on_gpurt:
        assert not EMPTY_CACHE or gpurt.gpurt_empty_cache() == 0
        assert gpurt.gpurt_reset_peak_memory_stats(0) == 0
    else:
        if EMPTY_CACHE:
            torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_reserved():
    torch.cuda.synchronize()
    if on_gpurt:
        peak = ctypes.c_uint64()
        assert gpurt.gpurt_memory_usage(0, None, None, None, ctypes.byref(peak)) == 0
        return peak.value
    return torch.cuda.max_memory_reserved()


# DROPIN_GPT2=BATCH,PROMPT,NEW and DROPIN_RESNET_BATCH vary the workloads' sizes.
GPT2_SIZES = [int(x) for x in os.environ.get("DROPIN_GPT2", "16,128,256").split(",")]
RESNET_BATCH = int(os.environ.get("DROPIN_RESNET_BATCH", "64"))


def gpt2_generate():
    torch.manual_seed(0)
    batch, prompt, new_tokens = GPT2_SIZES
    return llm_generate(batch=batch, prompt=prompt, new_tokens=new_tokens).cpu().numpy().tobytes()


# DROPIN_WORKLOADS (comma-separated names) runs some of them only, in its order.
chosen = os.environ.get("DROPIN_WORKLOADS", "gpt2_generate,resnet50_train").split(",")
os.makedirs(out_dir, exist_ok=True)
known = {"gpt2_generate": gpt2_generate, "resnet50_train": lambda: resnet50_train(batch=RESNET_BATCH)}
workloads = [(name, known[name]) for name in chosen]
if mode == "record":
    record("dropin_sequence", lambda: [workload() for _, workload in workloads], out_dir)
    sys.exit(0)
run = {"allocator": "gpurt" if on_gpurt else "PyTorch", "expandable": expandable, "workloads": {}}
reference_path = os.path.join(out_dir, f"results-expandable-{expandable}.bin")
for name, workload in workloads:
    reset()
    t = time.perf_counter()
    result = workload()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    run["workloads"][name] = {"peak_reserved": peak_reserved(), "seconds": seconds,
                              "result": hashlib.sha256(result).hexdigest()}
    print(f"{run['allocator']} (expandable {expandable}) {name}: peak reserved "
          f"{run['workloads'][name]['peak_reserved'] / MiB:.0f} MiB, {seconds:.2f} s")
repeat_path = os.path.join(out_dir, f"native-repeat-expandable-{expandable}.json")
if on_gpurt or os.path.exists(reference_path):
    # gpurt's results against PyTorch's own allocator's; a second native run against
    # the first says whether the workload is deterministic at all.
    with open(reference_path) as f:
        reference = json.load(f)
    same = {name: r["result"] == reference[name] for name, r in run["workloads"].items()}
    deterministic = {}
    if os.path.exists(repeat_path):
        with open(repeat_path) as f:
            deterministic = json.load(f)
    for name, ok in same.items():
        print(f"{name}: results {'identical to' if ok else 'DIFFERENT from'} PyTorch's own allocator's"
              + ("" if on_gpurt else " (a second run of PyTorch's allocator)")
              + ("" if deterministic.get(name, True) else " (PyTorch's allocator alone differs run to run)"))
    if not on_gpurt:
        with open(repeat_path, "w") as f:
            json.dump(same, f)
    elif not all(ok or not deterministic.get(name, True) for name, ok in same.items()):
        sys.exit("results differ from PyTorch's own allocator")
else:
    with open(reference_path, "w") as f:
        json.dump({name: r["result"] for name, r in run["workloads"].items()}, f)
with open(os.path.join(out_dir, f"{run['allocator']}-expandable-{expandable}.json"), "w") as f:
    json.dump(run, f)
