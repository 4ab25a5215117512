"""Writes a Llama model the way a user's model reaches llama.cpp, offline: a SentencePiece
tokenizer trained on the llama.cpp tree's own Markdown, `transformers`' LlamaForCausalLM
from a seeded config saved with its weights in f16, then llama.cpp's
convert_hf_to_gguf.py. For comparing builds token by token, not for its text. Needs
torch, transformers and sentencepiece (the GPU machine has them).

    python3 make_hf_model.py LLAMA_CPP_DIR OUT.gguf [--dim N] [--layers N] [--ff N]
                             [--heads N] [--kv-heads N] [--vocab N] [--seed N]
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile


def train_tokenizer(root, model_dir, vocab):
    """A byte-fallback BPE SentencePiece model of `vocab` pieces, trained on the tree's
    Markdown (single-threaded: the same pieces every run)."""
    import sentencepiece as spm
    text = model_dir / "corpus.txt"
    with open(text, "w", encoding="utf-8") as out:
        for md in sorted(root.rglob("*.md")):
            out.write(md.read_text(encoding="utf-8", errors="ignore"))
            out.write("\n")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(model_dir / "tokenizer"), vocab_size=vocab, model_type="bpe",
                                   byte_fallback=True, character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                   num_threads=1, minloglevel=2)
    text.unlink()
    (model_dir / "tokenizer.vocab").unlink()
    (model_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("llama_cpp")
    ap.add_argument("out")
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--ff", type=int, default=2816)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    root = pathlib.Path(a.llama_cpp)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = pathlib.Path(tmp)
        train_tokenizer(root, model_dir, a.vocab)
        config = LlamaConfig(vocab_size=a.vocab, hidden_size=a.dim, intermediate_size=a.ff, num_hidden_layers=a.layers,
                             num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=4096,
                             rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
        torch.manual_seed(a.seed)
        model = LlamaForCausalLM(config)
        with torch.no_grad():  # HF's init (std 0.02) makes near-uniform logits: widen it so greedy tokens are decided
            for p in model.parameters():
                if p.dim() == 2:
                    p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)
        model.to(torch.float16).save_pretrained(model_dir)
        subprocess.run([sys.executable, str(root / "convert_hf_to_gguf.py"), str(model_dir), "--outfile", a.out, "--outtype", "f16"],
                       check=True)


if __name__ == "__main__":
    main()
