"""The model families of gpu/scenarios.py: workloads PyTorch users run, each a function
of its sizes (drawn by gpu/scenarios.py) and a seed that returns bytes
that stand for its result (greedy tokens, or the trained weights' digest), so that two
allocators' runs can be compared bit for bit. Weights are random: the shapes, not the
values, decide the allocations.

    gpt2_generate     transformers' GPT-2 (124 M, fp16) generating greedily
    llama_generate    a Llama-style decoder with grouped-query attention (fp16)
    resnet50_train    ResNet-50 training (SGD with momentum)
    bert_train        a BERT-base masked-LM training on batches of varying length (AdamW)
    moe_train         a mixture-of-experts Transformer (top-2 of 8 experts) training (AdamW):
                      each expert's batch is as large as its router decides
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from record_traces import resnet50_train, weights_digest


def generate(model, vocab, batch, prompt, new_tokens, seed):
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (batch, prompt), generator=gen).cuda()
    with torch.no_grad():
        out = model.generate(tokens, attention_mask=torch.ones_like(tokens), do_sample=False,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0)
    return out.cpu().numpy().tobytes()


def gpt2_generate(batch, prompt, new_tokens, seed):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config()).cuda().half().eval()
    return generate(model, 50257, batch, prompt, new_tokens, seed)


def llama_generate(batch, prompt, new_tokens, seed):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096)
    model = LlamaForCausalLM(config).cuda().half().eval()
    return generate(model, 32000, batch, prompt, new_tokens, seed)


def train(model, steps, batch_of, seed):
    """`steps` AdamW steps of `model` on the loss `batch_of(gen)` returns."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        loss = batch_of(gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return weights_digest(model)


def bert_train(batch, steps, seed):
    from transformers import BertConfig, BertForMaskedLM
    torch.manual_seed(seed)
    model = BertForMaskedLM(BertConfig(attn_implementation="sdpa")).cuda()

    def loss(gen):
        length = int(torch.randint(32, 513, (1,), generator=gen))
        ids = torch.randint(0, 30522, (batch, length), generator=gen).cuda()
        return model(input_ids=ids, labels=ids).loss
    return train(model, steps, loss, seed)


class Experts(nn.Module):
    """Top-2 of `experts` MLPs per token: each expert runs on the tokens routed to it."""

    def __init__(self, d, ff, experts):
        super().__init__()
        self.router = nn.Linear(d, experts, bias=False)
        self.up = nn.ModuleList(nn.Linear(d, ff) for _ in range(experts))
        self.down = nn.ModuleList(nn.Linear(ff, d) for _ in range(experts))

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        weight, choice = self.router(flat).softmax(-1).topk(2, dim=-1)
        out = torch.zeros_like(flat)
        for e, (up, down) in enumerate(zip(self.up, self.down)):
            rows, slot = (choice == e).nonzero(as_tuple=True)
            y = down(F.gelu(up(flat[rows]))) * weight[rows, slot, None]
            out = out.index_put((rows,), y, accumulate=True)
        return out.view_as(x)


class MoeBlock(nn.Module):
    def __init__(self, d, heads, ff, experts):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.experts = Experts(d, ff, experts)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.experts(self.ln2(x))


def moe_train(batch, steps, seed):
    torch.manual_seed(seed)
    model = nn.Sequential(*(MoeBlock(768, 12, 2048, 8) for _ in range(4))).cuda()

    def loss(gen):
        length = int(torch.randint(64, 513, (1,), generator=gen))
        return model(torch.randn(batch, length, 768, generator=gen).cuda()).float().pow(2).mean()
    return train(model, steps, loss, seed)


# The workloads by name (gpu/scenarios.py draws their sizes).
FAMILIES = {"gpt2_generate": gpt2_generate, "llama_generate": llama_generate, "resnet50_train": resnet50_train,
            "bert_train": bert_train, "moe_train": moe_train}
