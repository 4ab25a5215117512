"""Writes a Llama model with seeded random f16 weights and llama.cpp's shipped Llama 2
vocabulary (models/ggml-vocab-llama-spm.gguf), offline, with the gguf-py of the same
llama.cpp tree: for comparing builds token by token, not for its text.

    python3 make_model.py LLAMA_CPP_DIR OUT.gguf [--dim N] [--layers N] [--ff N]
                          [--heads N] [--kv-heads N] [--experts N --experts-used N] [--seed N]

The defaults make a 1.6 GiB dense model (dim 2048, 14 layers, ff 5632); --experts makes
its feed-forward a mixture of experts (llama's MoE layout, as Mixtral's).
"""
import argparse
import pathlib
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("llama_cpp")
    ap.add_argument("out")
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=14)
    ap.add_argument("--ff", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--experts", type=int, default=0)
    ap.add_argument("--experts-used", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    root = pathlib.Path(a.llama_cpp)
    sys.path.insert(0, str(root / "gguf-py"))
    import numpy as np
    import gguf

    vocab = gguf.GGUFReader(root / "models" / "ggml-vocab-llama-spm.gguf")
    n_vocab = len(vocab.fields["tokenizer.ggml.tokens"].data)
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(f"random-llama-{a.dim}x{a.layers}" + (f"-{a.experts}e" if a.experts else ""))
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.dim)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(a.dim // a.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if a.experts:
        w.add_expert_count(a.experts)
        w.add_expert_used_count(a.experts_used)
    for name, field in vocab.fields.items():
        if not name.startswith("tokenizer."):
            continue
        value = field.contents()
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, value, vtype, sub_type=field.types[-1])
        else:
            w.add_key_value(name, value, vtype)

    rng = np.random.default_rng(a.seed)

    def tensor(name, *shape, scale=None):
        # numpy's shape is ggml's reversed: (rows, columns) = (ne1, ne0)
        if scale is None:
            data = rng.standard_normal(shape, dtype=np.float32) * (1.0 / np.sqrt(shape[-1]))
        else:
            data = np.full(shape, scale, dtype=np.float32)
        w.add_tensor(name, data.astype(np.float16 if len(shape) > 1 else np.float32))

    head_dim = a.dim // a.heads
    tensor("token_embd.weight", n_vocab, a.dim)
    tensor("output_norm.weight", a.dim, scale=1.0)
    tensor("output.weight", n_vocab, a.dim)
    for i in range(a.layers):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", a.dim, scale=1.0)
        tensor(p + "attn_q.weight", a.dim, a.dim)
        tensor(p + "attn_k.weight", a.kv_heads * head_dim, a.dim)
        tensor(p + "attn_v.weight", a.kv_heads * head_dim, a.dim)
        tensor(p + "attn_output.weight", a.dim, a.dim)
        tensor(p + "ffn_norm.weight", a.dim, scale=1.0)
        if a.experts:
            tensor(p + "ffn_gate_inp.weight", a.experts, a.dim)
            tensor(p + "ffn_gate_exps.weight", a.experts, a.ff, a.dim)
            tensor(p + "ffn_up_exps.weight", a.experts, a.ff, a.dim)
            tensor(p + "ffn_down_exps.weight", a.experts, a.dim, a.ff)
        else:
            tensor(p + "ffn_gate.weight", a.ff, a.dim)
            tensor(p + "ffn_up.weight", a.ff, a.dim)
            tensor(p + "ffn_down.weight", a.dim, a.ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.out}: {pathlib.Path(a.out).stat().st_size / 2**30:.2f} GiB, vocabulary {n_vocab}")


if __name__ == "__main__":
    main()
