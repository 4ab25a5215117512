"""GPT-2 for the C++ engine (examples-cpp/gpt2): weights, prompts and PyTorch's
reference outputs, made on the GPU machine with no download, and the comparison.

    python3 gpt2_reference.py make DIR
        A seeded GPT2LMHeadModel(GPT2Config()) (124M) saved as DIR/gpt2.safetensors
        (transformers' names; the LM head is tied to wte), DIR/prompts.txt (4 prompts
        of 16 seeded token ids), and transformers' greedy generate of 128 new tokens:
        DIR/ref_tokens.txt (fp32), DIR/ref_logits.f32 (fp32 raw logits, [step][row][vocab])
        and DIR/ref_tokens_f16.txt (the model in fp16).
    python3 gpt2_reference.py compare DIR TOKENS LOGITS
        fp32: the engine's tokens equal PyTorch's, and every step's logits within 1e-3.
    python3 gpt2_reference.py compare16 DIR TOKENS
        fp16: the first step where the engine's tokens leave PyTorch's, per prompt.
    python3 gpt2_reference.py topk K TOKENS LOGITS [TOKENS_SAME_SEED TOKENS_OTHER_SEED]
        top-k sampling: every sampled token among its step's k largest logits; the same
        seed gives the same tokens, another seed others.
    python3 gpt2_reference.py speed DIR
        transformers' eager generate on DIR's weights, fp32, 128-token prompts and 256
        new tokens at batch 1 and 16: tokens per second and peak reserved memory, and
        DIR/prompts_b1.txt, DIR/prompts_b16.txt for the engine's run of the same.
"""
import os
import sys

import numpy as np
import torch

VOCAB, NEW_TOKENS, PROMPTS, PROMPT_LEN = 50257, 128, 4, 16


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
        half = model.half()
        run16 = half.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1, pad_token_id=0)
        write_tokens(os.path.join(out, "ref_tokens_f16.txt"), run16[:, PROMPT_LEN:].tolist())
    print(f"made {out}: {len(tensors)} tensors, {PROMPTS} prompts of {PROMPT_LEN} tokens, {NEW_TOKENS} new tokens each")


def first_divergence(mine, ref):
    return [next((i for i, (a, b) in enumerate(zip(m, r)) if a != b), None) for m, r in zip(mine, ref)]


def compare(out, tokens, logits):
    mine, ref = read_tokens(tokens), read_tokens(os.path.join(out, "ref_tokens.txt"))
    diverged = first_divergence(mine, ref)
    got = np.fromfile(logits, dtype=np.float32).reshape(NEW_TOKENS, PROMPTS, VOCAB)
    want = np.fromfile(os.path.join(out, "ref_logits.f32"), dtype=np.float32).reshape(NEW_TOKENS, PROMPTS, VOCAB)
    # A step's logits are comparable while both have seen the same tokens.
    steps = min([d if d is not None else NEW_TOKENS for d in diverged]) + 1
    steps = min(steps, NEW_TOKENS)
    diff = np.abs(got[:steps] - want[:steps]).max(axis=(1, 2))
    print(f"fp32 tokens: {sum(d is None for d in diverged)} of {PROMPTS} prompts identical over {NEW_TOKENS} tokens"
          f" (first divergence per prompt: {diverged})")
    print(f"fp32 logits: max abs difference {diff.max():.3g} over {steps} steps (worst step {int(diff.argmax())}; median {np.median(diff):.3g})")
    ok = all(d is None for d in diverged) and diff.max() <= 1e-3
    print("fp32 against PyTorch:", "PASS" if ok else "FAIL")
    return ok


def compare16(out, tokens):
    mine, ref = read_tokens(tokens), read_tokens(os.path.join(out, "ref_tokens_f16.txt"))
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


def speed(out):
    import time
    from transformers import GPT2LMHeadModel, GPT2Config
    from safetensors.torch import load_file

    model = GPT2LMHeadModel(GPT2Config()).eval().cuda()
    model.load_state_dict(load_file(os.path.join(out, "gpt2.safetensors")), strict=False)
    model.tie_weights()
    model.generation_config.eos_token_id = None
    torch.backends.cuda.matmul.allow_tf32 = False
    for batch in (1, 16):
        ids = torch.randint(0, VOCAB, (batch, 128), generator=torch.Generator().manual_seed(batch)).cuda()
        write_tokens(os.path.join(out, f"prompts_b{batch}.txt"), ids.tolist())
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False, pad_token_id=0)  # warm-up
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            t = time.perf_counter()
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=256, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t
        print(f"transformers eager generate fp32, batch {batch}: {batch * 256 / seconds:.1f} tokens/s "
              f"({seconds / 256 * 1e3:.3f} ms a step, prompt included), peak reserved {torch.cuda.max_memory_reserved() / 2**20:.1f} MiB")


if __name__ == "__main__":
    verb = sys.argv[1]
    if verb == "make":
        make(sys.argv[2])
    elif verb == "compare":
        sys.exit(0 if compare(*sys.argv[2:5]) else 1)
    elif verb == "compare16":
        sys.exit(0 if compare16(*sys.argv[2:4]) else 1)
    elif verb == "topk":
        sys.exit(0 if topk(*sys.argv[2:7]) else 1)
    elif verb == "speed":
        speed(sys.argv[2])
    else:
        sys.exit(__doc__)
