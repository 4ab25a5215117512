"""Checks gpurt-info's NVML telemetry against nvidia-smi's readings of the same GPU
(matched by UUID): total memory exactly, the power limit to the watt, used memory,
temperature and the SM clock within what changes between two readings. Used memory
differs by gpurt-info's own context (0.5-1 GiB), which nvidia-smi, run after it
exits, no longer sees."""
import re
import subprocess
import sys

out = subprocess.run([sys.argv[1]], capture_output=True, text=True, check=True).stdout
query = "uuid,memory.total,memory.used,temperature.gpu,power.limit,clocks.sm"
smi = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                     capture_output=True, text=True, check=True).stdout
theirs = {}
for line in smi.strip().splitlines():
    uuid, total, used, temp, limit, sm = [f.strip() for f in line.split(",")]
    theirs[uuid] = dict(total=float(total), used=float(used), temp=float(temp), limit=float(limit), sm=float(sm))
failures = 0
for body in re.split(r"^device \d+: ", out, flags=re.M)[1:]:
    uuid = re.search(r"uuid\s+(\S+)", body).group(1)
    used, total = map(int, re.search(r"memory used / total \(NVML\)\s+(\d+) / (\d+)", body).groups())
    temp = int(re.search(r"temperature\s+(-?\d+)", body).group(1))
    limit = int(re.search(r"power draw / limit\s+-?\d+ / (-?\d+)", body).group(1))
    sm = int(re.search(r"clocks sm / memory\s+(-?\d+)", body).group(1))
    t = theirs[uuid]
    checks = {
        "total memory (MiB)": (total / 2**20, t["total"], 1),
        "used memory (MiB)": (used / 2**20, t["used"], 2048),
        "temperature (C)": (temp, t["temp"], 5),
        "power limit (W)": (limit / 1000, t["limit"], 1),
        "SM clock (MHz)": (sm, t["sm"], 0.5 * t["sm"] + 1),
    }
    for key, (ours, smi_value, tolerance) in checks.items():
        ok = abs(ours - smi_value) <= tolerance
        failures += not ok
        print(f"{uuid} {key:20s} gpurt={ours:12.1f} nvidia-smi={smi_value:12.1f} {'ok' if ok else 'MISMATCH'}")
print("compare_telemetry:", "FAILED" if failures else "ok")
sys.exit(1 if failures else 0)
