#!/usr/bin/env python3
"""Chunked LM-head loss benchmark on the GPU machine (issue #4; docs/benchmarks.md).

N=16k rows, H=4096, V=152k, bf16; per row one label (plus a fork: some rows
carry two pairs), temperature 0.9, upstream grads for logprob and entropy.
Side by side in one run: eager PyTorch (linear, fp32 log_softmax, gather,
entropy; autograd) and ours (C ABI) at several chunk sizes. Time (CUDA events,
median) for forward and forward+backward, useful TFLOP/s (6 N H V over the
fwd+bwd time, the eager GEMM count), and extra peak memory over the inputs.
Usage: lm_head_loss_bench.py LIB.so [--n 16384 --h 4096 --v 152000] [--json OUT]
"""
import argparse, ctypes, json, time

import torch


def bench(fn, warmup=2, rep=7):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(rep):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def peak_extra(fn):
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn(); torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**30


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--h", type=int, default=4096)
    ap.add_argument("--v", type=int, default=152000)
    ap.add_argument("--chunks", type=int, nargs="*", default=[1024, 4096])
    ap.add_argument("--json")
    args = ap.parse_args()
    N, H, V, T = args.n, args.h, args.v, 0.9
    lib = ctypes.CDLL(args.lib)
    lib.tandem_kernels_last_error.restype = ctypes.c_char_p
    P, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float
    lib.tandem_lm_head_loss_workspace_bytes.argtypes = [i64, i32, i32, i64, i64, P]
    lib.tandem_lm_head_loss_fwd.argtypes = [i64, i32, i32, i64, f32, P, P, P, P, P, P, P, P, i64, i64, P]
    lib.tandem_lm_head_loss_bwd.argtypes = [i64, i32, i32, i64, f32] + [P] * 11 + [i64, i64, P]

    def ok(rc):
        if rc != 0:
            raise RuntimeError(lib.tandem_kernels_last_error().decode())

    torch.manual_seed(int(time.time()))
    dev = "cuda"
    hidden = (torch.randn(N, H, device=dev) * 0.5).to(torch.bfloat16)
    weight = (torch.randn(V, H, device=dev) * 0.02).to(torch.bfloat16)
    fork = N // 8
    rows = torch.cat([torch.arange(N), torch.arange(fork)]).to(dev, torch.int32)
    labels = torch.randint(0, V, (rows.numel(),), device=dev, dtype=torch.int32)
    M = rows.numel()
    g_lp = torch.randn(M, device=dev)
    g_ent = torch.randn(N, device=dev) * 0.1
    flops = 6.0 * N * H * V
    ptr = lambda t: t.data_ptr()

    # Eager PyTorch.
    def eager_fwd(h, w):
        logits = (h @ w.t()).float() / T
        logp = torch.log_softmax(logits, dim=-1)
        lp = logp[rows.long(), labels.long()]
        ent = -(logp.exp() * logp).sum(-1)
        return lp, ent

    def eager_fb():
        h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
        lp, ent = eager_fwd(h, w)
        ((lp * g_lp).sum() + (ent * g_ent).sum()).backward()
        return lp, ent, h.grad, w.grad

    with torch.no_grad():
        t_eager_f = bench(lambda: eager_fwd(hidden, weight))
    t_eager_fb = bench(eager_fb)
    mem_eager = peak_extra(eager_fb)
    lp_e, ent_e, gh_e, gw_e = eager_fb()
    row = dict(N=N, H=H, V=V, M=M, eager_fwd_ms=t_eager_f, eager_fwdbwd_ms=t_eager_fb, eager_extra_gib=mem_eager,
               eager_tflops=flops / t_eager_fb / 1e9)
    print(json.dumps(row), flush=True)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    row["gemm_tflops"] = 2 * 8192**3 / bench(lambda: a @ b, 3, 10) / 1e9
    del a, b

    results = []
    for chunk in args.chunks:
        nbytes = ctypes.c_int64()
        ok(lib.tandem_lm_head_loss_workspace_bytes(N, H, V, M, chunk, ctypes.byref(nbytes)))
        lp = torch.empty(M, device=dev); ent = torch.empty(N, device=dev); lse = torch.empty(N, device=dev)
        gh = torch.empty(N, H, device=dev); gw = torch.empty(V, H, device=dev)

        def run_fwd(ws):
            ok(lib.tandem_lm_head_loss_fwd(N, H, V, M, T, ptr(hidden), ptr(weight), ptr(rows), ptr(labels), ptr(lp),
                                           ptr(ent), ptr(lse), ptr(ws), nbytes.value, chunk, None))

        def run_fb():
            ws = torch.empty(nbytes.value, device=dev, dtype=torch.uint8)
            run_fwd(ws)
            ok(lib.tandem_lm_head_loss_bwd(N, H, V, M, T, ptr(hidden), ptr(weight), ptr(rows), ptr(labels), ptr(lse),
                                           ptr(ent), ptr(g_lp), ptr(g_ent), ptr(gh), ptr(gw), ptr(ws), nbytes.value,
                                           chunk, None))
        ws0 = torch.empty(nbytes.value, device=dev, dtype=torch.uint8)
        for t in (lp, ent, gh, gw):
            t.fill_(float("nan"))
        run_fb(); torch.cuda.synchronize()
        rel = lambda x, y: ((x.float() - y.float()).norm() / y.float().norm()).item()
        r = dict(chunk=chunk, workspace_gib=nbytes.value / 2**30,
                 err_logprob_max=(lp - lp_e).abs().max().item(), err_entropy_max=(ent - ent_e).abs().max().item(),
                 relerr_grad_hidden=rel(gh, gh_e), relerr_grad_weight=rel(gw, gw_e))
        r["fwd_ms"] = bench(lambda: run_fwd(ws0))
        r["fwdbwd_ms"] = bench(run_fb)
        # Extra memory over the inputs, outputs included (fp32 grads here, bf16 in eager).
        r["extra_gib"] = peak_extra(run_fb)
        r["tflops"] = flops / r["fwdbwd_ms"] / 1e9
        r["speedup_vs_eager"] = t_eager_fb / r["fwdbwd_ms"]
        results.append(r)
        print(json.dumps(r), flush=True)
        del ws0, gh, gw
        torch.cuda.empty_cache()
    row["ours"] = results
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=1)
    print(f"\nGEMM ceiling {row['gemm_tflops']:.0f} TFLOP/s; eager fwd {t_eager_f:.1f} ms, fwd+bwd {t_eager_fb:.1f} ms "
          f"({row['eager_tflops']:.0f} TFLOP/s), extra {mem_eager:.1f} GiB")
    print("| chunk | fwd ms | fwd+bwd ms | TFLOP/s (6NHV) | of GEMM | vs eager | extra GiB | max|dlogprob| | grad relerr |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['chunk']} | {r['fwd_ms']:.1f} | {r['fwdbwd_ms']:.1f} | {r['tflops']:.0f} | "
              f"{r['tflops'] / row['gemm_tflops']:.2f} | {r['speedup_vs_eager']:.2f} | {r['extra_gib']:.2f} | "
              f"{r['err_logprob_max']:.1e} | {max(r['relerr_grad_hidden'], r['relerr_grad_weight']):.1e} |")


if __name__ == "__main__":
    main()
