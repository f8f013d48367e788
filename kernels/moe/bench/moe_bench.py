#!/usr/bin/env python3
"""MoE benchmark on the GPU machine (issue #4; docs/benchmarks.md).

E=128 experts, top-8, T=4096 tokens (32768 routed rows), H=2048 I=768 and
H=7168 I=2048, bf16, routing from our router on random logits. Side by side
in one run (CUDA events, median):
  - expert FFN (gate/up GEMM, SwiGLU, down GEMM) forward and backward:
    ours grouped (cuBLAS grouped-batched), ours per-expert loop (baseline),
    torch._grouped_mm (+ autograd), a torch per-expert loop, and dense cuBLAS
    with the same total rows (one expert's weights for all rows);
  - permute (row gather) and unpermute (weighted sum over k) against a
    device-to-device copy of the same bytes and torch index_select.
Usage: moe_bench.py LIB.so [--tokens 4096] [--json OUT]
"""
import argparse, ctypes, json, time

import torch
import torch.nn.functional as F


def bench(fn, warmup=3, rep=15):
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--json")
    args = ap.parse_args()
    lib = ctypes.CDLL(args.lib)
    lib.tandem_kernels_last_error.restype = ctypes.c_char_p
    P, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    lib.tandem_moe_router.argtypes = [i64, i32, i32, ctypes.c_int, ctypes.c_int] + [P] * 6 + [P]
    lib.tandem_moe_permute_ws_bytes.argtypes = [i64, i32, i32, P]
    lib.tandem_moe_permute_plan.argtypes = [i64, i32, i32, P, P, P, P, P, i64, P]
    lib.tandem_moe_gather.argtypes = [i64, i32, i32, P, P, P, P]
    lib.tandem_moe_unpermute.argtypes = [i64, i32, i32, P, P, P, P, P]
    lib.tandem_moe_experts_fwd.argtypes = [i64, i32, i32, i32, i32] + [P] * 8 + [ctypes.c_int]
    lib.tandem_moe_experts_bwd.argtypes = [i64, i32, i32, i32, i32] + [P] * 13 + [ctypes.c_int]

    def ok(rc):
        if rc != 0:
            raise RuntimeError(lib.tandem_kernels_last_error().decode())

    torch.manual_seed(int(time.time()))
    dev = "cuda"
    T, E, K = args.tokens, 128, 8
    M = T * K
    ptr = lambda t: t.data_ptr()
    x_copy = torch.randn(1 << 28, device=dev, dtype=torch.bfloat16); y_copy = torch.empty_like(x_copy)
    copy_tbs = 2 * x_copy.numel() * 2 / bench(lambda: y_copy.copy_(x_copy)) / 1e9
    del x_copy, y_copy
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16); b = torch.randn_like(a)
    gemm_tf = 2 * 8192**3 / bench(lambda: a @ b) / 1e9
    del a, b
    print(f"ceilings: D2D copy {copy_tbs:.2f} TB/s, bf16 GEMM {gemm_tf:.0f} TFLOP/s", flush=True)

    # Routing (ours), then the permutation plan.
    logits = torch.randn(T, E, device=dev)
    scores = torch.empty(T, E, device=dev); topk = torch.empty(T, K, device=dev, dtype=torch.int32)
    tw = torch.empty(T, K, device=dev); counts = torch.empty(E, device=dev, dtype=torch.int32)
    ssum = torch.empty(E, device=dev)
    ok(lib.tandem_moe_router(T, E, K, 1, 1, ptr(logits), ptr(scores), ptr(topk), ptr(tw), ptr(counts), ptr(ssum), None))
    ref_idx = torch.topk(torch.softmax(logits, -1), K, dim=-1).indices
    agree = (torch.sort(ref_idx, -1).values == torch.sort(topk.long(), -1).values).all(-1).float().mean().item()
    nbytes = ctypes.c_int64(); ok(lib.tandem_moe_permute_ws_bytes(T, E, K, ctypes.byref(nbytes)))
    ws = torch.empty(nbytes.value, device=dev, dtype=torch.uint8)
    offsets = torch.empty(E + 1, device=dev, dtype=torch.int32)
    pos = torch.empty(M, device=dev, dtype=torch.int32); src = torch.empty(M, device=dev, dtype=torch.int32)
    ok(lib.tandem_moe_permute_plan(T, E, K, ptr(topk), ptr(offsets), ptr(pos), ptr(src), ptr(ws), nbytes.value, None))
    host_off = offsets.cpu()
    counts_h = (host_off[1:] - host_off[:-1])
    print(f"router: top-k agrees with torch.topk on {agree:.4f} of tokens; rows per expert min {int(counts_h.min())} "
          f"max {int(counts_h.max())}", flush=True)
    results = dict(copy_tbs=copy_tbs, gemm_tflops=gemm_tf, topk_agreement=agree, shapes=[])

    for H, I in ((2048, 768), (7168, 2048)):
        r = dict(H=H, I=I, E=E, K=K, T=T, rows=M)
        x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
        wgu = (torch.randn(E, H, 2 * I, device=dev) * H**-0.5).to(torch.bfloat16)
        wd = (torch.randn(E, I, H, device=dev) * I**-0.5).to(torch.bfloat16)
        xp = torch.empty(M, H, device=dev, dtype=torch.bfloat16)
        gu = torch.empty(M, 2 * I, device=dev, dtype=torch.bfloat16); act = torch.empty(M, I, device=dev, dtype=torch.bfloat16)
        yp = torch.empty(M, H, device=dev, dtype=torch.bfloat16); out = torch.empty(T, H, device=dev, dtype=torch.bfloat16)
        hp = host_off.data_ptr()
        # Permute / unpermute.
        gather = lambda: ok(lib.tandem_moe_gather(T, H, K, ptr(x), ptr(src), ptr(xp), None))
        gather()
        src_tok = (src.long() // K)
        assert torch.equal(xp, x[src_tok]), "gather mismatch"
        r["permute_ms"] = bench(gather)
        r["permute_tbs"] = 2 * M * H * 2 / r["permute_ms"] / 1e9
        flat = torch.empty(M, H, device=dev, dtype=torch.bfloat16)
        r["copy_same_bytes_ms"] = bench(lambda: flat.copy_(xp))
        r["index_select_ms"] = bench(lambda: torch.index_select(x, 0, src_tok))
        ypr = torch.randn(M, H, device=dev, dtype=torch.bfloat16)
        unperm = lambda: ok(lib.tandem_moe_unpermute(T, H, K, ptr(ypr), ptr(tw), ptr(pos), ptr(out), None))
        unperm()
        ref_out = (ypr[pos.long()].view(T, K, H).float() * tw[..., None]).sum(1)
        r["unpermute_relerr"] = ((out.float() - ref_out).norm() / ref_out.norm()).item()
        r["unpermute_ms"] = bench(unperm)
        r["unpermute_tbs"] = (M * H * 2 + T * H * 2) / r["unpermute_ms"] / 1e9
        r["torch_unpermute_ms"] = bench(lambda: (ypr[pos.long()].view(T, K, H) * tw[..., None].to(torch.bfloat16)).sum(1))

        # Expert FFN forward: ours grouped / loop.
        def ours_fwd(mode):
            return lambda: ok(lib.tandem_moe_experts_fwd(T, H, I, E, K, hp, ptr(xp), ptr(wgu), ptr(wd), ptr(gu), ptr(act),
                                                         ptr(yp), None, mode))
        flops_f = 6.0 * M * H * I
        ends = offsets[1:].contiguous()
        def torch_grouped_fwd(xx, w1, w2):
            h1 = torch._grouped_mm(xx, w1, offs=ends)
            a1 = F.silu(h1[:, :I]) * h1[:, I:]
            return torch._grouped_mm(a1, w2, offs=ends)
        ours_fwd(1)()
        wgu_t, wd_t = wgu, wd
        try:
            try:
                ref_y = torch_grouped_fwd(xp, wgu, wd)
            except Exception:  # some builds want mat_b column-major per group
                wgu_t = wgu.transpose(-2, -1).contiguous().transpose(-2, -1)
                wd_t = wd.transpose(-2, -1).contiguous().transpose(-2, -1)
                ref_y = torch_grouped_fwd(xp, wgu_t, wd_t)
                r["grouped_mm_colmajor_b"] = True
            r["relerr_vs_grouped_mm"] = ((yp.float() - ref_y.float()).norm() / ref_y.float().norm()).item()
            r["torch_grouped_fwd_ms"] = bench(lambda: torch_grouped_fwd(xp, wgu_t, wd_t))
        except Exception as e:
            r["torch_grouped_error"] = repr(e)[:300]
        r["ours_grouped_fwd_ms"] = bench(ours_fwd(1))
        r["ours_loop_fwd_ms"] = bench(ours_fwd(0))
        r["ours_auto_fwd_ms"] = bench(ours_fwd(2))
        cnt = counts_h.tolist()
        def torch_loop_fwd():
            o = 0
            for e in range(E):
                n = cnt[e]
                if n:
                    h1 = xp[o:o + n] @ wgu[e]
                    yp[o:o + n] = (F.silu(h1[:, :I]) * h1[:, I:]) @ wd[e]
                o += n
        r["torch_loop_fwd_ms"] = bench(torch_loop_fwd)
        r["dense_fwd_ms"] = bench(lambda: (lambda h1: (F.silu(h1[:, :I]) * h1[:, I:]) @ wd[0])(xp @ wgu[0]))
        for k in ("ours_grouped_fwd_ms", "ours_loop_fwd_ms", "ours_auto_fwd_ms", "torch_grouped_fwd_ms", "torch_loop_fwd_ms", "dense_fwd_ms"):
            if k in r:
                r[k.replace("_ms", "_tflops")] = flops_f / r[k] / 1e9

        # Backward: ours vs torch autograd through _grouped_mm.
        dyp = torch.randn(M, H, device=dev, dtype=torch.bfloat16)
        dxp = torch.empty_like(xp); dgu = torch.empty_like(gu); dact = torch.empty_like(act)
        dwgu = torch.empty(E, H, 2 * I, device=dev); dwd = torch.empty(E, I, H, device=dev)
        def ours_bwd(mode):
            return lambda: ok(lib.tandem_moe_experts_bwd(T, H, I, E, K, hp, ptr(xp), ptr(wgu), ptr(wd), ptr(gu), ptr(act),
                                                         ptr(dyp), ptr(dxp), ptr(dwgu), ptr(dwd), ptr(dgu), ptr(dact),
                                                         None, mode))
        ours_fwd(1)(); ours_bwd(1)()
        r["ours_grouped_bwd_ms"] = bench(ours_bwd(1))
        r["ours_loop_bwd_ms"] = bench(ours_bwd(0))
        r["ours_auto_bwd_ms"] = bench(ours_bwd(2))
        if "torch_grouped_fwd_ms" in r:
            xr, w1, w2 = xp.detach().requires_grad_(), wgu_t.detach().requires_grad_(), wd_t.detach().requires_grad_()
            def torch_fb():
                torch_grouped_fwd(xr, w1, w2).backward(dyp)
            try:
                torch_fb(); torch.cuda.synchronize()
                r["dxp_relerr_vs_torch"] = ((dxp.float() - xr.grad.float()).norm() / xr.grad.float().norm()).item()
                r["dwgu_relerr_vs_torch"] = ((dwgu - w1.grad.float()).norm() / w1.grad.float().norm()).item()
                r["torch_grouped_fwdbwd_ms"] = bench(torch_fb)
            except Exception as e:
                r["torch_grouped_bwd_error"] = repr(e)[:300]
        r["ours_grouped_fwdbwd_tflops"] = 3 * flops_f / (r["ours_grouped_fwd_ms"] + r["ours_grouped_bwd_ms"]) / 1e9
        r["ours_auto_fwdbwd_tflops"] = 3 * flops_f / (r["ours_auto_fwd_ms"] + r["ours_auto_bwd_ms"]) / 1e9
        if "torch_grouped_fwdbwd_ms" in r:
            r["torch_grouped_fwdbwd_tflops"] = 3 * flops_f / r["torch_grouped_fwdbwd_ms"] / 1e9
        results["shapes"].append(r)
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
        del x, wgu, wd, xp, gu, act, yp, dyp, dxp, dgu, dact, dwgu, dwd, flat, ypr
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print("\n| H | I | ours auto fwd TF/s | ours grouped | ours loop | torch._grouped_mm | torch loop | dense | auto/_grouped_mm | auto/dense | f+b ours auto TF/s | f+b torch TF/s | permute TB/s (x copy) | unpermute TB/s (x copy) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results["shapes"]:
        g = r.get("torch_grouped_fwd_tflops", float("nan"))
        cp = copy_tbs
        print(f"| {r['H']} | {r['I']} | {r['ours_auto_fwd_tflops']:.0f} | {r['ours_grouped_fwd_tflops']:.0f} | "
              f"{r['ours_loop_fwd_tflops']:.0f} | {g:.0f} | {r['torch_loop_fwd_tflops']:.0f} | {r['dense_fwd_tflops']:.0f} | "
              f"{r['ours_auto_fwd_tflops'] / g:.2f} | {r['ours_auto_fwd_tflops'] / r['dense_fwd_tflops']:.2f} | "
              f"{r['ours_auto_fwdbwd_tflops']:.0f} | {r.get('torch_grouped_fwdbwd_tflops', float('nan')):.0f} | "
              f"{r['permute_tbs']:.2f} ({r['copy_same_bytes_ms'] / r['permute_ms']:.2f}) | "
              f"{r['unpermute_tbs']:.2f} ({r['unpermute_tbs'] / cp:.2f}) |")


if __name__ == "__main__":
    main()
