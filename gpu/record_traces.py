"""Records allocation traces of PyTorch models for trace_replay.cpp.

    python3 record_traces.py OUT_DIR [NAME...]

Each workload runs from an empty cache under PyTorch's own memory history; the
trace keeps, in order, every allocation (its block size and stream) and the
moment its block became free again (`free_completed`). Weights are random: the
shapes, not the values, decide the allocations. Files: OUT_DIR/NAME.trace, lines
`a ID SIZE STREAM` and `f ID`, after a `# NAME` header.
"""
import hashlib
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.benchmark = False


class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.skip is None else self.skip(x)))


def resnet18(classes=1000):
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def cnn_train(batch):
    model = resnet18().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for _ in range(4):
        x = torch.randn(batch, 3, 160, 160, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, cache):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if cache is not None:  # the KV cache grows by concatenation, as in simple generate loops
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)))), (k, v)


def llm_generate(batch=8, prompt=96, new_tokens=192, d=768, heads=12, layers=12, vocab=50257):
    emb, pos = nn.Embedding(vocab, d).cuda().half(), nn.Embedding(2048, d).cuda().half()
    blocks = nn.ModuleList(Block(d, heads) for _ in range(layers)).cuda().half()
    head = nn.Linear(d, vocab, bias=False).cuda().half()
    tokens = torch.randint(0, vocab, (batch, prompt), device="cuda")
    with torch.no_grad():
        caches, start, step = [None] * layers, 0, tokens
        for _ in range(new_tokens):
            x = emb(step) + pos(torch.arange(start, start + step.shape[1], device="cuda"))
            for i, blk in enumerate(blocks):
                x, caches[i] = blk(x, caches[i])
            nxt = head(x[:, -1]).float().softmax(-1).argmax(-1, keepdim=True)
            start += step.shape[1]
            step = nxt
            tokens = torch.cat([tokens, nxt], dim=1)
    return tokens


def gpt2_generate_sampled(calls=12, new_tokens=64):
    """transformers' GPT-2 (124M, fp16) sampling (top-k 50) for prompts of 1 to 8 rows
    and 32 to 500 tokens, one generate call after another: a decode loop whose peak is
    a few hundred MiB."""
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config()).cuda().half().eval()
    rng = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for _ in range(calls):
            rows = int(torch.randint(1, 9, (1,), generator=rng))
            length = int(torch.randint(32, 501, (1,), generator=rng))
            prompt = torch.randint(0, 50257, (rows, length), generator=rng).cuda()
            model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, top_k=50,
                           max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0)


def encoder_varlen(batch=32, steps=40):
    layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(7)
    for _ in range(steps):
        length = int(torch.randint(16, 513, (1,), generator=gen))
        x = torch.randn(batch, length, 512, device="cuda")
        loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return F.relu(self.body(x) + (x if self.skip is None else self.skip(x)))


def resnet50(classes=1000):
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def resnet50_train(batch=64, steps=6, seed=1):
    torch.manual_seed(seed)
    model = resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(seed + 1)
    for _ in range(steps):
        x = torch.randn(batch, 3, 224, 224, generator=gen).cuda()
        y = torch.randint(0, 1000, (batch,), generator=gen).cuda()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return weights_digest(model)


def weights_digest(model):
    """The digest of `model`'s weights' bytes: a training run's result."""
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().numpy().tobytes())
    return digest.hexdigest().encode()


def resnet50_deterministic():
    """ResNet-50 training as gpu/dropin_peak.py runs it: deterministic cuDNN, no TF32."""
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True, allow_tf32=False):
        resnet50_train()


WORKLOADS = {
    "cnn_train_b32": lambda: cnn_train(32),
    "cnn_train_b128": lambda: cnn_train(128),
    "cnn_train_b256": lambda: cnn_train(256),
    "llm_generate": llm_generate,
    "gpt2_generate_sampled": gpt2_generate_sampled,
    "encoder_varlen": encoder_varlen,
    "resnet50_train_b64": resnet50_deterministic,
}


def record(name, workload, out_dir):
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=4_000_000, context=None, stacks="python")
    workload()
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events = snapshot["device_traces"][0]
    ids, streams, lines, live, peak, allocs = {}, {}, [f"# {name}"], 0, 0, 0
    for e in events:
        if e["action"] == "alloc":
            ident = allocs  # an address is reused, an id never
            allocs += 1
            ids[e["addr"]] = (ident, e["size"])
            stream = streams.setdefault(e["stream"], len(streams))
            lines.append(f"a {ident} {e['size']} {stream}")
            live += e["size"]
            peak = max(peak, live)
        elif e["action"] == "free_completed" and e["addr"] in ids:
            ident, size = ids.pop(e["addr"])
            lines.append(f"f {ident}")
            live -= size
    with open(os.path.join(out_dir, name + ".trace"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{name}: {allocs} allocations, {len(lines) - 1 - allocs} frees, {len(streams)} streams, "
          f"peak live {peak / 2**20:.1f} MiB, {len(ids)} live at the end")


def main():
    out_dir, names = sys.argv[1], sys.argv[2:] or list(WORKLOADS)
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    for name in names:
        record(name, WORKLOADS[name], out_dir)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
