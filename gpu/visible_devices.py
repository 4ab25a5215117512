"""gpurt's device ordinals map to NVML's GPUs as CUDA_VISIBLE_DEVICES says.

    CUDA_VISIBLE_DEVICES=1 python3 visible_devices.py     # on a machine of 2 GPUs or more

This process holds 3 GiB on gpurt's device 0, which must be the machine's second GPU:
gpurt's telemetry and process list for device 0 must be those nvidia-smi gives for
GPU index 1 (this process listed there, its memory in use), and its UUID that GPU's.
"""
import os
import subprocess
import sys
import time

import gpurt

HOLD = 3 << 30
failures = 0


def check(ok, what):
    global failures
    failures += not ok
    print(f"{'ok' if ok else 'FAILED'}: {what}")


def smi(query, kind="gpu"):
    out = subprocess.run(["nvidia-smi", f"--query-{kind}={query}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return [[f.strip() for f in line.split(",")] for line in out.strip().splitlines() if line.strip()]


assert os.environ.get("CUDA_VISIBLE_DEVICES") == "1", "run with CUDA_VISIBLE_DEVICES=1"
gpus = smi("index,uuid,memory.used")
if len(gpus) < 2:
    print(f"visible_devices: skipped: {len(gpus)} GPU(s) here, the check needs 2")
    sys.exit(1 if os.environ.get("GPURT_REQUIRE_GPU") == "1" and os.environ.get("GPURT_REQUIRE_2_GPUS") == "1" else 0)
check(gpurt.device_count() == 1, f"gpurt sees one device (it sees {gpurt.device_count()})")
held = gpurt.DeviceBuffer(HOLD, device=0)
held.fill_bytes(1)  # touched: the memory is really in use
gpurt.synchronize()
time.sleep(0.5)
ours = gpurt.telemetry(0)
processes = dict(gpurt.list_gpu_processes(0))
gpus = {int(i): (uuid, float(used) * 2**20) for i, uuid, used in smi("index,uuid,memory.used")}
apps = smi("pid,gpu_uuid", "compute-apps")
uuid_hex = bytes(gpurt.get_device_properties(0).uuid).hex()
smi_uuid_hex = gpus[1][0].removeprefix("GPU-").replace("-", "")
check(uuid_hex == smi_uuid_hex, f"gpurt device 0's UUID {uuid_hex} is nvidia-smi GPU 1's {gpus[1][0]}")
check(os.getpid() in processes, f"gpurt's process list for device 0 holds this process ({os.getpid()}): {processes}")
check(processes.get(os.getpid(), 0) >= HOLD, f"and its memory, {processes.get(os.getpid(), 0) / 2**30:.2f} GiB >= 3 GiB")
on_gpu = [uuid for pid, uuid in apps if int(pid) == os.getpid()]
check(on_gpu == [gpus[1][0]], f"nvidia-smi runs this process on GPU 1 only: {on_gpu}")
# NVML's reading (torch.cuda.device_memory_used's) counts the driver's reserved memory,
# about 0.6 GiB on an H200, which nvidia-smi leaves out.
check(abs(ours.memory_used - gpus[1][1]) <= (1 << 30),
      f"device 0's memory in use {ours.memory_used / 2**30:.2f} GiB is GPU 1's {gpus[1][1] / 2**30:.2f} GiB")
check(gpus[0][1] < ours.memory_used - (2 << 30), f"and not GPU 0's {gpus[0][1] / 2**30:.2f} GiB")
print("visible_devices:", "FAILED" if failures else "ok")
sys.exit(1 if failures else 0)
