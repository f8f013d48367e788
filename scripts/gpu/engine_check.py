#!/usr/bin/env python3
"""The rollout engine against transformers' greedy generation (issue #14,
"Correctness" and the memory handoff of item 2), on the GPU machine.

For a small random Qwen3 (dense) and Qwen3-MoE built in transformers and
saved with save_pretrained, 64 prompts of 1..300 tokens each get 32 greedy
tokens from transformers' `generate` (one prompt at a time: no padding) and
from `tandem-generate` (every prompt at once through continuous batching and
the paged cache, the model and the KV pool in tagged memory):

  * CPU fp32 (16 prompts): tandem's tokens equal transformers' exactly;
  * CUDA bf16 (64 prompts): tandem's tokens equal transformers' bf16 ones,
    except where the two bf16 runs part at a near tie: at the first token
    where they differ, transformers' fp32 logits of the two tokens must lie
    closer than twice transformers' own bf16 error at that context (its
    largest logit error against fp32; each of the two bf16 runs may err
    that much): bf16 rounding decides such a token;
  * the handoff (--handoff): after pause (retract), release of `weights`,
    `kv_cache` and `cuda_graph` and resume, the second run gives the same
    tokens, and
    the release returned >= 95% of what the worker allocated on the device
    (its pools and what LibTorch's allocator holds) to the device reading;
    the CUDA runtime's own share (loaded kernels, library workspaces) stays
    until the process exits, and is reported beside it;
  * new weights (dense, decode graphs): after release -> resume ->
    load_weights of a second checkpoint, the replayed graphs give the same
    tokens and log-probs as graphs captured over that checkpoint in a fresh
    process, and agree with eager decoding of it.

The lm_head and the MoE router get std 0.5 weights: a random model's
logits are otherwise near-uniform and every token a tie.

Usage: engine_check.py TANDEM_GENERATE WORKDIR   (one verdict line per check;
exits non-zero on any failure). Writes WORKDIR/engine_check.json.
"""
import json
import os
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

NEW = 32
TIE = 2.0           # x transformers' bf16 logit error (tandem's and transformers' may each err that much)
RETURNED = 0.95     # of the pools' bytes, back to the device on release
failures = []
summary = {}


def check(name, ok, detail):
    print(f"[engine] {'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        failures.append(name)


def configs():
    common = dict(vocab_size=512, hidden_size=256, num_hidden_layers=3, num_attention_heads=8,
                  num_key_value_heads=4, head_dim=64, max_position_embeddings=4096, rms_norm_eps=1e-6,
                  rope_theta=1000000.0, attention_bias=False, attention_dropout=0.0, tie_word_embeddings=False)
    dense = Qwen3Config(intermediate_size=512, **common)
    moe = Qwen3MoeConfig(intermediate_size=512, moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2,
                         norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                         output_router_logits=False, **common)
    return {"dense": dense, "moe": moe}


def hf_greedy(model, prompts, device):
    outs = []
    for p in prompts:
        ids = torch.tensor([p], device=device)
        with torch.no_grad():
            g = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
                               do_sample=False, eos_token_id=None, pad_token_id=0)
        outs.append(g[0, len(p):].tolist())
    return outs


def run_tandem(tool, model_dir, prompts, work, name, device, handoff, extra=()):
    pfile = os.path.join(work, f"{name}_prompts.json")
    out = os.path.join(work, f"{name}_out.json")
    with open(pfile, "w") as f:
        json.dump({"prompts": prompts}, f)
    cmd = [tool, "--model", model_dir, "--prompts", pfile, "--out", out, "--device", device,
           "--max-new-tokens", str(NEW), "--kv-cache-mib", "512"] + (["--handoff"] if handoff else []) + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        check(f"{name} run", False, f"exit {r.returncode}: {r.stderr[-2000:]}")
        return None
    with open(out) as f:
        return json.load(f)


def max_gap(a, b, upto):
    """The largest |a - b| over each row's first upto[i] entries."""
    return max((abs(x - y) for ra, rb, n in zip(a, b, upto) for x, y in zip(ra[:n], rb[:n])), default=0.0)


def new_weights_check(tool, model_dir, cfg, prompts, work):
    """After release -> resume -> load_weights of another checkpoint, the
    replayed graphs give what graphs captured over those weights give (the
    same tokens and log-probs), and what eager decoding gives with them."""
    torch.manual_seed(98765)
    other = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        other.lm_head.weight.normal_(0.0, 0.5)
    other_dir = model_dir + "_b"
    other.save_pretrained(other_dir)
    lp = ["--logprobs"]
    moved = run_tandem(tool, model_dir, prompts, work, "dense_reload", "cuda", True, lp + ["--reload", other_dir])
    fresh = run_tandem(tool, other_dir, prompts, work, "dense_b_graphs", "cuda", False, lp)
    eager = run_tandem(tool, other_dir, prompts, work, "dense_b_eager", "cuda", False, lp + ["--cuda-graphs", "none"])
    if moved is None or fresh is None or eager is None:
        return {}
    h = moved["handoff"]
    replayed = h.get("decode_graph_steps_after", 0)
    check("dense cuda graphs replay after release, resume and new weights", replayed > 0 and h.get("reloaded") is True,
          f"{replayed} decode steps through the graphs after the handoff ({h.get('released_tags')} released)")
    same = sum(a == b for a, b in zip(h["outputs_after"], fresh["outputs"]))
    gap = max_gap(h["logprobs_after"], fresh["logprobs"], [NEW] * len(prompts)) if same == len(prompts) else None
    check("dense cuda new weights: replayed graphs = graphs captured over them", same == len(prompts) and gap <= 1e-3,
          f"{same}/{len(prompts)} prompts equal, max |log-prob diff| {gap}")
    upto = [NEW if k is None else k for k in (first_difference(a, b) for a, b in zip(h["outputs_after"], eager["outputs"]))]
    equal = sum(a == b for a, b in zip(h["outputs_after"], eager["outputs"]))
    egap = max_gap(h["logprobs_after"], eager["logprobs"], upto)
    check("dense cuda new weights: replayed graphs = eager decoding", equal >= len(prompts) * 3 // 4 and egap <= 0.25,
          f"{equal}/{len(prompts)} prompts equal eager decoding's tokens; over the tokens before any parting, "
          f"max |log-prob diff| {egap:.4f} (bf16; the graphs run padded batch shapes)")
    return {"graph_steps_after": replayed, "equal_fresh_graphs": same, "logprob_gap_fresh": gap,
            "equal_eager": equal, "logprob_gap_eager": egap}


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None


def main():
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    gen = torch.Generator().manual_seed(7)
    for kind, cfg in configs().items():
        torch.manual_seed(4321 + len(kind))
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
        with torch.no_grad():
            model.lm_head.weight.normal_(0.0, 0.5)
            for layer in model.model.layers:
                if hasattr(layer.mlp, "gate"):
                    layer.mlp.gate.weight.normal_(0.0, 0.5)
        model_dir = os.path.join(work, kind)
        model.save_pretrained(model_dir)
        lengths = [1 + int(torch.randint(0, 300, (1,), generator=gen)) for _ in range(64)]
        prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist() for n in lengths]

        # CPU fp32: exact.
        want = hf_greedy(model, prompts[:16], "cpu")
        t = run_tandem(tool, model_dir, prompts[:16], work, f"{kind}_cpu", "cpu", False)
        if t is not None:
            same = sum(a == b for a, b in zip(t["outputs"], want))
            check(f"{kind} cpu-fp32 greedy", same == 16, f"{same}/16 prompts equal transformers' tokens")

        # CUDA bf16: equal but for near ties.
        ref32 = model.to("cuda")
        bf16 = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to("cuda").eval()
        want = hf_greedy(bf16, prompts, "cuda")
        t = run_tandem(tool, model_dir, prompts, work, f"{kind}_cuda", "cuda", True)
        if t is None:
            continue
        exact, ties, bad = 0, 0, []
        for i, (got, ref) in enumerate(zip(t["outputs"], want)):
            k = first_difference(got, ref)
            if k is None and len(got) == len(ref) == NEW:
                exact += 1
                continue
            if k is None:
                bad.append(f"prompt {i}: {len(got)} tokens")
                continue
            ctx = torch.tensor([prompts[i] + ref[:k]], device="cuda")
            with torch.no_grad():
                logits = ref32(ctx).logits[0, -1].float()
                noise = (bf16(ctx).logits[0, -1].float() - logits).abs().max().item()
            gap = abs(logits[got[k]].item() - logits[ref[k]].item())
            if gap <= TIE * noise:
                ties += 1
            else:
                bad.append(f"prompt {i} token {k}: gap {gap:.3f}, bf16 noise {noise:.3f}")
        check(f"{kind} cuda-bf16 greedy", not bad,
              f"{exact}/64 equal, {ties} part at a near tie (fp32 gap <= {TIE} x transformers' own bf16 error "
              f"at that context), {len(bad)} otherwise {bad[:4]}")
        h = t.get("handoff", {})
        figures = {k: v for k, v in h.items() if not k.startswith(("outputs", "logprobs"))}
        check(f"{kind} cuda handoff same tokens", h.get("same_after_handoff") is True, json.dumps(figures))
        check(f"{kind} cuda release returns memory", h.get("returned_of_allocated", 0) >= RETURNED,
              f"{h.get('returned_of_allocated', 0):.3f} of what it allocated ({h.get('pool_bytes', 0)} pool bytes, "
              f"{h.get('allocator_bytes_before', 0)} in LibTorch's allocator, {h.get('allocator_bytes_in_tags', 0)} of them "
              f"the graphs' pool in the cuda_graph tag; {h.get('allocator_bytes_released', 0)} "
              f"left there, {h.get('allocator_live_bytes_released', 0)} of them live), {h.get('returned_of_worker', 0):.3f} of all it added to the device reading "
              f"(release {h.get('release_s', 0) * 1e3:.1f} ms, resume {h.get('resume_s', 0) * 1e3:.1f} ms)")
        summary[kind] = {"exact": exact, "ties": ties, "bad": len(bad), "handoff": h, "runs": t["runs"],
                         "graph_bytes": t.get("decode_graph_bytes", 0)}
        if kind == "dense":
            summary["dense_new_weights"] = new_weights_check(tool, model_dir, cfg, prompts, work)
        del ref32, bf16, model
        torch.cuda.empty_cache()
    with open(os.path.join(work, "engine_check.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"[engine] {len(failures)} failures", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
