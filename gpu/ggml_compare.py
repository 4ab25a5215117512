"""test-backend-ops, unpatched ggml against ggml on gpurt: the counts side by side, and
every test that passes unpatched must pass on gpurt, backend by backend (a machine with
two GPUs tests CUDA0 and CUDA1).

A test whose line the gpurt log lacks (another line written into it, as a driver
message) counts as lost only where that backend's own summary does not say that every
test passed.

usage: ggml_compare.py UNPATCHED_LOG GPURT_LOG"""
import re
import sys


def results(path):
    """{(backend, test): status}, and each backend's (passed, total) from its summary."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", open(path, errors="replace").read())
    status, summaries, backend = {}, {}, "?"
    for line in text.splitlines():
        b = re.match(r"\s*Backend \d+/\d+: (\S+)", line)
        if b:
            backend = b.group(1)
            continue
        s = re.search(r"(\d+)/(\d+) tests passed", line)
        if s:
            summaries[backend] = (int(s.group(1)), int(s.group(2)))
            continue
        m = re.match(r"\s*(\S.*?):\s+(OK|FAIL|not supported.*)$", line)
        if m:
            status[(backend, m.group(1))] = m.group(2)
    return status, summaries


def main():
    (before, before_sum), (after, after_sum) = results(sys.argv[1]), results(sys.argv[2])
    for name, status, summary in [("unpatched ggml", before, before_sum), ("ggml on gpurt ", after, after_sum)]:
        print(f"{name}: tests passed per backend {summary}; {sum(v == 'OK' for v in status.values())} OK, "
              f"{sum(v == 'FAIL' for v in status.values())} FAIL lines")
    if not before or not before_sum:
        sys.exit("no results in the unpatched log")
    all_passed = lambda backend: after_sum.get(backend, (0, 1))[0] == after_sum.get(backend, (0, 1))[1]  # noqa: E731
    lost = [k for k, v in before.items() if v == "OK" and after.get(k) != "OK" and not (k not in after and all_passed(k[0]))]
    unparsed = [k for k, v in before.items() if v == "OK" and k not in after and all_passed(k[0])]
    for backend, test in lost[:40]:
        print(f"passes unpatched, not on gpurt: {backend} {test} ({after.get((backend, test), 'absent')})")
    if unparsed:
        print(f"{len(unparsed)} passing tests have no line of their own in the gpurt log; their backends' summaries say every test passed")
    same = before_sum == after_sum
    print(f"summaries {'identical' if same else 'DIFFER'}; {len(lost)} tests lost")
    sys.exit(1 if lost or not same else 0)


if __name__ == "__main__":
    main()
