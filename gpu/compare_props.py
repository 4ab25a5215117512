"""Checks gpurt-info's output against PyTorch's view of each device (the CUDA runtime)."""
import re
import subprocess
import sys

import torch

out = subprocess.run([sys.argv[1]], capture_output=True, text=True, check=True).stdout
devices = re.split(r"^device (\d+): ", out, flags=re.M)[1:]
failures = 0
for ordinal, body in zip(devices[0::2], devices[1::2]):
    p = torch.cuda.get_device_properties(int(ordinal))
    name = body.splitlines()[0].strip()
    fields = {
        "name": (name, p.name),
        "compute capability": (re.search(r"compute capability\s+(\S+)", body).group(1), f"{p.major}.{p.minor}"),
        "total memory": (int(re.search(r"total memory\s+(\d+)", body).group(1)), p.total_memory),
        "multiprocessors": (int(re.search(r"multiprocessors\s+(\d+)", body).group(1)), p.multi_processor_count),
        "L2 cache": (int(re.search(r"L2 cache / persisting max\s+(\d+)", body).group(1)), p.L2_cache_size),
    }
    for key, (ours, theirs) in fields.items():
        ok = ours == theirs
        failures += not ok
        print(f"device {ordinal} {key:20s} gpurt={ours!s:30s} torch={theirs!s:30s} {'ok' if ok else 'MISMATCH'}")
print("compare_props:", "FAILED" if failures else "ok")
sys.exit(1 if failures else 0)
