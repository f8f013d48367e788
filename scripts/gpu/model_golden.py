#!/usr/bin/env python3
"""The model's golden test against transformers (issue #13, "Correctness").

For a small random Qwen3 (dense) and Qwen3-MoE built in transformers and
saved with save_pretrained, runs tandem-model-eval on the same directory and
the same token sequences and requires, per sequence, the per-token
log-probs, the entropy, the loss and every parameter's gradient to agree:

  * tandem CPU fp32 vs transformers fp32:  |t - ref| <= atol + rtol*|ref|
    elementwise (FP32_TOL), for flat sequences and for the packed forest
    (tries of shared prompts), whose numbers must equal the flat ones;
  * tandem CUDA bf16 vs transformers fp32: no worse than transformers'
    own bf16 run (same weights) against that fp32 reference, up to a
    factor BF16_SLACK, measured as relative L2 error per tensor;
  * incremental decoding: tandem's last-position logits after decoding
    each sequence token by token equal transformers' (same tolerances);
  * tandem's SavePretrained output reloads in transformers and gives the
    same log-probs.

Usage: model_golden.py TANDEM_MODEL_EVAL WORKDIR  (prints one verdict line
per check and exits non-zero on any failure).
"""
import json
import math
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

FP32_TOL = dict(atol=2e-4, rtol=2e-3)     # fp32 kernels, different reduction orders
FP32_GRAD_TOL = dict(atol_of_max=1e-4, rtol=2e-3)  # atol = 1e-4 * max|ref| of the tensor
BF16_SLACK = 1.5                          # tandem bf16 error <= 1.5x transformers' bf16 error (+ floor)
BF16_FLOOR = 2e-3

failures = []
MODEL_DIR = [""]  # the model directory in use (checkpoint names of fused tensors)


def check(name, ok, detail):
    print(f"[golden] {'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        failures.append(name)


def allclose_report(name, got, ref, atol, rtol):
    got = got.double().cpu()
    ref = ref.double().cpu()
    if got.shape != ref.shape:
        check(name, False, f"shape {tuple(got.shape)} != {tuple(ref.shape)}")
        return
    err = (got - ref).abs()
    bound = atol + rtol * ref.abs()
    worst = (err / bound).max().item() if err.numel() else 0.0
    check(name, worst <= 1.0, f"max err/bound {worst:.3f} (max abs err {err.max().item() if err.numel() else 0:.2e})")


def rel_l2(a, b):
    a = a.double().cpu()
    b = b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def configs():
    common = dict(vocab_size=512, hidden_size=256, num_hidden_layers=3, num_attention_heads=8,
                  num_key_value_heads=4, head_dim=64, max_position_embeddings=4096, rms_norm_eps=1e-6,
                  rope_theta=1000000.0, attention_bias=False, attention_dropout=0.0)
    dense = Qwen3Config(intermediate_size=512, tie_word_embeddings=True, **common)
    moe = Qwen3MoeConfig(intermediate_size=512, moe_intermediate_size=128, num_experts=8,
                         num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                         mlp_only_layers=[1], tie_word_embeddings=False, output_router_logits=False,
                         **common)
    return {"dense": dense, "moe": moe}


def make_sequences(gen, vocab):
    """Two prompts, each with G responses: tries of shared prefixes."""
    seqs = []
    for plen, g, rlen in ((24, 4, 12), (9, 3, 20)):
        prompt = torch.randint(1, vocab, (plen,), generator=gen).tolist()
        for j in range(g):
            resp = torch.randint(1, vocab, (rlen + j,), generator=gen).tolist()
            seqs.append(prompt + resp)
    return seqs


def checkpoint_view(model_dir, tensors):
    """Maps transformers' in-memory parameters (or their gradients) to the
    checkpoint's names: transformers 5.x keeps a MoE layer's experts fused
    (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]) but saves
    them per expert; the layout is taken from the saved weights, exactly."""
    saved = load_file(os.path.join(model_dir, "model.safetensors"))
    out = {}
    for name, t in tensors.items():
        if name in saved:
            out[name] = t
            continue
        prefix, leaf = name.rsplit(".", 1)
        E = t.shape[0]
        for e in range(E):
            if leaf == "gate_up_proj":
                g, u = f"{prefix}.{e}.gate_proj.weight", f"{prefix}.{e}.up_proj.weight"
                I = saved[g].shape[0]
                out[g], out[u] = t[e, :I], t[e, I:]
            elif leaf == "down_proj":
                out[f"{prefix}.{e}.down_proj.weight"] = t[e]
            else:
                raise KeyError(f"{name}: not in the checkpoint and not a fused expert tensor")
    return out


def check_fused_layout(model, model_dir):
    """The split in checkpoint_view reproduces the saved per-expert weights."""
    mine = checkpoint_view(model_dir, {n: p.detach().float().cpu() for n, p in model.named_parameters()})
    saved = load_file(os.path.join(model_dir, "model.safetensors"))
    bad = [n for n in saved if n in mine and not torch.equal(mine[n], saved[n].float())]
    missing = [n for n in saved if n not in mine and not n.startswith("lm_head")]
    check("fused-expert layout of transformers", not bad and not missing, f"{len(bad)} mismatched, {len(missing)} missing")


def hf_reference(model, seqs, device, dtype, grads):
    """Per sequence (batch 1, no padding): log-probs of tokens 1.., entropy,
    loss = mean over all predicted tokens of all sequences, gradients."""
    model = model.to(device=device, dtype=dtype)
    model.zero_grad(set_to_none=True)
    logps, ents, nll_sum, count = [], [], 0.0, 0
    total = sum(len(s) - 1 for s in seqs)
    for s in seqs:
        ids = torch.tensor([s], device=device)
        logits = model(input_ids=ids).logits[0, :-1].float()
        lp = torch.log_softmax(logits, -1)
        tok_lp = lp.gather(1, ids[0, 1:, None])[:, 0]
        ent = -(lp.exp() * lp).sum(-1)
        loss_part = -tok_lp.sum() / total
        if grads:
            loss_part.backward()
        nll_sum += loss_part.item()
        logps.append(tok_lp.detach().cpu())
        ents.append(ent.detach().cpu())
        count += len(s) - 1
    out = {"logps": logps, "ents": ents, "loss": torch.tensor(nll_sum)}
    if grads:
        out["grads"] = checkpoint_view(MODEL_DIR[0],
                                       {n: p.grad.detach().float().cpu() for n, p in model.named_parameters()
                                        if p.grad is not None})
    # Last-position logits of every sequence (what incremental decoding returns).
    with torch.no_grad():
        out["last_logits"] = torch.stack([model(input_ids=torch.tensor([s], device=device)).logits[0, -1].float().cpu()
                                          for s in seqs])
    return out


def run_tandem(tool, model_dir, seqs, work, tag, device, dtype, mode, extra=()):
    batch = os.path.join(work, f"batch_{tag}.json")
    with open(batch, "w") as f:
        json.dump({"sequences": seqs}, f)
    out = os.path.join(work, f"out_{tag}.safetensors")
    cmd = [tool, "--model", model_dir, "--batch", batch, "--out", out, "--device", device, "--dtype", dtype,
           "--mode", mode, "--grads", "--decode", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        check(f"{tag} run", False, f"rc={r.returncode} {r.stderr[-2000:]}")
        return None
    return load_file(out)


def compare_fp32(tag, t, ref, seqs, names):
    for i in range(len(seqs)):
        allclose_report(f"{tag} logprobs[{i}]", t[f"logprobs.{i}"], ref["logps"][i], **FP32_TOL)
        allclose_report(f"{tag} entropy[{i}]", t[f"entropy.{i}"], ref["ents"][i], **FP32_TOL)
    allclose_report(f"{tag} loss", t["loss"].reshape(()), ref["loss"], **FP32_TOL)
    worst = 0.0
    missing = [n for n in names if f"grad.{n}" not in t]
    check(f"{tag} grads present", not missing, f"{len(names) - len(missing)}/{len(names)} parameters")
    for n in names:
        if f"grad.{n}" in t:
            g, r = t[f"grad.{n}"].double(), ref["grads"][n].double()
            atol = FP32_GRAD_TOL["atol_of_max"] * r.abs().max().clamp_min(1e-30)
            worst = max(worst, ((g - r).abs() / (atol + FP32_GRAD_TOL["rtol"] * r.abs())).max().item())
    check(f"{tag} grads (every parameter)", worst <= 1.0, f"max err/bound {worst:.3f}")
    allclose_report(f"{tag} decode last logits", t["decode_logits"], ref["last_logits"], **FP32_TOL)


def compare_bf16(tag, t, ref32, ref16, seqs, names):
    def rel(name, got, r32, r16):
        e_t, e_h = rel_l2(got, r32), rel_l2(r16, r32)
        check(f"{tag} {name}", e_t <= BF16_SLACK * e_h + BF16_FLOOR,
              f"rel L2 err tandem {e_t:.2e} vs transformers-bf16 {e_h:.2e}")
    rel("logprobs", torch.cat([t[f"logprobs.{i}"] for i in range(len(seqs))]),
        torch.cat(ref32["logps"]), torch.cat(ref16["logps"]))
    rel("entropy", torch.cat([t[f"entropy.{i}"] for i in range(len(seqs))]),
        torch.cat(ref32["ents"]), torch.cat(ref16["ents"]))
    rel("decode last logits", t["decode_logits"], ref32["last_logits"], ref16["last_logits"])
    # Expert weights are compared per layer, all experts concatenated: one
    # expert's gradient, from few tokens and small, is dominated by bf16
    # rounding noise in both implementations (measured: on layer 0,
    # transformers' bf16 error was 0.227 on expert 6 where tandem's was
    # 0.025, and tandem's 0.129 on expert 3 where transformers' was 0.036).
    groups = {}
    for n in names:
        key = n.split(".experts.")[0] + ".experts" if ".experts." in n else n
        groups.setdefault(key, []).append(n)
    def cat(src, ns):
        return torch.cat([src[n].reshape(-1) for n in ns])
    ratios = sorted(((rel_l2(cat({n: t[f"grad.{n}"] for n in ns}, ns), cat(ref32["grads"], ns)),
                      BF16_SLACK * rel_l2(cat(ref16["grads"], ns), cat(ref32["grads"], ns)) + 5 * BF16_FLOOR, key)
                     for key, ns in groups.items()),
                    key=lambda r: -r[0] / r[1])
    detail = ", ".join(f"{n} {e:.2e}/{b:.2e}" for e, b, n in ratios[:3])
    check(f"{tag} grads (every parameter; experts per layer)", ratios[0][0] <= ratios[0][1],
          f"max (tandem err)/(bound) {ratios[0][0] / ratios[0][1]:.3f}; worst: {detail}")


def main():
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    has_cuda = torch.cuda.is_available()
    for kind, cfg in configs().items():
        torch.manual_seed(1234 + len(kind))
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        model.eval()
        # A freshly initialised router (std 0.02) gives near-equal expert
        # probabilities: on this model 36 of 240 tokens of a layer had their
        # 2nd and 3rd experts within 2e-3, below bf16's resolution, so bf16
        # runs (transformers' own included) route them by rounding noise. A
        # trained router is decisive; give this one weights that are.
        with torch.no_grad():
            for layer in model.model.layers:
                if hasattr(layer.mlp, "gate"):
                    layer.mlp.gate.weight.normal_(0.0, 0.5)
        model_dir = os.path.join(work, kind)
        model.save_pretrained(model_dir)
        gen = torch.Generator().manual_seed(99)
        seqs = make_sequences(gen, cfg.vocab_size)
        MODEL_DIR[:] = [model_dir]
        check_fused_layout(model, model_dir)
        names = list(load_file(os.path.join(model_dir, "model.safetensors")).keys())
        ref32 = hf_reference(model, seqs, "cuda" if has_cuda else "cpu", torch.float32, grads=True)
        for mode in ("flat", "packed"):
            t = run_tandem(tool, model_dir, seqs, work, f"{kind}_cpu_{mode}", "cpu", "fp32", mode)
            if t is not None:
                compare_fp32(f"{kind} cpu-fp32 {mode}", t, ref32, seqs, names)
        if has_cuda:
            ref16 = hf_reference(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                                 seqs, "cuda", torch.bfloat16, grads=True)
            for mode in ("flat", "packed"):
                t = run_tandem(tool, model_dir, seqs, work, f"{kind}_cuda_{mode}", "cuda", "bf16", mode)
                if t is not None:
                    compare_bf16(f"{kind} cuda-bf16 {mode}", t, ref32, ref16, seqs, names)
        # Saved by tandem, reloaded by transformers.
        saved = os.path.join(work, f"{kind}_saved")
        t = run_tandem(tool, model_dir, seqs, work, f"{kind}_save", "cpu", "fp32", "packed", ("--save", saved))
        if t is not None:
            again = AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32)
            re = hf_reference(again, seqs, "cuda" if has_cuda else "cpu", torch.float32, grads=False)
            for i in range(len(seqs)):
                allclose_report(f"{kind} saved-by-tandem reload logprobs[{i}]", re["logps"][i], ref32["logps"][i],
                                atol=1e-5, rtol=1e-5)
    print(f"[golden] {'PASS' if not failures else 'FAIL'}: {len(failures)} failed checks", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
