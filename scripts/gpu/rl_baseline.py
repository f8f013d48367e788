#!/usr/bin/env python3
"""The GRPO step as a plain PyTorch + transformers loop: the baseline of
issue #16's end-to-end RL benchmark (docs/benchmarks.md "RL step baseline").

What a user without an RL framework writes: one process, one GPU, the
policy in bf16, generate then train. Each step:

  1. ROLLOUT: `model.generate` (do_sample, temperature T, top_k 0, top_p 1:
     the full softmax(logits / T)), `num_return_sequences` = G, prompts
     left-padded, transformers' KV cache (`--cache dynamic`, its default
     DynamicCache, or `static`, StaticCache, with which transformers also
     compiles the decoding forward). `--ignore-eos`: EOS never ends a
     response (every response is --max-new-tokens long; for throughput
     with random weights). Otherwise a response ends at its first EOS
     (included), the rest is masked.
  2. REWARD: deterministic and synthetic: the fraction of even token ids in
     the response (non-zero advantages with random weights).
  3. LOGPROB: the old log-probs, one no-grad forward of the policy over
     prompt + response (verl/TRL with recomputed old log-probs), in
     micro-batches of --logprob-micro-batch sequences; with --kl-coef > 0
     also the frozen reference's (a copy of the starting model).
  4. advantages: GRPO per group, (r - mean) / (std + 1e-6), std unbiased.
  5. TRAIN: PPO clipped loss (eps 0.2 both sides, ratio exp(clamp(lp - old,
     -20, 20))), token-mean over all response tokens of the batch (each
     micro-batch divides by the batch's token count, so the micro-batch
     gradients add up to the batch's), optional k3 KL; gradient
     accumulation over micro-batches of --micro-batch sequences, grad-norm
     clip 1.0, one torch.optim.AdamW step (fused, betas 0.9/0.999, eps
     1e-8, weight decay 0). Parameters, gradients and AdamW moments in bf16
     (torch keeps optimizer state in the parameter's dtype); gradient
     checkpointing off. Log-probs and the loss in fp32 from the logits of
     the response positions only (`logits_to_keep`).
  6. SYNC: none (one process): 0 s.

Phases are timed between torch.cuda.synchronize() calls. Per step: seconds
per phase, generated tokens/s (response tokens / rollout s), trained
tokens/s (prompt + response tokens / train s), peak memory per phase
(torch.cuda.max_memory_allocated, reset at each phase). The mean is over
the steps after --warmup steps. The JSON (--out) is rewritten after each
step, so a run cut short keeps what it measured.

Prompts: --prompts FILE (a JSON list whose items are lists of token ids, or
{"prompt": [ids] | "text"}; or JSON lines of such objects; text needs the
model directory's tokenizer), else random token ids drawn uniformly from
[0, 151643) (no special tokens), --prompt-len each, seeded (--seed): a
throughput benchmark, not a learning one.

Usage: rl_baseline.py --model DIR [--prompts FILE] [--steps 5] [--warmup 1]
   [--prompts-per-step 32] [--group-size 8] [--prompt-len 256]
   [--max-new-tokens 1024] [--temperature 1.0] [--lr 1e-6]
   [--micro-batch 16] [--logprob-micro-batch 32] [--ignore-eos]
   [--cache dynamic|static] [--kl-coef 0] [--rollout-only]
   [--time-budget S] [--out FILE.json]
"""
import argparse
import copy
import json
import math
import os
import platform
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM

PAD_DEFAULT, EOS_DEFAULT = 151643, 151645
RANDOM_ID_LIMIT = 151643  # Qwen3's special tokens start here


def log(msg):
    print(f"[rl-baseline] {msg}", flush=True)


def sync():
    torch.cuda.synchronize()


class Phase:
    """Times one phase between device syncs and records its peak memory."""

    def __init__(self, rec, name):
        self.rec, self.name = rec, name

    def __enter__(self):
        sync()
        torch.cuda.reset_peak_memory_stats()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        sync()
        self.rec[f"{self.name}_s"] = time.perf_counter() - self.t0
        self.rec[f"{self.name}_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        return False


def load_prompts(a, model_dir):
    if not a.prompts:
        g = torch.Generator().manual_seed(a.seed)
        n = a.steps * a.prompts_per_step
        return torch.randint(0, RANDOM_ID_LIMIT, (n, a.prompt_len), generator=g).tolist(), \
            f"random token ids in [0, {RANDOM_ID_LIMIT}), {a.prompt_len} each, seed {a.seed}"
    with open(a.prompts) as f:
        text = f.read()
    try:
        rows = json.loads(text)
        if not isinstance(rows, list):
            rows = [rows]
    except json.JSONDecodeError:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    tok = None
    out = []
    for r in rows:
        p = r.get("prompt", r.get("question")) if isinstance(r, dict) else r
        if isinstance(p, str):
            if tok is None:
                from transformers import AutoTokenizer
                tok = AutoTokenizer.from_pretrained(model_dir)
            p = tok(p)["input_ids"]
        out.append([int(x) for x in p])
    return out, f"{a.prompts} ({len(out)} prompts)"


def left_pad(prompts, pad, device):
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), P), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, P - len(p):] = torch.tensor(p)
        mask[i, P - len(p):] = 1
    return ids.to(device), mask.to(device)


def token_logprobs(model, ids, attn, P, temperature):
    """Log-probs (fp32) of ids[:, P:] under softmax(logits / T): one forward
    over the whole sequence, logits only at the response's positions."""
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    n = ids.shape[1] - P
    out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False, logits_to_keep=n + 1)
    logits = out.logits[:, :-1].float()  # [b, n, V]: position t predicts token t+1
    if temperature != 1.0:
        logits.div_(temperature)
    tgt = ids[:, P:]
    return logits.gather(-1, tgt.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)


def synthetic_reward(resp, mask):
    even = ((resp % 2) == 0).float() * mask
    return even.sum(-1) / mask.sum(-1).clamp(min=1)


def grpo_advantages(rewards, G, eps=1e-6):
    r = rewards.view(-1, G).double()
    adv = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + eps)
    return adv.view(-1).float()


def param_counts(model):
    cfg = model.config
    total = sum(p.numel() for p in model.parameters())
    inactive = 0
    if getattr(cfg, "num_experts", None):
        inactive = cfg.num_hidden_layers * (cfg.num_experts - cfg.num_experts_per_tok) * 3 * cfg.hidden_size * \
            cfg.moe_intermediate_size
    embed = cfg.vocab_size * cfg.hidden_size
    return total, total - inactive - (0 if getattr(cfg, "tie_word_embeddings", False) else embed)


def mean_of(steps, keys):
    out = {}
    for k in keys:
        vals = [s[k] for s in steps if k in s and isinstance(s[k], (int, float))]
        if vals:
            out[k] = sum(vals) / len(vals)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", default="")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--prompts-per-step", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=1024)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--clip-eps", type=float, default=0.2)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--kl-coef", type=float, default=0.0)
    ap.add_argument("--micro-batch", type=int, default=16, help="sequences per forward+backward")
    ap.add_argument("--logprob-micro-batch", type=int, default=32, help="sequences per no-grad forward")
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--cache", choices=["dynamic", "static"], default="dynamic")
    ap.add_argument("--attn", default="sdpa", help="attn_implementation (sdpa: transformers' default)")
    ap.add_argument("--rollout-only", action="store_true", help="time the rollout alone (a cache comparison)")
    ap.add_argument("--time-budget", type=float, default=0, help="start no step that would end past S seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    a = ap.parse_args()

    t_start = time.perf_counter()
    dev = torch.device("cuda")
    torch.manual_seed(a.seed)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, attn_implementation=a.attn).to(dev)
    cfg = model.config
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else PAD_DEFAULT
    eos = cfg.eos_token_id if cfg.eos_token_id is not None else EOS_DEFAULT
    if isinstance(eos, (list, tuple)):
        eos = eos[0]
    total, active = param_counts(model)
    ref = None
    if a.kl_coef > 0:
        ref = copy.deepcopy(model).eval().requires_grad_(False)
    opt = None
    if not a.rollout_only:
        try:
            opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                                    fused=True)
            fused = True
        except (RuntimeError, TypeError):
            opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
            fused = False
    model.gradient_checkpointing_disable()

    prompts, prompt_source = load_prompts(a, a.model)
    G, N = a.group_size, a.max_new_tokens
    # Sampling from the full softmax(logits / T); EOS off with --ignore-eos
    # (the model's generation_config too: generate falls back to it).
    gen_kwargs = dict(do_sample=True, temperature=a.temperature, top_k=0, top_p=1.0, max_new_tokens=N,
                      num_return_sequences=G, pad_token_id=pad, return_dict_in_generate=False)
    if a.ignore_eos:
        model.generation_config.eos_token_id = None
        gen_kwargs["eos_token_id"] = None
    else:
        gen_kwargs["eos_token_id"] = eos
    if a.cache == "static":
        gen_kwargs["cache_implementation"] = "static"

    config = {
        "model_dir": a.model, "model_type": cfg.model_type, "total_params": total, "active_params": active,
        "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size, "vocab": cfg.vocab_size,
        "experts": getattr(cfg, "num_experts", None), "top_k": getattr(cfg, "num_experts_per_tok", None),
        "moe_intermediate": getattr(cfg, "moe_intermediate_size", None),
        "attn_implementation": getattr(cfg, "_attn_implementation", None),
        "experts_implementation": getattr(cfg, "_experts_implementation", None),
        "prompts_per_step": a.prompts_per_step, "group_size": G, "sequences_per_step": a.prompts_per_step * G,
        "prompt_len": a.prompt_len if not a.prompts else None, "max_new_tokens": N, "temperature": a.temperature,
        "sampling": "full softmax(logits/T): top_k 0, top_p 1", "ignore_eos": a.ignore_eos,
        "cache": a.cache, "prompts": prompt_source, "reward": "fraction of even token ids in the response",
        "advantages": "GRPO (r - mean) / (std_unbiased + 1e-6) per group",
        "loss": f"PPO clip eps {a.clip_eps}, token-mean over the batch's response tokens"
                + (f", k3 KL {a.kl_coef}" if a.kl_coef > 0 else ", no KL"),
        "old_logprobs": "recomputed: one no-grad forward of the policy", "micro_batch": a.micro_batch,
        "logprob_micro_batch": a.logprob_micro_batch, "lr": a.lr, "max_grad_norm": a.max_grad_norm,
        "optimizer": None if a.rollout_only else f"torch.optim.AdamW fused={fused}, betas 0.9/0.999, eps 1e-8, wd 0",
        "dtype": "bf16 params, grads and AdamW moments (state in the param dtype); fp32 log-probs and loss",
        "gradient_checkpointing": False, "rollout_only": a.rollout_only, "warmup_steps": a.warmup, "seed": a.seed,
    }
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name(0), "python": platform.python_version()}
    log(f"model {cfg.model_type}: total {total / 1e9:.3f}B params, active {active / 1e9:.3f}B; "
        f"attn {config['attn_implementation']}, experts {config['experts_implementation']}; cache {a.cache}; "
        f"load {time.perf_counter() - t_start:.1f} s")
    log(f"{a.prompts_per_step} prompts x G={G}, max_new_tokens {N}, micro-batch {a.micro_batch}, "
        f"prompts: {prompt_source}")
    result = {"config": config, "env": env, "steps": [], "mean": {}}

    def write():
        if a.out:
            with open(a.out, "w") as f:
                json.dump(result, f, indent=1)

    run_t0 = time.perf_counter()
    n_prompts = len(prompts)
    for step in range(a.steps):
        if a.time_budget and result["steps"]:
            last = result["steps"][-1]["step_s"]
            if time.perf_counter() - t_start + last > a.time_budget:
                log(f"stopping before step {step}: time budget {a.time_budget:.0f} s")
                break
        rec = {"step": step, "sync_s": 0.0}
        batch = [prompts[(step * a.prompts_per_step + i) % n_prompts] for i in range(a.prompts_per_step)]
        p_ids, p_mask = left_pad(batch, pad, dev)
        P = p_ids.shape[1]
        sync()
        t_step = time.perf_counter()

        # 1. ROLLOUT
        torch.manual_seed(a.seed * 1000003 + step)
        model.eval()
        with Phase(rec, "rollout"):
            seqs = model.generate(input_ids=p_ids, attention_mask=p_mask, **gen_kwargs)
            if not torch.is_tensor(seqs):
                seqs = seqs.sequences
            seqs = seqs.clone()  # an ordinary tensor (generate may run under inference mode)
        B = seqs.shape[0]
        resp = seqs[:, P:]
        n = resp.shape[1]
        prompt_mask = p_mask.repeat_interleave(G, dim=0)
        if a.ignore_eos:
            resp_mask = torch.ones_like(resp, dtype=torch.float)
        else:
            is_eos = (resp == eos).long()
            resp_mask = ((is_eos.cumsum(-1) - is_eos) == 0).float()  # up to and including the first EOS
        attn = torch.cat([prompt_mask, resp_mask.long()], dim=1)
        gen_tokens = int(resp_mask.sum().item())
        rec.update(sequences=B, response_cols=n, generated_tokens=gen_tokens,
                   responses_with_eos=int((resp == eos).any(-1).sum().item()),
                   generated_tok_per_s=gen_tokens / rec["rollout_s"])

        if not a.rollout_only:
            # 2. REWARD + 4. advantages (tiny; timed together)
            with Phase(rec, "reward"):
                rewards = synthetic_reward(resp, resp_mask)
                adv = grpo_advantages(rewards, G)
            # 3. LOGPROB: old (and reference) log-probs, no grad
            with Phase(rec, "logprob"):
                old_lp = torch.empty((B, n), dtype=torch.float, device=dev)
                ref_lp = torch.empty((B, n), dtype=torch.float, device=dev) if ref is not None else None
                with torch.no_grad():
                    for s in range(0, B, a.logprob_micro_batch):
                        e = min(B, s + a.logprob_micro_batch)
                        old_lp[s:e] = token_logprobs(model, seqs[s:e], attn[s:e], P, a.temperature)
                        if ref is not None:
                            ref_lp[s:e] = token_logprobs(ref, seqs[s:e], attn[s:e], P, a.temperature)
            # 5. TRAIN
            model.train()
            n_tok = resp_mask.sum()
            with Phase(rec, "train"):
                loss_sum = torch.zeros((), device=dev)
                clip_sum = torch.zeros((), device=dev)
                for s in range(0, B, a.micro_batch):
                    e = min(B, s + a.micro_batch)
                    m = resp_mask[s:e]
                    lp = token_logprobs(model, seqs[s:e], attn[s:e], P, a.temperature)
                    ratio = torch.exp((lp - old_lp[s:e]).clamp(-20, 20))
                    A = adv[s:e].unsqueeze(-1)
                    l1 = -A * ratio
                    l2 = -A * ratio.clamp(1 - a.clip_eps, 1 + a.clip_eps)
                    tok_loss = torch.maximum(l1, l2)
                    if ref is not None:
                        d = (ref_lp[s:e] - lp).clamp(-20, 20)
                        tok_loss = tok_loss + a.kl_coef * (torch.exp(d) - d - 1)
                    loss = (tok_loss * m).sum() / n_tok
                    loss.backward()
                    loss_sum += loss.detach()
                    clip_sum += ((l2 > l1).float() * m).sum().detach()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_grad_norm)
                opt.step()
                opt.zero_grad(set_to_none=True)
            trained = int(attn.sum().item())
            rec.update(reward_mean=rewards.mean().item(), reward_std=rewards.std().item(),
                       adv_abs_mean=adv.abs().mean().item(), loss=loss_sum.item(), grad_norm=float(grad_norm),
                       clip_frac=(clip_sum / n_tok).item(), trained_tokens=trained,
                       trained_tok_per_s=trained / rec["train_s"])
            del old_lp, ref_lp
        sync()
        rec["step_s"] = time.perf_counter() - t_step
        rec["response_tok_per_step_s"] = gen_tokens / rec["step_s"]
        rec["samples_per_s"] = B / rec["step_s"]
        rec["peak_gib"] = max(v for k, v in rec.items() if k.endswith("_peak_gib"))
        result["steps"].append(rec)
        log(f"step {step}{' (warm-up)' if step < a.warmup else ''}: "
            f"rollout {rec['rollout_s']:.2f} s ({rec['generated_tok_per_s']:.0f} tok/s)"
            + ("" if a.rollout_only else
               f", reward {rec['reward_s'] * 1e3:.1f} ms, logprob {rec['logprob_s']:.2f} s, "
               f"train {rec['train_s']:.2f} s ({rec['trained_tok_per_s']:.0f} tok/s), sync 0")
            + f"; step {rec['step_s']:.2f} s, peak {rec['peak_gib']:.1f} GiB"
            + ("" if a.rollout_only else
               f"; reward {rec['reward_mean']:.4f}, loss {rec['loss']:+.3e}, grad norm {rec['grad_norm']:.3f}"))
        measured = result["steps"][a.warmup:]
        result["mean"] = mean_of(measured, ["rollout_s", "reward_s", "logprob_s", "train_s", "sync_s", "step_s",
                                            "generated_tok_per_s", "trained_tok_per_s", "response_tok_per_step_s",
                                            "samples_per_s", "peak_gib", "rollout_peak_gib", "logprob_peak_gib",
                                            "train_peak_gib"])
        result["mean"]["steps_measured"] = len(measured)
        result["peak_gib_all_steps"] = max(s["peak_gib"] for s in result["steps"])
        write()

    m = result["mean"]
    if m.get("steps_measured"):
        parts = [f"rollout {m['rollout_s']:.2f} s"]
        if not a.rollout_only:
            parts += [f"reward {m['reward_s'] * 1e3:.1f} ms", f"logprob {m['logprob_s']:.2f} s",
                      f"train {m['train_s']:.2f} s", "sync 0"]
        log(f"mean of {m['steps_measured']} steps after {a.warmup} warm-up: " + ", ".join(parts)
            + f"; step {m['step_s']:.2f} s; generated {m['generated_tok_per_s']:.0f} tok/s"
            + ("" if a.rollout_only else f", trained {m['trained_tok_per_s']:.0f} tok/s")
            + f"; {m['response_tok_per_step_s']:.0f} response tokens per step-second; peak {m['peak_gib']:.1f} GiB")
    else:
        log("no step measured after the warm-up")
    log(f"total {time.perf_counter() - run_t0:.1f} s of steps")
    write()
    return 0 if result["steps"] else 1


if __name__ == "__main__":
    sys.exit(main())
