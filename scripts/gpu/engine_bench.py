#!/usr/bin/env python3
"""Decode throughput of the rollout engine against transformers (issue #14,
"Performance"), on the GPU machine, in one run.

A random ~0.35B Qwen3 (bf16) saved with save_pretrained; for each batch size
B, B prompts of PROMPT tokens get NEW greedy tokens:
  * transformers `generate` (static cache, eager; batched, no padding);
  * `tandem-generate` (continuous batching, paged KV in tagged memory),
    decoding eagerly (--cuda-graphs none) and through CUDA graphs (auto);
each timed for NEW tokens and for 1 token (the prefill), so that decode
tokens/s = B * (NEW - 1) / (t(NEW) - t(1)) and prefill tokens/s = B *
PROMPT / t(1) (tandem's with the graphs' run: prefill runs eagerly either way;
tandem-generate empties the prefix cache before each run, so t(1) includes
the prefill; before 2026-12-07 it did not, and its prefill figures were the
cache's). The bandwidth limit: the bytes a
decode step reads (the weights but an untied input embedding table, + the
batch's KV at the mean context) over the
device's measured copy bandwidth. Prints a markdown table with the ratios.

Usage: engine_bench.py TANDEM_GENERATE WORKDIR [B ...]   (B = 0 alone: the GRPO workload only)
  TANDEM_ENGINE_MODEL=3b   a 3.1B dense config instead (Qwen2.5-3B's shapes)
  TANDEM_ENGINE_MODEL=moe  a 0.7B MoE (0.2B active: 12 layers, 32 experts,
                           top-4; model_bench.py's), whose limit counts the
                           experts a batch is expected to touch
  TANDEM_ENGINE_EAGER=0    skip tandem's eager runs (the graphs only)
  TANDEM_ENGINE_BASE=PATH  another tandem-generate (an earlier commit's) timed
                           with graphs in the same run: a column of its own
                           and the ratio of TANDEM_GENERATE's rate to it
  TANDEM_ENGINE_BASE_ENV=K=V  the base is TANDEM_GENERATE itself with K=V in its
                           environment (a kernel choice turned off, e.g.
                           TANDEM_DECODE_GEMV=off)
  TANDEM_ENGINE_GRPO=0     skip the GRPO-shaped workload: 64 prompts x 8
                           samples at temperature 1 (full softmax), NEW
                           tokens each, the samples of a prompt sharing its
                           prefill; tokens/s end to end (prefill included)
                           and of the decode alone, against transformers'
                           generate with num_return_sequences=8
"""
import json
import os
import subprocess
import sys
import time

import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

PROMPT, NEW = 512, 128


def config():
    common = dict(max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False)
    if os.environ.get("TANDEM_ENGINE_MODEL") == "moe":
        return Qwen3MoeConfig(vocab_size=151936, hidden_size=1024, num_hidden_layers=12, num_attention_heads=16,
                              num_key_value_heads=8, head_dim=128, intermediate_size=3072, moe_intermediate_size=384,
                              num_experts=32, num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1,
                              mlp_only_layers=[], output_router_logits=False, **common)
    if os.environ.get("TANDEM_ENGINE_MODEL") == "3b":  # Qwen2.5-3B's shapes, Qwen3's vocabulary: 3.1 B parameters
        return Qwen3Config(vocab_size=151936, hidden_size=2048, num_hidden_layers=36, num_attention_heads=16,
                           num_key_value_heads=2, head_dim=128, intermediate_size=11008, **common)
    return Qwen3Config(vocab_size=32768, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=64, intermediate_size=2816, **common)


def copy_bandwidth():
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    torch.cuda.synchronize()
    return 2 * 10 * x.numel() / (time.perf_counter() - t)  # bytes read + written per second


def hf_time(model, ids, new):
    def run():
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                           do_sample=False, eos_token_id=None, pad_token_id=0, cache_implementation="static")
    run()  # warm up (static cache allocation)
    torch.cuda.synchronize()
    t = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def hf_grpo_time(model, ids, n, new):
    def run():
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                           do_sample=True, temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=n,
                           eos_token_id=None, pad_token_id=0, cache_implementation="static")
    run()
    torch.cuda.synchronize()
    t = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def tandem_time(tool, model_dir, prompts, work, new, graphs="auto", env=None, extra=()):
    pfile = os.path.join(work, f"bench_{len(prompts)}.json")
    out = os.path.join(work, f"bench_{len(prompts)}_{new}_out.json")
    with open(pfile, "w") as f:
        json.dump({"prompts": prompts}, f)
    r = subprocess.run([tool, "--model", model_dir, "--prompts", pfile, "--out", out, "--device", "cuda",
                        "--max-new-tokens", str(new), "--kv-cache-mib", "16384", "--repeat", "2",
                        "--max-running", "512", "--max-step-tokens", "16384", "--cuda-graphs", graphs, *extra],
                       capture_output=True, text=True, timeout=900, env=env)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    with open(out) as f:
        return json.load(f)["runs"][-1]["seconds"]


def main():
    tool, work = sys.argv[1], sys.argv[2]
    batches = [b for b in [int(a) for a in sys.argv[3:]] or [1, 16, 64, 256] if b > 0]  # 0: no batch table
    os.makedirs(work, exist_ok=True)
    cfg = config()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).to("cuda").eval()
    model_dir = os.path.join(work, "bench_model")
    model.save_pretrained(model_dir)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    # A decode step reads every weight but the input embedding table (one
    # row a token), unless the table is the LM head too.
    embed = model.get_input_embeddings().weight
    read_bytes = weight_bytes - (0 if cfg.tie_word_embeddings else embed.numel() * embed.element_size())
    experts = getattr(cfg, "num_experts", 0) or 0
    expert_bytes = 3 * cfg.hidden_size * (cfg.moe_intermediate_size if experts else 0) * 2

    def weights_read(b):  # an MoE layer reads the experts b tokens route to: E (1 - (1 - k/E)^b) expected
        if not experts:
            return read_bytes
        touched = experts * (1 - (1 - cfg.num_experts_per_tok / experts) ** b)
        return read_bytes - cfg.num_hidden_layers * (experts - touched) * expert_bytes
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 2
    bw = copy_bandwidth()
    print(f"model {weight_bytes / 1e9:.2f} GB bf16, {read_bytes / 1e9:.2f} GB read a step; copy bandwidth {bw / 1e12:.2f} TB/s; prompt {PROMPT}, new {NEW}")
    base, base_env = os.environ.get("TANDEM_ENGINE_BASE"), None
    if os.environ.get("TANDEM_ENGINE_BASE_ENV"):
        key, _, value = os.environ["TANDEM_ENGINE_BASE_ENV"].partition("=")
        base, base_env = tool, dict(os.environ, **{key: value})
        print(f"base: this tandem-generate with {key}={value}")
    print("| batch | transformers tok/s | tandem eager tok/s | tandem graphs tok/s | graphs / transformers | "
          "graphs / eager | bandwidth limit tok/s | graphs / limit | transformers prefill tok/s | tandem prefill tok/s | "
          "prefill / transformers |" + (" base graphs tok/s | graphs / base |" if base else ""))
    print("|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if base else ""))
    gen = torch.Generator().manual_seed(1)
    for b in batches:
        prompts = torch.randint(0, cfg.vocab_size, (b, PROMPT), generator=gen)
        ids = prompts.to("cuda")
        hf_one = hf_time(model, ids, 1)
        hf = b * (NEW - 1) / (hf_time(model, ids, NEW) - hf_one)
        lst = prompts.tolist()
        rate = {}
        eager = os.environ.get("TANDEM_ENGINE_EAGER", "1") != "0"
        rate["none"] = float("nan")
        for graphs in (("none", "auto") if eager else ("auto",)):
            one = tandem_time(tool, model_dir, lst, work, 1, graphs)
            rate[graphs] = b * (NEW - 1) / (tandem_time(tool, model_dir, lst, work, NEW, graphs) - one)
        td = rate["auto"]
        prefill = b * PROMPT / one  # the prompts and one new token (graphs' run)
        step_bytes = weights_read(b) + b * (PROMPT + NEW / 2) * kv_per_token
        limit = b / (step_bytes / bw)
        extra = ""
        if base:
            old = b * (NEW - 1) / (tandem_time(base, model_dir, lst, work, NEW, env=base_env) -
                                   tandem_time(base, model_dir, lst, work, 1, env=base_env))
            extra = f" {old:.0f} | {td / old:.2f} |"
        print(f"| {b} | {hf:.0f} | {rate['none']:.0f} | {td:.0f} | {td / hf:.2f} | {td / rate['none']:.2f} | "
              f"{limit:.0f} | {td / limit:.2f} | {b * PROMPT / hf_one:.0f} | {prefill:.0f} | "
              f"{prefill * hf_one / (b * PROMPT):.2f} |" + extra, flush=True)
    if os.environ.get("TANDEM_ENGINE_GRPO", "1") != "0":
        grpo(tool, model, cfg, model_dir, work, gen)


def grpo(tool, model, cfg, model_dir, work, gen, prompts=64, n=8):
    """The GRPO-shaped workload: end-to-end and decode-only tokens/s."""
    ids = torch.randint(0, cfg.vocab_size, (prompts, PROMPT), generator=gen)
    sampled = ("--n", str(n), "--temperature", "1")
    hf_one, hf_all = hf_grpo_time(model, ids.to("cuda"), n, 1), hf_grpo_time(model, ids.to("cuda"), n, NEW)
    lst = ids.tolist()
    one = tandem_time(tool, model_dir, lst, work, 1, extra=sampled)
    full = tandem_time(tool, model_dir, lst, work, NEW, extra=sampled)
    tokens = prompts * n * NEW
    print(f"\nGRPO-shaped: {prompts} prompts of {PROMPT} x {n} samples, {NEW} new tokens each, temperature 1\n")
    print("| | transformers | tandem graphs | tandem / transformers |\n|---|---|---|---|")
    print(f"| seconds, end to end | {hf_all:.2f} | {full:.2f} | |")
    print(f"| tokens/s, end to end | {tokens / hf_all:.0f} | {tokens / full:.0f} | **{hf_all / full:.2f}** |")
    dec_hf, dec = prompts * n * (NEW - 1) / (hf_all - hf_one), prompts * n * (NEW - 1) / (full - one)
    print(f"| decode tokens/s | {dec_hf:.0f} | {dec:.0f} | **{dec / dec_hf:.2f}** |", flush=True)


if __name__ == "__main__":
    main()
