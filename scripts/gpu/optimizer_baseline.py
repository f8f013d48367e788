"""PyTorch's AdamW on the shapes train_optimizer_bench uses (issue #17
"Performance"; scripts/gpu/run_optimizers.sh): fused on the GPU, and
foreach on the CPU, one step each after a warm-up, fp32, random gradients.

usage: optimizer_baseline.py --params 1e9 [--cpu] [--steps 3]
Prints one JSON object: fused_gpu_s, fused_gpu_peak_bytes (the allocator's
peak during the step beyond what was allocated before), and with --cpu
foreach_cpu_s.
"""
import argparse
import json
import time

import torch


def shapes(target):
    h = 4096 if target >= 4e9 else 2048
    inter = h * 43 // 16
    per_layer = 4 * h * h + 3 * h * inter
    layers = max(1, round((target - 2 * 32000 * h) / per_layer))
    out = [(32000, h), (32000, h), (h,)]
    for _ in range(layers):
        out += [(h, h)] * 4 + [(inter, h), (inter, h), (h, inter), (h,), (h,), (128,), (128,)]
    return out


def timed(opt, device, steps):
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
    s = (time.perf_counter() - t0) / steps
    peak = torch.cuda.max_memory_allocated() - base if device == "cuda" else 0
    return s, peak


def run(target, device, steps, **kw):
    params = []
    for shape in shapes(target):
        p = torch.empty(shape, device=device).normal_(0, 0.02).requires_grad_()
        p.grad = torch.empty_like(p).normal_(0, 1e-3)
        params.append(p)
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, **kw)
    s, peak = timed(opt, device, steps)
    n = sum(p.numel() for p in params)
    del opt, params
    if device == "cuda":
        torch.cuda.empty_cache()
    return s, peak, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=float, default=1e9)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args()
    out = {}
    s, peak, n = run(a.params, "cuda", a.steps, fused=True)
    out.update(params=n, fused_gpu_s=s, fused_gpu_peak_bytes=peak)
    if a.cpu:
        s, _, _ = run(a.params, "cpu", 1, foreach=True)
        out["foreach_cpu_s"] = s
        out["cpu_threads"] = torch.get_num_threads()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
