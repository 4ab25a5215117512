"""ggml's GPT-2 examples, unpatched and on gpurt (integrations/ggml): weights made here,
tokens compared, speed and peak device memory side by side.

    python3 ggml_gpt2.py make DIR GGML_SOURCE
        A seeded GPT2Model(GPT2Config()) (124M, gpt2_reference.py's seed) saved with
        transformers in DIR, a vocabulary of 50 257 distinct four-letter words (the
        checkpoint has no tokenizer and nothing can be downloaded: each word is one token
        to ggml's tokenizer, so a prompt is a list of token ids), converted to ggml's
        format with the example's own converter (DIR/ggml-model.bin, f16 matrices; the
        position embedding kept in f32, as the examples load it), and
        DIR/prompts.txt: prompts of 8, 32 and 100 seeded tokens.
    python3 ggml_gpt2.py run DIR REPS NAME=BINDIR[:ENV=VALUE,...] ...
        gpt-2-backend on every prompt (128 new tokens, greedy, end-of-text ignored) and
        gpt-2-batched (4 sequences, 64 tokens), REPS rounds; in a round each case runs on
        every build one after the other (the order reversed every round), so that the
        runs compared share the host's state. Per build: the median of ms per token, the
        driver's peak device memory (NVML's used memory sampled every millisecond, less
        the figure before the run); the tokens of every run must equal the first build's.
        Then REPS rounds more with every build's run of a case at the same time, each
        pinned to four cores of its own (the cores rotated every round): the decode is
        bound by the host, whose cores slow 1.3-6x in spells, and runs at the same time
        share the spell. Speed is judged on the median over those rounds of each round's
        ratio to the first build (the one-after-the-other rounds' paired ratio, from
        those whose runs had the core at 90 % of its full rate or more, is shown
        beside it). The first build is the reference: speed within 2 %, peak not above
        it, checked for every other build whose name starts with "gpurt".
    python3 ggml_gpt2.py extras DIR BINDIR NVTX_TOOL OUTDIR
        gpt-2-backend on gpurt (prompt 1) with gpurt's extras on: the memory snapshot
        written during generation (GGML_CUDA_GPURT_SNAPSHOT, after graph computation 40)
        with every block's annotation and the ggml function that allocated it, gpurt's
        memory summary, the NVTX ranges the backend opens (recorded by the tool
        NVTX_INJECTION64_PATH loads) and the stream sanitizer's reports.
"""
import ctypes
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

VOCAB, NEW_TOKENS, BATCHED_TOKENS, PARALLEL = 50257, 128, 64, 4
PROMPT_LENGTHS = (8, 32, 100)
SPEED_TOLERANCE = 0.02


def word(token):
    """Token `token`'s word: four letters, unique, so ggml's tokenizer maps it back."""
    letters = []
    for _ in range(4):
        token, r = divmod(token, 26)
        letters.append(chr(ord("a") + r))
    return "".join(letters)


def make(out, ggml_source):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    model = GPT2LMHeadModel(GPT2Config())
    model.transformer.save_pretrained(out)
    # GPT-2's byte-level encoding writes a leading space as "\u0120"; the last id is the end of text
    vocab = {"\u0120" + word(i): i for i in range(VOCAB - 1)}
    vocab["<|endoftext|>"] = VOCAB - 1
    with open(os.path.join(out, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(out, "added_tokens.json"), "w") as f:
        json.dump({}, f)
    # The example's converter, but for one line: it writes the position embedding (a 2-D
    # ".weight") in f16, and the examples load it as f32 ("tensor 'model/wpe' has wrong size").
    converter = open(os.path.join(ggml_source, "examples", "gpt-2", "convert-h5-to-ggml.py")).read()
    f16_rule = 'if name[-7:] == ".weight" and n_dims == 2:'
    assert f16_rule in converter, "the converter's f16 rule moved"
    converter = converter.replace(f16_rule, f16_rule[:-1] + ' and name != "wpe.weight":')
    # And it transposes only mlp.c_proj of the four projections, which transformers'
    # GPT-2 holds as Conv1D ([in, out]); the examples load all four as [out, in] less
    # that one's transpose, as ggml's TF-checkpoint converter writes them: all four go.
    transpose_rule = 'if name.endswith(".mlp.c_proj.weight"):'
    assert transpose_rule in converter, "the converter's transpose rule moved"
    converter = converter.replace(transpose_rule, 'if re.search(r"\\.(attn\\.c_attn|attn\\.c_proj|mlp\\.c_fc|mlp\\.c_proj)\\.weight$", name):')
    subprocess.run([sys.executable, "-c", converter, out], check=True, stdout=subprocess.DEVNULL)
    rng = np.random.default_rng(46)
    with open(os.path.join(out, "prompts.txt"), "w") as f:
        for n in PROMPT_LENGTHS:
            f.write("".join(" " + word(int(t)) for t in rng.integers(0, VOCAB - 1, n)) + "\n")
    print(f"{out}/ggml-model.bin: {os.path.getsize(os.path.join(out, 'ggml-model.bin')) / 2**20:.1f} MiB; "
          f"prompts of {', '.join(map(str, PROMPT_LENGTHS))} tokens")


def core_rate(iterations=100_000):
    """The host core's speed now (million steps a second of an arithmetic chain): the
    lent hosts' cores slow 1.3-2.3x in spells (docs/performance.md, "Method"), and the
    examples' decode is bound by the host, so each run is judged with the rate just
    before it."""
    x, start = 1, time.perf_counter()
    for _ in range(iterations):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
    return iterations / (time.perf_counter() - start) / 1e6


def paired_ratio(reference, samples, floor):
    """The median over rounds of the reference's ms / this build's ms (its speed
    relative to the reference), from the rounds whose two runs had the core at `floor`
    or faster (every round if fewer than three did), and how many rounds that was."""
    rounds = [(r, m) for (r, r_rate), (m, m_rate) in zip(reference, samples) if min(r_rate, m_rate) >= floor]
    if len(rounds) < 3:
        rounds = [(r, m) for (r, _), (m, _) in zip(reference, samples)]
    return statistics.median(r / m for r, m in rounds), len(rounds)


class PeakMemory:
    """The device's used memory (NVML) sampled every millisecond on a thread."""

    def __init__(self):
        self.nvml = ctypes.CDLL("libnvidia-ml.so.1")
        assert self.nvml.nvmlInit_v2() == 0
        self.device = ctypes.c_void_p()
        assert self.nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.device)) == 0

    def used(self):
        info = (ctypes.c_ulonglong * 3)()  # total, free, used
        assert self.nvml.nvmlDeviceGetMemoryInfo(self.device, info) == 0
        return info[2]

    def run(self, command, env):
        baseline, peak, done = self.used(), [0], threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], self.used())
                time.sleep(0.001)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            result = subprocess.run(command, env=env, capture_output=True, text=True)
        finally:
            done.set()
            sampler.join()
        if result.returncode != 0:
            sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result.stdout, (peak[0] - baseline) / 2**20


def side_by_side(runs):
    """Runs the (command, env) pairs at once, the i-th pinned to cores 4i to 4i + 3
    (where taskset and the cores are there); their outputs, in order."""
    can_pin = shutil.which("taskset") and 4 * len(runs) <= (os.cpu_count() or 1)
    pin = (lambda i: ["taskset", "-c", f"{4 * i}-{4 * i + 3}"]) if can_pin else (lambda i: [])
    procs = [subprocess.Popen(pin(i) + command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, (command, env) in enumerate(runs)]
    outputs = []
    for (command, _), proc in zip(runs, procs):
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"{' '.join(command)} failed ({proc.returncode}):\n{stdout[-3000:]}\n{stderr[-3000:]}")
        outputs.append(stdout)
    return outputs


def generated(stdout, batched):
    """The text the example printed for its tokens, and its speed in ms per token."""
    if batched:
        text = "\n".join(re.findall(r"sequence \d+:\n\n(.*?)\n\n", stdout, re.S))
        decoded = int(re.search(r"n_decoded =\s*(\d+)", stdout).group(1))
        ms = float(re.search(r"predict time =\s*([\d.]+) ms", stdout).group(1)) / decoded
    else:
        text = stdout.split("first 8 tokens:", 1)[1].split("main:     load time", 1)[0]
        ms = float(re.search(r"predict time =\s*[\d.]+ ms /\s*([\d.]+) ms per token", stdout).group(1))
    assert text.strip(), "no tokens printed"
    return text, ms


def run(data, reps, builds):
    prompts = [p.rstrip("\n") for p in open(os.path.join(data, "prompts.txt"))]
    model = os.path.join(data, "ggml-model.bin")
    cases = [(f"gpt-2-backend, prompt of {len(p.split())}", "gpt-2-backend", p,
              ["-n", str(NEW_TOKENS), "--ignore-eos"]) for p in prompts]
    cases.append((f"gpt-2-batched, {PARALLEL} sequences", "gpt-2-batched", prompts[0],
                  ["-n", str(BATCHED_TOKENS), "-np", str(PARALLEL)]))
    sampler = PeakMemory()
    speed, together, peak, tokens = {}, {}, {}, {}
    failures = 0

    def run_of(bindir, extra_env, program, prompt, args):
        return ([os.path.join(bindir, program), "-m", model, "-p", prompt, "-ngl", "1",
                 "--top_k", "1", "-s", "1", "-t", "4", *args], dict(os.environ, **extra_env))

    def check_tokens(case, name, text, rep):
        nonlocal failures
        reference = tokens.setdefault(case, (name, text))
        if text != reference[1]:
            failures += 1
            print(f"FAIL {case}: {name}'s tokens differ from {reference[0]}'s (round {rep})")

    for rep in range(reps):
        order = builds if rep % 2 == 0 else builds[::-1]
        for case, program, prompt, args in cases:
            for name, bindir, extra_env in order:
                rate = core_rate()
                stdout, mib = sampler.run(*run_of(bindir, extra_env, program, prompt, args))
                text, ms = generated(stdout, program == "gpt-2-batched")
                speed.setdefault((case, name), []).append((ms, rate))
                peak[(case, name)] = max(peak.get((case, name), 0), mib)
                check_tokens(case, name, text, rep)
    for rep in range(reps):
        order = builds[rep % len(builds):] + builds[:rep % len(builds)]
        for case, program, prompt, args in cases:
            outputs = side_by_side([run_of(bindir, extra_env, program, prompt, args) for _, bindir, extra_env in order])
            for (name, *_), stdout in zip(order, outputs):
                text, ms = generated(stdout, program == "gpt-2-batched")
                together.setdefault((case, name), []).append(ms)
                check_tokens(case, name, text, rep)
    reference_build = builds[0][0]
    rates = sorted(rate for samples in speed.values() for _, rate in samples)
    floor = 0.9 * rates[len(rates) * 9 // 10]  # 90 % of the core's full rate, as the benches judge
    print(f"core rate before each run: {rates[0]:.1f}-{rates[-1]:.1f} M steps/s; runs judged at >= {floor:.1f}")
    print(f"{'case':34} {'build':22} {'ms/token':>9} {'min-max':>11} {'tok/s':>8} "
          f"{'vs ' + reference_build + ', paired':>22} {'(rounds)':>8} {'side by side':>13} {'peak MiB':>9}")
    for case, *_ in cases:
        reference = speed[(case, reference_build)]
        for name, *_ in builds:
            samples = speed[(case, name)]
            paired, rounds = paired_ratio(reference, samples, floor)
            ratio = statistics.median(r / m for r, m in zip(together[(case, reference_build)], together[(case, name)]))
            ms, every = statistics.median(m for m, _ in samples), [m for m, _ in samples]
            print(f"{case:34} {name:22} {ms:9.3f} {min(every):5.2f}-{max(every):5.2f} {1000 / ms:8.1f} "
                  f"{paired:21.3f}x {rounds:8} {ratio:12.3f}x {peak[(case, name)]:9.0f}")
            if name.startswith("gpurt") and name != reference_build:
                if abs(ratio - 1) > SPEED_TOLERANCE:
                    failures += 1
                    print(f"FAIL {case}: {name} at {ratio:.3f}x of {reference_build}'s tokens per second")
                if peak[(case, name)] > peak[(case, reference_build)]:
                    failures += 1
                    print(f"FAIL {case}: {name}'s peak {peak[(case, name)]:.0f} MiB above {reference_build}'s")
    print(f"tokens: every run of every build equals {reference_build}'s" if not failures else f"{failures} failures")
    return 1 if failures else 0


def extras(data, bindir, nvtx_tool, outdir):
    prompt = [p.rstrip("\n") for p in open(os.path.join(data, "prompts.txt"))][0]
    snapshot, nvtx = os.path.join(outdir, "ggml-gpt2-snapshot.json"), os.path.join(outdir, "ggml-gpt2-nvtx.txt")
    env = dict(os.environ, GGML_CUDA_GPURT_SNAPSHOT=snapshot, GGML_CUDA_GPURT_SNAPSHOT_AT="40",
               NVTX_INJECTION64_PATH=nvtx_tool, GPURT_NVTX_RECORD=nvtx, GPURT_SANITIZER="1")
    command = [os.path.join(bindir, "gpt-2-backend"), "-m", os.path.join(data, "ggml-model.bin"), "-p", prompt,
               "-ngl", "1", "--top_k", "1", "-s", "1", "-n", str(NEW_TOKENS), "--ignore-eos"]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    print(result.stdout[-600:])
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {result.stderr[-3000:]}")
    failures = []
    blocks = [b for seg in json.load(open(snapshot))["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"]
    print(f"snapshot after graph computation 40: {len(blocks)} live blocks")
    for b in sorted(blocks, key=lambda b: -b["size"]):
        caller = next((f["name"] for f in b.get("frames", []) if re.match(r"(ggml_|gpt2_)", f["name"])
                       and "ggml_cuda" not in f["name"] and "ggml_backend_cuda" not in f["name"]), "?")
        print(f"  {b['requested_size'] / 2**20:9.2f} MiB  {b.get('annotation') or '(none)':16} allocated in {caller}")
    buffers = sum(b.get("annotation") == "CUDA0 buffer" for b in blocks)
    if buffers < 3:  # the weights, the KV cache and the compute buffer
        failures.append(f"{buffers} blocks annotated as ggml's CUDA0 buffers")
    print(open(snapshot + ".txt").read())
    pushes = [l for l in open(nvtx) if l.startswith("push") and "ggml_backend_cuda_graph_compute" in l]
    pops = [l for l in open(nvtx) if l.startswith("pop")]
    computations = NEW_TOKENS  # the prompt in one batch, then one per token but the last
    print(f"NVTX: {len(pushes)} ranges ggml_backend_cuda_graph_compute, {len(pops)} closed")
    if len(pushes) < computations or len(pops) < len(pushes):
        failures.append(f"{len(pushes)} NVTX ranges for {computations} graph computations")
    reports = [l for l in result.stderr.splitlines() if "sanitizer" in l]
    print(f"stream sanitizer: {len(reports)} lines of reports" + "".join(f"\n  {l}" for l in reports[:20]))
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


def build_spec(spec):
    name, rest = spec.split("=", 1)
    bindir, _, env = rest.partition(":")
    return name, bindir, dict(kv.split("=", 1) for kv in env.split(",") if kv)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "run":
        sys.exit(run(sys.argv[2], int(sys.argv[3]), [build_spec(s) for s in sys.argv[4:]]))
    elif sys.argv[1] == "extras":
        sys.exit(extras(*sys.argv[2:6]))
    else:
        sys.exit(__doc__)
