"""PyTorch's peak device memory on gpurt's defaults against PyTorch's own allocator
with expandable_segments:True, in every order of GPT-2 generation and ResNet-50
training in one process, with and without empty_cache between them, at two sizes of
each: NVML's figure of the process (its used memory on every GPU, sampled every 5 ms
by llama.py's PeakSampler), and the
allocators' own peak reserved. The two allocators alternate, scenario by scenario;
each run is a process of its own (dropin_peak.py, which also checks that both give
identical results: PyTorch's allocator runs twice, the second run saying which
workloads it reproduces at all; its lower peak is the one compared).

    python3 dropin_orders.py LIB OUT_DIR     # DROPIN_ORDER_SIZES=A (or B): one size only
"""
import itertools
import json
import os
import re
import subprocess
import sys

from llama import PeakSampler, nvml_handle

lib_path, out_dir = sys.argv[1], sys.argv[2]
here = os.path.dirname(os.path.abspath(__file__))
ORDERS = {"gpt2 then resnet": "gpt2_generate,resnet50_train", "resnet then gpt2": "resnet50_train,gpt2_generate"}
SIZES = {"sizes A": {"DROPIN_GPT2": "16,128,256", "DROPIN_RESNET_BATCH": "64"},
         "sizes B": {"DROPIN_GPT2": "32,64,192", "DROPIN_RESNET_BATCH": "96"}}
SIZES = {name: sizes for name, sizes in SIZES.items() if name[-1] in os.environ.get("DROPIN_ORDER_SIZES", "AB")}
PYTORCH = ("native", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "GPURT_ALLOC_CONF": ""})
# PyTorch's first (it saves the results gpurt's are checked against), again (whether it
# reproduces them itself), then gpurt's defaults.
ALLOCATORS = [("PyTorch", PYTORCH), ("PyTorch", PYTORCH), ("gpurt", ("gpurt", {"PYTORCH_CUDA_ALLOC_CONF": "", "GPURT_ALLOC_CONF": ""}))]

pynvml = nvml_handle()[0]
EVERY_GPU = range(pynvml.nvmlDeviceGetCount())


def run(mode, env, scenario_dir):
    """dropin_peak.py in a process of its own: (NVML peak MiB over every GPU, its output)."""
    proc = subprocess.Popen([sys.executable, os.path.join(here, "dropin_peak.py"), lib_path, mode, scenario_dir],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = PeakSampler(proc.pid, interval=0.005, devices=EVERY_GPU)
    output = proc.communicate()[0]
    peak = sampler.stop()
    if proc.returncode != 0 and "DIFFERENT" not in output:  # a difference is reported, not fatal
        sys.exit(f"dropin_peak.py {mode} failed ({proc.returncode}):\n{output[-3000:]}")
    return peak, output


rows, failures = [], 0
for (order, workloads), empty, (size, sizes) in itertools.product(ORDERS.items(), (True, False), SIZES.items()):
    name = f"{order}, {'empty_cache between' if empty else 'cache kept'}, {size}"
    scenario_dir = os.path.join(out_dir, re.sub(r"[^a-z0-9]+", "-", name.lower()))
    figures = {}
    for allocator, (mode, allocator_env) in ALLOCATORS:
        env = dict(os.environ, DROPIN_WORKLOADS=workloads, DROPIN_EMPTY_CACHE="1" if empty else "0", **sizes, **allocator_env)
        nvml, output = run(mode, env, scenario_dir)
        reserved = max(float(m) for m in re.findall(r"peak reserved (\d+) MiB", output))
        # What differs where PyTorch's allocator reproduces itself (dropin_peak.py says which).
        different = re.findall(r"^(\w+): results DIFFERENT from PyTorch's own allocator's$", output, re.M)
        print(f"{name}, {allocator}: NVML {nvml:.0f} MiB, peak reserved {reserved:.0f} MiB"
              + "".join(f", {w}'s results DIFFERENT" for w in different), flush=True)
        if allocator in figures:  # PyTorch's second run: its lower peak
            nvml, reserved = min(nvml, figures[allocator]["nvml_mib"]), min(reserved, figures[allocator]["reserved_mib"])
        figures[allocator] = {"nvml_mib": nvml, "reserved_mib": reserved, "different": allocator == "gpurt" and bool(different)}
    ratio = figures["gpurt"]["nvml_mib"] / figures["PyTorch"]["nvml_mib"]
    failures += ratio > 1 or figures["gpurt"]["different"]
    rows.append({"scenario": name, **{f"{a} {k}": v for a, f in figures.items() for k, v in f.items()}, "ratio": ratio})

print("\n| scenario | PyTorch expandable NVML (MiB) | gpurt defaults NVML (MiB) | gpurt / PyTorch | peak reserved PyTorch / gpurt (MiB) |")
print("| --- | ---: | ---: | ---: | ---: |")
for r in rows:
    print(f"| {r['scenario']} | {r['PyTorch nvml_mib']:.0f} | {r['gpurt nvml_mib']:.0f} | {r['ratio']:.3f} | "
          f"{r['PyTorch reserved_mib']:.0f} / {r['gpurt reserved_mib']:.0f} |")
os.makedirs(out_dir, exist_ok=True)
with open(os.path.join(out_dir, "dropin_orders.json"), "w") as f:
    json.dump(rows, f, indent=1)
print(f"dropin orders: gpurt at or below PyTorch's peak in {len(rows) - failures} of {len(rows)} scenarios")
sys.exit(1 if failures else 0)
