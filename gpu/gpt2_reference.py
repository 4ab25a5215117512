"""GPT-2 for the C++ engine (examples-cpp/gpt2): weights, prompts and PyTorch's
reference outputs, made on the GPU machine with no download, and the comparison.

    python3 gpt2_reference.py make DIR
        A seeded GPT2LMHeadModel(GPT2Config()) (124M) saved as DIR/gpt2.safetensors
        (transformers' names; the LM head is tied to wte), DIR/prompts.txt (4 prompts
        of 16 seeded token ids), and transformers' greedy generate of 128 new tokens:
        DIR/ref_tokens.txt (fp32), DIR/ref_logits.f32 (fp32 raw logits, [step][row][vocab])
        and DIR/ref_tokens_f16.txt (the model in fp16); and for the prompts cut to unequal
        lengths (DIR/prompts_ragged.txt, left-padded with an attention mask),
        DIR/ragged_tokens.txt and DIR/ragged_logits.f32 (fp32).
    python3 gpt2_reference.py compare DIR TOKENS LOGITS [REFERENCE [ROW]]
        fp32: the engine's tokens equal PyTorch's (DIR/REFERENCE_tokens.txt, REFERENCE
        "ref" or "ragged"), and every step's logits within 1e-3; with ROW, the engine
        ran that prompt alone.
    python3 gpt2_reference.py compare16 DIR TOKENS [ROW]
        fp16: the first step where the engine's tokens leave PyTorch's, per prompt.
    python3 gpt2_reference.py topk K TOKENS LOGITS [TOKENS_SAME_SEED TOKENS_OTHER_SEED]
        top-k sampling: every sampled token among its step's k largest logits; the same
        seed gives the same tokens, another seed others.
    python3 gpt2_reference.py speed DIR [MODES]
        transformers on DIR's weights, fp32 and fp16, 128-token prompts and 256 new
        tokens at batch 1 and 16: tokens per second and peak reserved memory of eager
        generate, of a static KV cache with the decode step in a CUDA graph ("graphs"),
        and of that step under torch.compile's reduce-overhead ("compile"); and
        DIR/prompts_b1.txt, DIR/prompts_b16.txt for the engine's run of the same.
    python3 gpt2_reference.py first DIR PROMPTS
        the time from process start to transformers' first token (fp32, eager).
"""
import os
import sys

import numpy as np
import torch

VOCAB, NEW_TOKENS, PROMPTS, PROMPT_LEN = 50257, 128, 4, 16
RAGGED_LENGTHS = (16, 9, 3, 12)  # DIR/prompts_ragged.txt: the prompts cut to these lengths


def read_tokens(path):
    with open(path) as f:
        return [[int(t) for t in line.split()] for line in f if line.strip()]


def write_tokens(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(" ".join(str(int(t)) for t in row) + "\n")


def make(out):
    from safetensors.torch import save_file
    from transformers import GPT2Config, GPT2LMHeadModel

    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    model = GPT2LMHeadModel(GPT2Config()).eval().cuda()
    model.generation_config.eos_token_id = None  # the engine does not stop at an end-of-text token
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()
               if k.startswith("transformer.") and not k.endswith((".attn.bias", ".attn.masked_bias"))}
    save_file(tensors, os.path.join(out, "gpt2.safetensors"))
    prompts = torch.randint(0, VOCAB, (PROMPTS, PROMPT_LEN), generator=torch.Generator().manual_seed(5678))
    write_tokens(os.path.join(out, "prompts.txt"), prompts.tolist())
    ids = prompts.cuda()
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.no_grad():
        run = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1,
                             output_logits=True, return_dict_in_generate=True, pad_token_id=0)
        write_tokens(os.path.join(out, "ref_tokens.txt"), run.sequences[:, PROMPT_LEN:].tolist())
        torch.stack(run.logits).float().cpu().numpy().astype(np.float32).tofile(os.path.join(out, "ref_logits.f32"))
        # Prompts of unequal lengths, left-padded with an attention mask as generate
        # expects (the engine pads the same way); the pad id is never attended to.
        ragged = [prompts[i, :n].tolist() for i, n in enumerate(RAGGED_LENGTHS)]
        write_tokens(os.path.join(out, "prompts_ragged.txt"), ragged)
        padded = torch.zeros(PROMPTS, PROMPT_LEN, dtype=torch.long)
        mask = torch.zeros_like(padded)
        for i, row in enumerate(ragged):
            padded[i, PROMPT_LEN - len(row):] = torch.tensor(row)
            mask[i, PROMPT_LEN - len(row):] = 1
        run = model.generate(padded.cuda(), attention_mask=mask.cuda(), max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1,
                             output_logits=True, return_dict_in_generate=True, pad_token_id=0)
        write_tokens(os.path.join(out, "ragged_tokens.txt"), run.sequences[:, PROMPT_LEN:].tolist())
        torch.stack(run.logits).float().cpu().numpy().astype(np.float32).tofile(os.path.join(out, "ragged_logits.f32"))
        half = model.half()
        run16 = half.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1, pad_token_id=0)
        write_tokens(os.path.join(out, "ref_tokens_f16.txt"), run16[:, PROMPT_LEN:].tolist())
    print(f"made {out}: {len(tensors)} tensors, {PROMPTS} prompts of {PROMPT_LEN} tokens, {NEW_TOKENS} new tokens each")


def first_divergence(mine, ref):
    return [next((i for i, (a, b) in enumerate(zip(m, r)) if a != b), None) for m, r in zip(mine, ref)]


def reference_rows(row):
    """The reference's prompts an engine run covers: all, or the one of index `row`."""
    return slice(None) if row is None else slice(int(row), int(row) + 1)


def compare(out, tokens, logits, reference="ref", row=None):
    rows = reference_rows(row)
    mine, ref = read_tokens(tokens), read_tokens(os.path.join(out, f"{reference}_tokens.txt"))[rows]
    diverged = first_divergence(mine, ref)
    want = np.fromfile(os.path.join(out, f"{reference}_logits.f32"), dtype=np.float32).reshape(NEW_TOKENS, PROMPTS, VOCAB)[:, rows]
    got = np.fromfile(logits, dtype=np.float32).reshape(want.shape)
    # A step's logits are comparable while both have seen the same tokens.
    steps = min([d if d is not None else NEW_TOKENS for d in diverged]) + 1
    steps = min(steps, NEW_TOKENS)
    diff = np.abs(got[:steps] - want[:steps]).max(axis=(1, 2))
    print(f"fp32 tokens: {sum(d is None for d in diverged)} of {len(ref)} prompts identical over {NEW_TOKENS} tokens"
          f" (first divergence per prompt: {diverged})")
    print(f"fp32 logits: max abs difference {diff.max():.3g} over {steps} steps (worst step {int(diff.argmax())}; median {np.median(diff):.3g})")
    ok = all(d is None for d in diverged) and diff.max() <= 1e-3
    print("fp32 against PyTorch:", "PASS" if ok else "FAIL")
    return ok


def compare16(out, tokens, row=None):
    mine, ref = read_tokens(tokens), read_tokens(os.path.join(out, "ref_tokens_f16.txt"))[reference_rows(row)]
    diverged = first_divergence(mine, ref)
    print(f"fp16 tokens: first divergence from PyTorch's fp16 per prompt (None: none in {NEW_TOKENS}): {diverged}")
    return True


def topk(k, tokens, logits, same=None, other=None):
    k, mine = int(k), read_tokens(tokens)
    got = np.fromfile(logits, dtype=np.float32).reshape(NEW_TOKENS, PROMPTS, VOCAB)
    kth = -np.partition(-got, k - 1, axis=2)[:, :, k - 1]  # each step's k-th largest logit
    picked = np.array([[got[step, row, mine[row][step]] for row in range(PROMPTS)] for step in range(NEW_TOKENS)])
    inside = bool((picked >= kth).all())
    distinct = len({t for row in mine for t in row})
    print(f"top-{k}: every sampled token among its step's top {k}: {inside}; {distinct} distinct tokens sampled")
    ok = inside
    if same and other:
        repeat, differ = read_tokens(same) == mine, read_tokens(other) != mine
        print(f"top-{k}: the same seed repeats the tokens: {repeat}; another seed gives others: {differ}")
        ok = ok and repeat and differ
    return ok


def load_model(out, dtype):
    from safetensors.torch import load_file
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config()).eval().cuda()
    model.load_state_dict(load_file(os.path.join(out, "gpt2.safetensors")), strict=False)
    model.tie_weights()
    model.generation_config.eos_token_id = None
    return model.to(dtype)


def static_cache(model, batch, length):
    from transformers import StaticCache
    try:  # transformers 4.4x-4.5x
        return StaticCache(config=model.config, max_batch_size=batch, max_cache_len=length, device="cuda", dtype=model.dtype)
    except TypeError:  # later: sized on first use
        return StaticCache(config=model.config, max_cache_len=length)


def decode_steps(model, forward, ids, new_tokens, cache):
    """A greedy decode of `ids` ([batch][prompt]) over the static KV cache `cache`:
    prefill() runs the prompt in one eager forward, decode() one step through `forward`
    (forward, argmax, the next position); both write out_tokens [batch][new_tokens].
    Returns (prefill, decode, out_tokens)."""
    batch, prompt_len = ids.shape
    token = torch.zeros(batch, 1, dtype=torch.long, device="cuda")
    position = torch.zeros(1, dtype=torch.long, device="cuda")
    out_tokens = torch.zeros(batch, new_tokens, dtype=torch.long, device="cuda")

    def decode():
        logits = forward(token, past_key_values=cache, cache_position=position, use_cache=True).logits
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out_tokens.index_copy_(1, position - prompt_len + 1, nxt)
        token.copy_(nxt)
        position.add_(1)

    def prefill():
        cache.reset()
        logits = model(ids, past_key_values=cache, cache_position=torch.arange(prompt_len, device="cuda"), use_cache=True).logits
        token.copy_(logits[:, -1].argmax(-1, keepdim=True))
        out_tokens[:, :1].copy_(token)
        position.fill_(prompt_len)

    return prefill, decode, out_tokens


def captured_step(prefill, decode, capture=True):
    """After a prefill: three decode steps on a side stream (warm-up, and compilation),
    then with `capture` the step captured once in a CUDA graph after a fresh prefill.
    Returns the step to call: the graph's replay, or `decode`."""
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # the positions are replayed by the caller's prefill
                decode()
        torch.cuda.current_stream().wait_stream(side)
        if not capture:
            return decode
        prefill()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            decode()
    return graph.replay


def graphed_decoder(model, ids, new_tokens, compile_mode=None):
    """PyTorch's fastest decode without downloads: a static KV cache, the prompt in one
    eager forward, then per token one decode step (forward, argmax, the next position).
    Without compile_mode the step is captured once in a CUDA graph and replayed; with
    it, the forward is compiled by torch.compile (whose "reduce-overhead" mode captures
    CUDA graphs itself). Returns run() -> (the new tokens [batch][new_tokens], seconds
    a decode step, the prompt's forward left out as the engine's figure leaves it)."""
    batch, prompt_len = ids.shape
    cache = static_cache(model, batch, prompt_len + new_tokens)
    forward = torch.compile(model.forward, mode=compile_mode) if compile_mode else model.forward
    prefill, decode, out_tokens = decode_steps(model, forward, ids, new_tokens, cache)
    with torch.no_grad():
        prefill()
    step = captured_step(prefill, decode, capture=not compile_mode)

    def run():
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.no_grad():
            prefill()
            start.record()
            for _ in range(new_tokens - 1):
                step()
            stop.record()
        stop.synchronize()
        return out_tokens, start.elapsed_time(stop) / 1e3 / (new_tokens - 1)

    return run


def timed(run, batch, new_tokens):
    """run() -> tokens, or (tokens, seconds a step): tokens, tokens/s, ms a step, peak MiB."""
    import time
    run()  # warm-up
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    result = run()
    torch.cuda.synchronize()
    tokens, step = result if isinstance(result, tuple) else (result, (time.perf_counter() - t) / new_tokens)
    return tokens, batch / step, step * 1e3, torch.cuda.max_memory_reserved() / 2**20


def speed(out, modes):
    """Tokens per second of transformers' decoding, 128-token prompts and 256 new tokens
    at batch 1 and 16, for each of `modes` (comma-separated: eager, graphs, compile)
    in fp32 and fp16; writes DIR/prompts_b{1,16}.txt for the engine's run of the same."""
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    torch.backends.cuda.matmul.allow_tf32 = False
    new_tokens = 256
    for dtype in (torch.float32, torch.float16):
        model = load_model(out, dtype)
        for batch in (1, 16):
            ids = torch.randint(0, VOCAB, (batch, 128), generator=torch.Generator().manual_seed(batch)).cuda()
            write_tokens(os.path.join(out, f"prompts_b{batch}.txt"), ids.tolist())
            runs = {}
            for mode in modes.split(","):
                if mode == "eager":
                    def run():
                        with torch.no_grad():
                            return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                                                  pad_token_id=0)[:, 128:]
                else:
                    try:
                        run = graphed_decoder(model, ids, new_tokens, "reduce-overhead" if mode == "compile" else None)
                    except Exception as e:  # report the path as unavailable, keep the others
                        print(f"transformers {mode} {str(dtype)[6:]}, batch {batch}: not available: {type(e).__name__}: {str(e)[:300]}")
                        continue
                tokens, rate, ms, peak = timed(run, batch, new_tokens)
                runs[mode] = tokens.clone()
                same = "" if mode == "eager" or "eager" not in runs else \
                    f", tokens {'identical to' if torch.equal(tokens, runs['eager']) else 'NOT identical to'} eager's"
                what = "prompt included" if mode == "eager" else "decode steps"
                print(f"transformers {mode} {str(dtype)[6:]}, batch {batch}: {rate:.1f} tokens/s ({ms:.3f} ms a step, {what}), "
                      f"peak reserved {peak:.1f} MiB{same}")
            torch._dynamo.reset()
        del model
        torch.cuda.empty_cache()


def seconds_since_process_start():
    """From this process's start (the kernel's record of it) to now, as the engine's
    "first token after" counts from its main()'s start."""
    with open("/proc/self/stat") as f:
        started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - started_ticks / os.sysconf("SC_CLK_TCK")


def first_token(out, prompts):
    """transformers from a cold process: import, load DIR's weights, the first greedy
    token of PROMPTS (the engine's speed prompts), fp32 eager."""
    ids = torch.tensor(read_tokens(prompts)).cuda()
    model = load_model(out, torch.float32)
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    print(f"transformers eager fp32, batch {ids.shape[0]}: first token after {seconds_since_process_start() * 1e3:.0f} ms from process start")


if __name__ == "__main__":
    verb = sys.argv[1]
    if verb == "make":
        make(sys.argv[2])
    elif verb == "compare":
        sys.exit(0 if compare(*sys.argv[2:7]) else 1)
    elif verb == "compare16":
        sys.exit(0 if compare16(*sys.argv[2:5]) else 1)
    elif verb == "topk":
        sys.exit(0 if topk(*sys.argv[2:7]) else 1)
    elif verb == "first":
        first_token(sys.argv[2], sys.argv[3])
    elif verb == "speed":
        speed(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "eager,graphs,compile")
    else:
        sys.exit(__doc__)
