"""test-backend-ops on CUDA0, unpatched ggml against ggml on gpurt: the counts side by
side, and every test that passes unpatched must pass on gpurt.

usage: ggml_compare.py UNPATCHED_LOG GPURT_LOG"""
import re
import sys


def results(path):
    text = re.sub(r"\x1b\[[0-9;]*m", "", open(path, errors="replace").read())
    status = {}
    for line in text.splitlines():
        m = re.match(r"\s*(\S.*?):\s+(OK|FAIL|not supported.*)$", line)
        if m and "Backend" not in line:
            status[m.group(1)] = m.group(2)
    summary = re.findall(r"(\d+)/(\d+) tests passed", text)
    return status, summary


unpatched, gpurt = results(sys.argv[1]), results(sys.argv[2])
print(f"unpatched ggml: {unpatched[1]} tests passed; {sum(v == 'OK' for v in unpatched[0].values())} OK, "
      f"{sum(v == 'FAIL' for v in unpatched[0].values())} FAIL")
print(f"ggml on gpurt:  {gpurt[1]} tests passed; {sum(v == 'OK' for v in gpurt[0].values())} OK, "
      f"{sum(v == 'FAIL' for v in gpurt[0].values())} FAIL")
lost = [t for t, v in unpatched[0].items() if v == "OK" and gpurt[0].get(t) != "OK"]
for t in lost[:40]:
    print(f"passes unpatched, not on gpurt: {t} ({gpurt[0].get(t, 'absent')})")
if not unpatched[0] or not unpatched[1]:
    sys.exit("no results in the unpatched log")
sys.exit(1 if lost or unpatched[1] != gpurt[1] else 0)
