"""Checks the snapshots tests/c/memory_history_test.c wrote into DIR.

  python3 check.py DIR [--browser] [--torch]

Always: the JSON and the pickle load with the standard library, have PyTorch's
structure, agree with each other and with the statistics they carry (blocks tile
their segments, allocated blocks add up to allocated_bytes, segments to
reserved_bytes). --browser: the HTML viewer, opened in a headless Chromium, draws
every block of the snapshot and every out-of-memory event, with no script error.
--torch: PyTorch's own tools read the pickle (torch.cuda._memory_viz).
Prints one line per check and 'N passed, N failed' at the end.
"""
import json
import os
import pickle
import re
import shutil
import subprocess
import sys

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
    print(("ok   " if cond else "FAIL ") + what)


def structure(snap, name):
    check(set(snap) >= {"segments", "device_traces", "allocator_settings", "gpurt"}, f"{name}: top-level keys")
    device = snap["gpurt"]["device"]
    seg_keys = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
                "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}
    block_keys = {"address", "size", "requested_size", "state", "frames"}
    entry_keys = {"action", "addr", "size", "stream", "time_us", "frames", "user_metadata"}
    check(all(set(s) >= seg_keys for s in snap["segments"]), f"{name}: segment keys")
    check(all(set(b) >= block_keys for s in snap["segments"] for b in s["blocks"]), f"{name}: block keys")
    trace = snap["device_traces"][device]
    check(len(trace) > 0 and all(set(e) >= entry_keys for e in trace), f"{name}: {len(trace)} trace entries with their keys")
    tiled = all(sum(b["size"] for b in s["blocks"]) == s["total_size"] and
                all(a["address"] + a["size"] == b["address"] for a, b in zip(s["blocks"], s["blocks"][1:]))
                for s in snap["segments"])
    check(tiled, f"{name}: blocks tile their segments")
    blocks = [b for s in snap["segments"] for b in s["blocks"]]
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    reserved = sum(s["total_size"] for s in snap["segments"])
    about = snap["gpurt"]
    check(allocated == about["allocated_bytes"], f"{name}: allocated blocks {allocated} = allocated_bytes {about['allocated_bytes']}")
    check(reserved == about["reserved_bytes"], f"{name}: segments {reserved} = reserved_bytes {about['reserved_bytes']}")
    return blocks, trace


def browser_check(directory, blocks, trace):
    exe = next((shutil.which(b) for b in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
                if shutil.which(b)), None)
    if exe is None:
        check(False, "a headless Chromium is installed (apt-get install chromium-headless-shell)")
        return
    page = "file://" + os.path.abspath(os.path.join(directory, "snapshot.html"))
    run = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                          "--dump-dom", page], capture_output=True, text=True, timeout=120)
    found = re.search(r'<div id="status"([^>]*)>', run.stdout)
    check(found is not None, f"the viewer ran in {os.path.basename(exe)} and reported its status")
    if not found:
        print(run.stdout[-2000:], run.stderr[-2000:])
        return
    status = dict(re.findall(r'data-([a-z]+)="([^"]*)"', found.group(1)))
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
    check(status.get("ok") == "1" and status.get("errors") == "" and not console,
          f"the viewer loaded without errors: {status.get('errors')!r} {console}")
    check(int(status.get("blocks", -1)) == len(blocks), f"the segment map drew {status.get('blocks')} of {len(blocks)} blocks")
    ooms = sum(e["action"] == "oom" for e in trace)
    check(int(status.get("ooms", -1)) == ooms, f"the timeline marks {status.get('ooms')} of {ooms} out-of-memory events")
    live = sum(b["state"] == "active_allocated" for b in blocks)
    check(int(status.get("live", -1)) == live, f"the table lists {status.get('live')} of {live} live blocks")
    check(int(status.get("allocations", 0)) >= live, f"the timeline drew {status.get('allocations')} allocations")


def torch_check(directory, snap):
    import torch.cuda._memory_viz as viz
    path = os.path.join(directory, "snapshot.pickle")
    for name in ("trace_plot", "segment_plot"):
        html = getattr(viz, name)(snap)
        check(isinstance(html, str) and len(html) > 1000, f"torch.cuda._memory_viz.{name} made a page of {len(html)} characters")
    # memory and segments end in a flame graph drawn by flamegraph.pl, which PyTorch
    # downloads: they are given a formatter that keeps the text that reads the snapshot.
    def keep_text(text, *args, **kwargs):
        return text

    for name in ("segsum", "trace", "memory", "segments"):
        fn = getattr(viz, name, None)
        if fn is None:
            print(f"skip torch.cuda._memory_viz.{name}: not in this PyTorch")
            continue
        out = fn(snap, format_flamegraph=keep_text) if name in ("memory", "segments") else fn(snap)
        check(out is not None and len(str(out)) > 0, f"torch.cuda._memory_viz.{name} read the snapshot ({len(str(out))} characters)")
        if name == "segsum":
            print(out)
    out = os.path.join(directory, "torch_trace_plot.html")
    run = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", path, "-o", out],
                         capture_output=True, text=True)
    check(run.returncode == 0 and os.path.getsize(out) > 1000, f"python -m torch.cuda._memory_viz trace_plot: {run.stderr[-300:]}")


def main():
    directory = sys.argv[1]
    with open(os.path.join(directory, "snapshot.json")) as f:
        from_json = json.load(f)
    with open(os.path.join(directory, "snapshot.pickle"), "rb") as f:
        from_pickle = pickle.load(f)
    blocks, trace = structure(from_json, "JSON")
    structure(from_pickle, "pickle")
    check(isinstance(from_pickle["segments"][0]["segment_pool_id"], tuple), "the pickle's pool ids are tuples, as PyTorch's")
    same = [dict(s, segment_pool_id=list(s["segment_pool_id"])) for s in from_pickle["segments"]] == from_json["segments"]
    check(same, "the pickle's segments are the JSON's")
    if "--browser" in sys.argv:
        browser_check(directory, blocks, trace)
    if "--torch" in sys.argv:
        torch_check(directory, from_pickle)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


main()
