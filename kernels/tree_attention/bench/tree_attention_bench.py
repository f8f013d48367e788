#!/usr/bin/env python3
"""Tree attention benchmark on the GPU machine (issue #4; docs/benchmarks.md).

For each (P, R, G): one trie (a prompt of P tokens, G responses of R tokens),
d=128, 16 heads. Side by side in one run, timed with CUDA events (median):
  - SDPA (flash, causal) on the duplicated flat batch [G, H, P+R, d]
  - FlexAttention with a block mask on the same trie (kend rule as mask_mod)
  - ours: the simple baseline kernel and the tensor-core kernels (C ABI, ctypes):
    variant 1 tc, 2 tc2 (one V stage), 3 wide (128-row blocks), 4 lazy (wide,
    lazy rescaling), 5 fused (lazy forward, one-pass backward with fp32 atomic
    dQ into a caller workspace), 6 ordered (the same, dQ summed in a fixed
    order: deterministic), 7 fusedwide (one pass, 128 keys per block);
    backward variants: tc (two deterministic passes,
    the baseline), fused and ordered
Prints useful TFLOP/s (unmasked pairs only) and the wall-time speedup over the
flat batch against the attention-pair reduction; ratios last.
Usage: tree_attention_bench.py LIB.so [--shapes P,R,G ...] [--no-flex] [--json OUT]
"""
import argparse, ctypes, json, math, os, sys, time

import torch
import torch.nn.functional as F

H, D = 16, 128


def load(lib_path):
    lib = ctypes.CDLL(lib_path)
    lib.tandem_kernels_last_error.restype = ctypes.c_char_p
    lib.tandem_tree_plan_create.restype = ctypes.c_void_p
    P = ctypes.c_void_p
    lib.tandem_tree_plan_create.argtypes = [ctypes.c_int32, ctypes.c_int32, P, P, P]
    lib.tandem_tree_plan_stats.argtypes = [P, P]
    lib.tandem_tree_plan_destroy.argtypes = [P]
    i32, f32 = ctypes.c_int32, ctypes.c_float
    lib.tandem_tree_attention_fwd.argtypes = [P, i32, i32, i32, i32, f32, P, P, P, P, P, P, ctypes.c_int]
    lib.tandem_tree_attention_bwd.argtypes = [P, i32, i32, i32, i32, f32] + [P] * 11 + [ctypes.c_int]
    lib.tandem_tree_attention_bwd_ws.argtypes = [P, i32, i32, i32, i32, f32] + [P] * 11 + [ctypes.c_int, P]
    return lib


def check(lib, rc):
    if rc != 0:
        raise RuntimeError(lib.tandem_kernels_last_error().decode())


def group_segments(P, R, G):
    starts = [0] + [P + g * R for g in range(G)]
    lens = [P] + [R] * G
    parents = [-1] + [0] * G
    return starts, lens, parents


def kend_of(starts, lens, parents, T):
    end = [s + l for s, l in zip(starts, lens)]
    for s in range(len(starts) - 1, -1, -1):
        if parents[s] >= 0:
            end[parents[s]] = max(end[parents[s]], end[s])
    kend = torch.empty(T, dtype=torch.int32)
    for s, (st, l) in enumerate(zip(starts, lens)):
        kend[st:st + l] = end[s]
    return kend


def bench(fn, warmup=5, rep=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rep):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def ceilings():
    x = torch.randn(1 << 30, device="cuda", dtype=torch.bfloat16)  # 2 GiB
    y = torch.empty_like(x)
    t = bench(lambda: y.copy_(x))
    copy_tbs = 2 * x.numel() * 2 / t / 1e9
    del x, y
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t = bench(lambda: a @ b)
    return copy_tbs, 2 * 8192 ** 3 / t / 1e9


def run_shape(lib, P, R, G, use_flex, results):
    T = P + R
    Tt = P + G * R
    starts, lens, parents = group_segments(P, R, G)
    arr = lambda v: torch.tensor(v, dtype=torch.int32)
    st, ln, pa = arr(starts), arr(lens), arr(parents)
    plan = lib.tandem_tree_plan_create(Tt, len(starts), st.data_ptr(), ln.data_ptr(), pa.data_ptr())
    if not plan:
        raise RuntimeError(lib.tandem_kernels_last_error().decode())
    stats = torch.zeros(3, dtype=torch.int64)
    lib.tandem_tree_plan_stats(plan, stats.data_ptr())
    tree_pairs = int(stats[1])
    flat_pairs = G * T * (T + 1) // 2
    pair_red = flat_pairs / tree_pairs
    scale = 1 / math.sqrt(D)
    dev = "cuda"
    # Trie tensors [Tt, H, D]; the flat batch duplicates the prompt rows.
    q = torch.randn(Tt, H, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(Tt, H, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(Tt, H, D, device=dev, dtype=torch.bfloat16)
    do = torch.randn(Tt, H, D, device=dev, dtype=torch.bfloat16)
    idx = torch.cat([torch.cat([torch.arange(P), P + g * R + torch.arange(R)]) for g in range(G)]).to(dev)
    flat = lambda x: x[idx].view(G, T, H, D).transpose(1, 2).contiguous()
    qf, kf, vf, dof = flat(q), flat(k), flat(v), flat(do)
    o = torch.empty_like(q)
    lse = torch.empty(H, Tt, device=dev, dtype=torch.float32)
    delta = torch.empty(H, Tt, device=dev, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dq_acc = torch.empty(H * (Tt * D + (Tt + 63) // 64), device=dev, dtype=torch.float32)
    ptr = lambda t: t.data_ptr()

    def ours_fwd(variant):
        return lambda: check(lib, lib.tandem_tree_attention_fwd(plan, Tt, H, H, D, scale, ptr(q), ptr(k), ptr(v), ptr(o),
                                                                ptr(lse), None, variant))

    def ours_bwd(variant, ws=True):
        return lambda: check(lib, lib.tandem_tree_attention_bwd_ws(plan, Tt, H, H, D, scale, ptr(q), ptr(k), ptr(v),
                                                                   ptr(o), ptr(do), ptr(lse), ptr(delta), ptr(dq),
                                                                   ptr(dk), ptr(dv), None, variant,
                                                                   ptr(dq_acc) if ws else None))

    row = dict(P=P, R=R, G=G, tree_tokens=Tt, pair_reduction=pair_red, token_reduction=G * T / Tt)
    useful_fwd = 4 * tree_pairs * D * H
    # Correctness at scale: ours vs SDPA on the flat batch, gathered to the trie.
    # The flat loss equals the trie's when only copy 0 of each prompt row carries dout
    # (the trie holds each prompt row once); then trie dk/dv = sum over copies.
    qf_, kf_, vf_ = qf.clone().requires_grad_(), kf.clone().requires_grad_(), vf.clone().requires_grad_()
    of = F.scaled_dot_product_attention(qf_, kf_, vf_, is_causal=True, scale=scale)
    dof_ref = dof.clone()
    dof_ref[1:, :, :P] = 0
    of.backward(dof_ref)
    o_flat = of.detach().transpose(1, 2).reshape(G * T, H, D)
    for variant, name in ((1, "tc"), (2, "tc2"), (3, "wide"), (4, "lazy"), (5, "fused"), (6, "ordered"), (7, "fusedwide"),
                          (0, "simple")):
        o.fill_(float("nan")); dq.fill_(float("nan")); dk.fill_(float("nan")); dv.fill_(float("nan"))
        ours_fwd(variant)(); ours_bwd(variant)(); torch.cuda.synchronize()
        # forward: every flat row equals the trie row it came from
        err = ((o[idx].float() - o_flat.float()).norm() / o_flat.float().norm()).item()
        # dq: the trie row of a prompt token sums over the G copies only for k/v; q rows are per token:
        # the flat dq of a response row equals ours; check responses only.
        resp = torch.cat([P + g * R + torch.arange(R) for g in range(G)]).to(dev)
        dqf = qf_.grad.transpose(1, 2).reshape(G * T, H, D)
        resp_flat = torch.cat([g * T + P + torch.arange(R) for g in range(G)]).to(dev)
        err_dq = ((dq[resp].float() - dqf[resp_flat].float()).norm() / dqf[resp_flat].float().norm()).item()
        # dk/dv of a prompt key sums the G flat copies.
        dkf = kf_.grad.transpose(1, 2).reshape(G, T, H, D)
        dk_tree = torch.cat([dkf[:, :P].float().sum(0), dkf[:, P:].reshape(G * R, H, D).float()])
        err_dk = ((dk.float() - dk_tree).norm() / dk_tree.norm()).item()
        dvf = vf_.grad.transpose(1, 2).reshape(G, T, H, D)
        dv_tree = torch.cat([dvf[:, :P].float().sum(0), dvf[:, P:].reshape(G * R, H, D).float()])
        err_dv = ((dv.float() - dv_tree).norm() / dv_tree.norm()).item()
        row[f"relerr_{name}"] = max(err, err_dq, err_dk, err_dv)
        if not (row[f"relerr_{name}"] < 2e-2):
            print(f"  MISMATCH {name}: out {err:.3g} dq {err_dq:.3g} dk {err_dk:.3g} dv {err_dv:.3g}", flush=True)
    del qf_, kf_, vf_, of
    # Run-to-run: the fused backward's dK/dV must repeat bitwise; dQ (atomics) may not.
    ours_bwd(5)(); torch.cuda.synchronize()
    dq1, dk1, dv1 = dq.clone(), dk.clone(), dv.clone()
    ours_bwd(5)(); torch.cuda.synchronize()
    row["fused_dkdv_bitwise_repeat"] = bool(torch.equal(dk1, dk) and torch.equal(dv1, dv))
    row["fused_dq_bitwise_repeat"] = bool(torch.equal(dq1, dq))
    row["fused_dq_repeat_maxdiff"] = (dq1.float() - dq.float()).abs().max().item()
    ours_bwd(6)(); torch.cuda.synchronize()
    dq1, dk1, dv1 = dq.clone(), dk.clone(), dv.clone()
    ours_bwd(6)(); torch.cuda.synchronize()
    row["ordered_bitwise_repeat"] = bool(torch.equal(dq1, dq) and torch.equal(dk1, dk) and torch.equal(dv1, dv))
    del dq1, dk1, dv1

    row["sdpa_fwd_ms"] = bench(lambda: F.scaled_dot_product_attention(qf, kf, vf, is_causal=True, scale=scale))
    qg, kg, vg = qf.clone().requires_grad_(), kf.clone().requires_grad_(), vf.clone().requires_grad_()

    def sdpa_fb():
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, scale=scale)
        out.backward(dof)
    row["sdpa_fwdbwd_ms"] = bench(sdpa_fb)
    row["tc_fwd_ms"] = bench(ours_fwd(1))
    row["tc2_fwd_ms"] = bench(ours_fwd(2))
    row["wide_fwd_ms"] = bench(ours_fwd(3))
    row["lazy_fwd_ms"] = bench(ours_fwd(4))
    row["tc_fwd_ms_again"] = bench(ours_fwd(1))  # run-to-run spread
    row["tc_bwd_ms"] = bench(ours_bwd(1))
    row["fused_bwd_ms"] = bench(ours_bwd(5))
    row["fused_bwd_alloc_ms"] = bench(ours_bwd(5, ws=False))  # workspace allocated per call
    row["ordered_bwd_ms"] = bench(ours_bwd(6))
    row["tc_bwd_ms_again"] = bench(ours_bwd(1))
    row["fused_bwd_ms_again"] = bench(ours_bwd(5))
    row["ordered_bwd_ms_again"] = bench(ours_bwd(6))
    row["fusedwide_bwd_ms"] = bench(ours_bwd(7))
    row["fusedwide_bwd_ms_again"] = bench(ours_bwd(7))
    if Tt * G <= 20000:
        row["simple_fwd_ms"] = bench(ours_fwd(0), 1, 3)
        row["simple_bwd_ms"] = bench(ours_bwd(0), 1, 3)
    if use_flex:
        try:
            from torch.nn.attention.flex_attention import flex_attention, create_block_mask
            kend = kend_of(starts, lens, parents, Tt).to(dev)

            def mask_mod(b, h, qi, ki):
                return (ki <= qi) & (qi < kend[ki])
            bm = create_block_mask(mask_mod, 1, 1, Tt, Tt, device=dev)
            flex = torch.compile(flex_attention)
            qt, kt, vt = (x.transpose(0, 1).unsqueeze(0).contiguous() for x in (q, k, v))
            row["flex_fwd_ms"] = bench(lambda: flex(qt, kt, vt, block_mask=bm, scale=scale))
            qr, kr, vr = (x.clone().requires_grad_() for x in (qt, kt, vt))
            dot = do.transpose(0, 1).unsqueeze(0).contiguous()

            def flex_fb():
                flex(qr, kr, vr, block_mask=bm, scale=scale).backward(dot)
            row["flex_fwdbwd_ms"] = bench(flex_fb)
        except Exception as e:  # report, keep going
            row["flex_error"] = repr(e)[:200]
    row["tc_fwd_tflops"] = useful_fwd / row["tc_fwd_ms"] / 1e9
    row["tc2_fwd_tflops"] = useful_fwd / row["tc2_fwd_ms"] / 1e9
    row["wide_fwd_tflops"] = useful_fwd / row["wide_fwd_ms"] / 1e9
    row["lazy_fwd_tflops"] = useful_fwd / row["lazy_fwd_ms"] / 1e9
    row["lazy_speedup_fwd_vs_flat"] = row["sdpa_fwd_ms"] / row["lazy_fwd_ms"]
    row["lazy_speedup_fwdbwd_vs_flat"] = row["sdpa_fwdbwd_ms"] / (row["lazy_fwd_ms"] + row["tc_bwd_ms"])
    row["wide_speedup_fwd_vs_flat"] = row["sdpa_fwd_ms"] / row["wide_fwd_ms"]
    row["wide_speedup_fwdbwd_vs_flat"] = row["sdpa_fwdbwd_ms"] / (row["wide_fwd_ms"] + row["tc_bwd_ms"])
    lf = row["lazy_fwd_ms"]
    row["tc_bwd_over_lazy_fwd"] = row["tc_bwd_ms"] / lf
    row["fused_bwd_over_lazy_fwd"] = row["fused_bwd_ms"] / lf
    row["fused_speedup_bwd_vs_tc"] = row["tc_bwd_ms"] / row["fused_bwd_ms"]
    row["fused_speedup_fwdbwd_vs_flat"] = row["sdpa_fwdbwd_ms"] / (lf + row["fused_bwd_ms"])
    row["sdpa_bwd_over_fwd"] = (row["sdpa_fwdbwd_ms"] - row["sdpa_fwd_ms"]) / row["sdpa_fwd_ms"]
    row["fused_fwdbwd_tflops"] = 3.5 * useful_fwd / (lf + row["fused_bwd_ms"]) / 1e9
    for name in ("fusedwide",):
        row[f"{name}_bwd_over_lazy_fwd"] = row[f"{name}_bwd_ms"] / lf
        row[f"{name}_speedup_bwd_vs_tc"] = row["tc_bwd_ms"] / row[f"{name}_bwd_ms"]
        row[f"{name}_speedup_fwdbwd_vs_flat"] = row["sdpa_fwdbwd_ms"] / (lf + row[f"{name}_bwd_ms"])
        row[f"{name}_fwdbwd_tflops"] = 3.5 * useful_fwd / (lf + row[f"{name}_bwd_ms"]) / 1e9
        if "flex_fwdbwd_ms" in row:
            row[f"{name}_vs_flex_fwdbwd"] = row["flex_fwdbwd_ms"] / (lf + row[f"{name}_bwd_ms"])
    row["ordered_bwd_over_lazy_fwd"] = row["ordered_bwd_ms"] / lf
    row["ordered_speedup_bwd_vs_tc"] = row["tc_bwd_ms"] / row["ordered_bwd_ms"]
    row["ordered_cost_vs_fused"] = row["ordered_bwd_ms"] / row["fused_bwd_ms"]
    row["ordered_speedup_fwdbwd_vs_flat"] = row["sdpa_fwdbwd_ms"] / (lf + row["ordered_bwd_ms"])
    row["ordered_fwdbwd_tflops"] = 3.5 * useful_fwd / (lf + row["ordered_bwd_ms"]) / 1e9
    if "flex_fwdbwd_ms" in row:
        row["fused_vs_flex_fwdbwd"] = row["flex_fwdbwd_ms"] / (lf + row["fused_bwd_ms"])
        row["ordered_vs_flex_fwdbwd"] = row["flex_fwdbwd_ms"] / (lf + row["ordered_bwd_ms"])
        row["lazy_tc_vs_flex_fwdbwd"] = row["flex_fwdbwd_ms"] / (lf + row["tc_bwd_ms"])
    row["tc_fwdbwd_tflops"] = 3.5 * useful_fwd / (row["tc_fwd_ms"] + row["tc_bwd_ms"]) / 1e9
    row["sdpa_fwd_tflops"] = 4 * flat_pairs * D * H / row["sdpa_fwd_ms"] / 1e9
    row["speedup_fwd_vs_flat"] = row["sdpa_fwd_ms"] / row["tc_fwd_ms"]
    row["speedup_fwdbwd_vs_flat"] = row["sdpa_fwdbwd_ms"] / (row["tc_fwd_ms"] + row["tc_bwd_ms"])
    if "flex_fwd_ms" in row:
        row["vs_flex_fwd"] = row["flex_fwd_ms"] / row["tc_fwd_ms"]
        row["vs_flex_fwdbwd"] = row["flex_fwdbwd_ms"] / (row["tc_fwd_ms"] + row["tc_bwd_ms"])
        row["wide_vs_flex_fwd"] = row["flex_fwd_ms"] / row["wide_fwd_ms"]
        row["lazy_vs_flex_fwd"] = row["flex_fwd_ms"] / row["lazy_fwd_ms"]
    lib.tandem_tree_plan_destroy(plan)
    results.append(row)
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--shapes", nargs="*", default=["2048,1024,8", "8192,1024,16", "512,4096,4", "512,256,4",
                                                     "2048,4096,16", "8192,256,8"])
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    lib = load(args.lib)
    torch.manual_seed(int(time.time()))
    copy_tbs, gemm_tf = ceilings()
    print(f"ceilings: D2D copy {copy_tbs:.2f} TB/s, bf16 GEMM 8192^3 {gemm_tf:.0f} TFLOP/s", flush=True)
    results = []
    for s in args.shapes:
        P, R, G = map(int, s.split(","))
        run_shape(lib, P, R, G, not args.no_flex, results)
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(copy_tbs=copy_tbs, gemm_tflops=gemm_tf, rows=results), f, indent=1)
    print("\n| P | R | G | pair red. | tc fwd TF/s | tc2 fwd TF/s | sdpa fwd TF/s | fwd speedup vs flat | fwd+bwd speedup | vs Flex fwd | vs Flex f+b | tc/simple fwd | relerr |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        simple = r["simple_fwd_ms"] / r["tc_fwd_ms"] if "simple_fwd_ms" in r else float("nan")
        print(f"| {r['P']} | {r['R']} | {r['G']} | {r['pair_reduction']:.2f} | {r['tc_fwd_tflops']:.0f} | {r['tc2_fwd_tflops']:.0f} | "
              f"{r['sdpa_fwd_tflops']:.0f} | {r['speedup_fwd_vs_flat']:.2f} | {r['speedup_fwdbwd_vs_flat']:.2f} | "
              f"{r.get('vs_flex_fwd', float('nan')):.2f} | {r.get('vs_flex_fwdbwd', float('nan')):.2f} | {simple:.1f} | "
              f"{r['relerr_tc']:.1e} |")
    print("\n| P | R | G | pair red. | tc fwd TF/s (again) | tc2 fwd TF/s | wide fwd TF/s | sdpa fwd TF/s | wide fwd vs flat | wide fwd+bwd vs flat | wide vs Flex fwd | relerr wide |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        again = r["tc_fwd_ms"] / r["tc_fwd_ms_again"] * r["tc_fwd_tflops"]
        print(f"| {r['P']} | {r['R']} | {r['G']} | {r['pair_reduction']:.2f} | {r['tc_fwd_tflops']:.0f} ({again:.0f}) | "
              f"{r['tc2_fwd_tflops']:.0f} | {r['wide_fwd_tflops']:.0f} | {r['sdpa_fwd_tflops']:.0f} | "
              f"{r['wide_speedup_fwd_vs_flat']:.2f} | {r['wide_speedup_fwdbwd_vs_flat']:.2f} | "
              f"{r.get('wide_vs_flex_fwd', float('nan')):.2f} | {r['relerr_wide']:.1e} |")
    print("\n| P | R | G | wide fwd TF/s | lazy fwd TF/s | lazy fwd vs flat | lazy fwd+bwd vs flat | lazy vs Flex fwd | relerr lazy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['P']} | {r['R']} | {r['G']} | {r['wide_fwd_tflops']:.0f} | {r['lazy_fwd_tflops']:.0f} | "
              f"{r['lazy_speedup_fwd_vs_flat']:.2f} | {r['lazy_speedup_fwdbwd_vs_flat']:.2f} | "
              f"{r.get('lazy_vs_flex_fwd', float('nan')):.2f} | {r['relerr_lazy']:.1e} |")
    print("\n| P | R | G | pair red. | lazy fwd ms | tc bwd ms (again) | fused bwd ms (again) | fused bwd, alloc per call | "
          "fused/tc | tc bwd/fwd | fused bwd/fwd | SDPA bwd/fwd | f+b vs flat: tc | fused | f+b vs Flex: tc | fused | "
          "fused f+b TF/s | relerr fused | dK/dV repeat | dQ repeat max diff |")
    print("|" + "---|" * 20)
    for r in results:
        print(f"| {r['P']} | {r['R']} | {r['G']} | {r['pair_reduction']:.2f} | {r['lazy_fwd_ms']:.2f} | "
              f"{r['tc_bwd_ms']:.2f} ({r['tc_bwd_ms_again']:.2f}) | {r['fused_bwd_ms']:.2f} ({r['fused_bwd_ms_again']:.2f}) | "
              f"{r['fused_bwd_alloc_ms']:.2f} | {r['fused_speedup_bwd_vs_tc']:.2f} | {r['tc_bwd_over_lazy_fwd']:.2f} | "
              f"{r['fused_bwd_over_lazy_fwd']:.2f} | {r['sdpa_bwd_over_fwd']:.2f} | {r['lazy_speedup_fwdbwd_vs_flat']:.2f} | "
              f"{r['fused_speedup_fwdbwd_vs_flat']:.2f} | {r.get('lazy_tc_vs_flex_fwdbwd', float('nan')):.2f} | "
              f"{r.get('fused_vs_flex_fwdbwd', float('nan')):.2f} | {r['fused_fwdbwd_tflops']:.0f} | "
              f"{r['relerr_fused']:.1e} | {r['fused_dkdv_bitwise_repeat']} | {r['fused_dq_repeat_maxdiff']:.1e} |")
    print("\n| P | R | G | ordered bwd ms (again) | ordered/fused | ordered/tc speedup | ordered bwd/fwd | f+b vs flat | "
          "f+b vs Flex | f+b TF/s | relerr ordered | bitwise repeat |")
    print("|" + "---|" * 13)
    for r in results:
        print(f"| {r['P']} | {r['R']} | {r['G']} | {r['ordered_bwd_ms']:.2f} ({r['ordered_bwd_ms_again']:.2f}) | "
              f"{r['ordered_cost_vs_fused']:.2f} | {r['ordered_speedup_bwd_vs_tc']:.2f} | {r['ordered_bwd_over_lazy_fwd']:.2f} | "
              f"{r['ordered_speedup_fwdbwd_vs_flat']:.2f} | {r.get('ordered_vs_flex_fwdbwd', float('nan')):.2f} | "
              f"{r['ordered_fwdbwd_tflops']:.0f} | {r['relerr_ordered']:.1e} | {r['ordered_bitwise_repeat']} |")
    print("\n| P | R | G | fusedwide bwd ms (again) | vs tc | vs fused | bwd/fwd | f+b vs flat | f+b vs Flex | f+b TF/s | relerr |")
    print("|" + "---|" * 12)
    for r in results:
        print(f"| {r['P']} | {r['R']} | {r['G']} | {r['fusedwide_bwd_ms']:.2f} ({r['fusedwide_bwd_ms_again']:.2f}) | "
              f"{r['fusedwide_speedup_bwd_vs_tc']:.2f} | {r['fused_bwd_ms'] / r['fusedwide_bwd_ms']:.2f} | "
              f"{r['fusedwide_bwd_over_lazy_fwd']:.2f} | {r['fusedwide_speedup_fwdbwd_vs_flat']:.2f} | "
              f"{r.get('fusedwide_vs_flex_fwdbwd', float('nan')):.2f} | {r['fusedwide_fwdbwd_tflops']:.0f} | "
              f"{r['relerr_fusedwide']:.1e} |")


if __name__ == "__main__":
    main()
