#!/usr/bin/env python3
"""Model forward+backward benchmark (issue #13, "Performance";
docs/benchmarks.md "Model forward+backward").

A ~0.5B dense and a ~0.5B MoE Qwen3 config, random weights in bf16, one
GRPO-shaped batch: PROMPTS prompts of P tokens, each with G=8 responses of
R tokens. Timed in the same run on the same weights:
  * transformers eager (sdpa attention), flat batch [PROMPTS*G, P+R],
    loss = mean NLL of the response tokens (transformers' own loss path);
  * transformers under torch.compile, same;
  * tandem flat   (tandem-model-bench --mode flat: every sequence whole);
  * tandem packed (--mode packed: each prompt stored once, a trie).
Throughput counts the flat batch's tokens (PROMPTS*G*(P+R)) per second for
every contender, so packing shows as speed. MFU = model FLOPs of the flat
batch (6*N_active*T + attention) / time / 989 TFLOP/s (H200 dense bf16).
Prints one line per contender as it is measured, then the table and the
ratios per model.

TANDEM_BENCH_VARIANTS="LABEL:VAR=VAL,VAR=VAL;..." also times tandem flat and
packed under each variant's environment (e.g. "flash+gmm:TANDEM_TREE_ATTENTION=
varlen-flash,TANDEM_MOE_EXPERTS=grouped-mm"), reported as "tandem LABEL flat"
and "tandem LABEL packed", with its own packed/flat ratio.

Usage: model_bench.py TANDEM_MODEL_BENCH WORKDIR
"""
import json
import os
import subprocess
import sys
import time

import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

PROMPTS, P, G, R = 4, 512, 8, 512
PEAK = 989e12
ITERS, WARMUP = 5, 2


def configs():
    common = dict(vocab_size=151936, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                  max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1000000.0)
    dense = Qwen3Config(num_hidden_layers=28, intermediate_size=3072, tie_word_embeddings=True, **common)
    moe = Qwen3MoeConfig(num_hidden_layers=12, intermediate_size=3072, moe_intermediate_size=384, num_experts=32,
                         num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                         tie_word_embeddings=False, output_router_logits=False, **common)
    return {"dense-0.6B": dense, "moe-0.7B-A0.2B": moe}


def active_params(cfg, model):
    total = sum(p.numel() for p in model.parameters())
    embed = cfg.vocab_size * cfg.hidden_size
    if getattr(cfg, "num_experts", None):
        expert = 3 * cfg.hidden_size * cfg.moe_intermediate_size
        inactive = cfg.num_hidden_layers * (cfg.num_experts - cfg.num_experts_per_tok) * expert
    else:
        inactive = 0
    # The input embedding is a lookup, the LM head a GEMM (tied or not).
    return total - inactive - (embed if not cfg.tie_word_embeddings else 0)


def model_flops(cfg, n_active):
    T = P + R
    tokens = PROMPTS * G * T
    attn = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim * T / 2  # causal, per token fwd
    return 3 * (2 * n_active + attn) * tokens


def time_fn(fn):
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(ITERS):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / ITERS / 1e3


def hf_step(model, ids, labels):
    def step():
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
    return step


def variants():
    """[(label, env overrides)]: the default first, then TANDEM_BENCH_VARIANTS'."""
    out = [("", {})]
    for item in filter(None, os.environ.get("TANDEM_BENCH_VARIANTS", "").split(";")):
        label, _, assigns = item.partition(":")
        out.append((label, dict(a.split("=", 1) for a in assigns.split(",") if a)))
    return out


def tandem_step(tool, model_dir, mode, trace=None, env=None):
    cmd = [tool, "--model", model_dir, "--prompts", str(PROMPTS), "--prompt-len", str(P), "--group", str(G),
           "--response-len", str(R), "--mode", mode, "--iters", str(ITERS), "--warmup", str(WARMUP)]
    if trace:
        cmd += ["--profile", trace]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        print(f"[bench] tandem {mode} failed rc={r.returncode}: {r.stderr[-1500:]}", flush=True)
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])["seconds_per_step"]


def report(name, res, flops, tokens):
    for k, sec in res.items():
        print(f"[bench] {name:16s} {k:22s} {sec * 1e3:9.1f} ms/step  {tokens / sec:10.0f} tok/s  "
              f"MFU {flops / sec / PEAK * 100:5.1f}%", flush=True)
    token_reduction = PROMPTS * G * (P + R) / (PROMPTS * (P + G * R))
    eager = res.get("transformers eager")
    comp = res.get("transformers compiled")
    for label, _ in variants():
        tag = f"tandem {label} " if label else "tandem "
        flat = res.get(tag + "flat")
        packed = res.get(tag + "packed")
        if flat and eager:
            print(f"[bench] {name}: {tag}flat / transformers eager = {eager / flat:.2f}x (target >= 1.3)")
        if flat and comp:
            print(f"[bench] {name}: {tag}flat / transformers compiled = {comp / flat:.2f}x (target >= 1.0)")
        if flat and packed:
            print(f"[bench] {name}: {tag}packed / {tag}flat = {flat / packed:.2f}x of a token reduction "
                  f"{token_reduction:.2f}x = {flat / packed / token_reduction * 100:.0f}% (target >= 90%)", flush=True)


def main():
    # Order per model: tandem (flat, packed), then transformers eager, then
    # compiled (the slowest to set up), each printed as it comes, so a call
    # that runs out of time keeps what it measured. TANDEM_BENCH_PROFILE=a,b
    # (model names): those models' tandem flat runs also write a profiled
    # step's trace, summarised last into $OUT/profile.log (model_profile.py).
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    out_dir = os.environ.get("OUT", work)
    profile = set(filter(None, os.environ.get("TANDEM_BENCH_PROFILE", "").split(",")))
    traces = []
    results = {}
    for name, cfg in configs().items():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).cuda()
        model_dir = os.path.join(work, name)
        model.save_pretrained(model_dir)
        n_active = active_params(cfg, model)
        flops = model_flops(cfg, n_active)
        tokens = PROMPTS * G * (P + R)
        res = {}
        results[name] = res
        for label, env in variants():
            for mode in ("flat", "packed"):
                key = f"tandem {label} {mode}" if label else f"tandem {mode}"
                trace = None
                if name in profile and mode == "flat" and not label:
                    trace = os.path.join(work, f"trace-{name}-{mode}.json")
                sec = tandem_step(tool, model_dir, mode, trace, env)
                if sec:
                    res[key] = sec
                    print(f"[bench] {name:16s} {key:22s} {sec * 1e3:9.1f} ms/step", flush=True)
                    if trace:
                        traces.append((f"{name} {mode}", trace))
        gen = torch.Generator().manual_seed(1)
        prompts = torch.randint(0, cfg.vocab_size, (PROMPTS, 1, P), generator=gen).expand(PROMPTS, G, P)
        resp = torch.randint(0, cfg.vocab_size, (PROMPTS, G, R), generator=gen)
        ids = torch.cat([prompts, resp], -1).reshape(PROMPTS * G, P + R).cuda()
        labels = ids.clone()
        labels[:, :P] = -100  # loss on the responses only
        model.train()
        try:
            res["transformers eager"] = time_fn(hf_step(model, ids, labels))
            print(f"[bench] {name:16s} transformers eager    {res['transformers eager'] * 1e3:9.1f} ms/step", flush=True)
        except torch.OutOfMemoryError:  # its full fp32 logits do not fit an 80 GB card at this batch
            model.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            print(f"[bench] {name:16s} transformers eager: out of GPU memory (full logits)", flush=True)
        compiled = torch.compile(model)
        try:
            res["transformers compiled"] = time_fn(hf_step(compiled, ids, labels))
        except Exception as e:  # a failed compile is a result, not a crash of the benchmark
            print(f"[bench] {name}: torch.compile failed: {e!r}"[:500], flush=True)
        del compiled, model
        torch.cuda.empty_cache()
        report(name, res, flops, tokens)
        with open(os.path.join(out_dir, "model_bench.json"), "w") as f:
            json.dump(results, f, indent=1)
    if traces:
        import model_profile  # noqa: E402  (beside this file)
        with open(os.path.join(out_dir, "profile.log"), "w") as f:
            for label, trace in traces:
                model_profile.summarise(trace, label, f)
                f.flush()


if __name__ == "__main__":
    main()
