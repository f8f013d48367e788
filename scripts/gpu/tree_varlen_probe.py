"""Probe: tree attention as variable-length dense attention (issue #19, road 2).

A trie is a set of (query segment, key path) pairs: segment s's queries see
the keys of its ancestors and its own keys up to themselves. Two ways to run
that on PyTorch's dense kernels:
  single: one varlen call, q = the packed segments, k/v = each segment's
          ancestors + itself gathered, causal aligned bottom-right;
  split:  self part (varlen causal, q = k = the packed segments, no gather) +
          ancestor part (varlen, non-causal, q = non-root segments, k/v =
          their ancestors gathered), merged by log-sum-exp; the backward runs
          both parts with the merged out/lse.
Prints correctness against an fp32 dense-mask reference and timings against
the flat batch (cuDNN, flash) and FlexAttention, all in one process.
"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

aten = torch.ops.aten
dev = "cuda"


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


def regular_trie(levels):
    """levels: [(fanout, length)], first (1, P). Returns starts, lens, parents (preorder)."""
    starts, lens, parents = [], [], []
    pos = [0]

    def add(level, parent):
        for _ in range(levels[level][0]):
            s = len(starts)
            starts.append(pos[0]); lens.append(levels[level][1]); parents.append(parent)
            pos[0] += levels[level][1]
            if level + 1 < len(levels):
                add(level + 1, s)
    add(0, -1)
    return starts, lens, parents


def random_trie(gen, n_roots, max_depth, max_fan, max_len, max_tokens=1500):
    starts, lens, parents = [], [], []
    pos = [0]

    def add(parent, depth):
        if pos[0] >= max_tokens:
            return
        s = len(starts)
        ln = int(torch.randint(1, max_len + 1, (1,), generator=gen))
        starts.append(pos[0]); lens.append(ln); parents.append(parent); pos[0] += ln
        if depth < max_depth:
            for _ in range(int(torch.randint(0, max_fan + 1, (1,), generator=gen))):
                add(s, depth + 1)
    for _ in range(n_roots):
        add(-1, 0)
    return starts, lens, parents


class Plan:
    def __init__(self, starts, lens, parents):
        self.T = starts[-1] + lens[-1]
        self.n = len(starts)
        anc = []
        for s in range(self.n):
            chain, p = [], parents[s]
            while p >= 0:
                chain.append(p); p = parents[p]
            anc.append(chain[::-1])
        rng = lambda s: list(range(starts[s], starts[s] + lens[s]))
        full_idx, cu_full, anc_idx, cu_anc, qrows, cu_qa = [], [0], [], [0], [], [0]
        for s in range(self.n):
            a = [t for p in anc[s] for t in rng(p)]
            full_idx += a + rng(s); cu_full.append(len(full_idx))
            if anc[s]:
                anc_idx += a; cu_anc.append(len(anc_idx))
                qrows += rng(s); cu_qa.append(len(qrows))
        i32 = lambda v: torch.tensor(v, dtype=torch.int32, device=dev)
        i64 = lambda v: torch.tensor(v, dtype=torch.int64, device=dev)
        self.cu_q = i32(starts + [self.T]); self.max_q = max(lens)
        self.full_idx, self.cu_full = i64(full_idx), i32(cu_full)
        self.max_full = max(cu_full[i + 1] - cu_full[i] for i in range(self.n))
        self.anc_idx, self.cu_anc, self.qrows, self.cu_qa = i64(anc_idx), i32(cu_anc), i64(qrows), i32(cu_qa)
        self.max_anc = max([cu_anc[i + 1] - cu_anc[i] for i in range(len(cu_anc) - 1)] or [0])
        self.max_qa = max([cu_qa[i + 1] - cu_qa[i] for i in range(len(cu_qa) - 1)] or [0])
        self.pairs = sum(lens[s] * sum(lens[p] for p in anc[s]) + lens[s] * (lens[s] + 1) // 2
                         for s in range(self.n))
        # kend for Flex / the dense reference
        end = [st + ln for st, ln in zip(starts, lens)]
        for s in range(self.n - 1, -1, -1):
            if parents[s] >= 0:
                end[parents[s]] = max(end[parents[s]], end[s])
        kend = []
        for s in range(self.n):
            kend += [end[s]] * lens[s]
        self.kend = i64(kend)
        # leaves' paths for the flat batch
        has_child = set(p for p in parents if p >= 0)
        self.leaf_paths = [[t for p in anc[s] + [s] for t in rng(p)] for s in range(self.n) if s not in has_child]


def lse_tokens_major(lse, T, H):
    if lse.dim() == 2 and lse.shape == (H, T):
        return lse.t()
    if lse.dim() == 2 and lse.shape == (T, H):
        return lse
    if lse.dim() == 3 and lse.shape[0] == T and lse.shape[1] == H:
        return lse[..., 0]
    raise RuntimeError(f"lse shape {tuple(lse.shape)} for T={T} H={H}")


# ---- kernels -------------------------------------------------------------------------------------

def flash_fwd(q, k, v, cu_q, cu_k, mq, mk, causal, scale):
    o, lse, rs, un, _ = aten._flash_attention_forward(q, k, v, cu_q, cu_k, mq, mk, 0.0, causal, False, scale=scale)
    return o, lse, (rs, un)


def flash_bwd(do, q, k, v, o, lse, cu_q, cu_k, mq, mk, causal, scale, st):
    return aten._flash_attention_backward(do, q, k, v, o, lse, cu_q, cu_k, mq, mk, 0.0, causal, st[0], st[1],
                                          scale=scale)


def cudnn_fwd(q, k, v, cu_q, cu_k, mq, mk, causal, scale):
    r = aten._cudnn_attention_forward(q, k, v, None, cu_q, cu_k, mq, mk, True, 0.0, causal, False, scale=scale)
    return r[0], r[1], (r[6], r[7])


def cudnn_bwd(do, q, k, v, o, lse, cu_q, cu_k, mq, mk, causal, scale, st):
    return aten._cudnn_attention_backward(do, q, k, v, o, lse, st[0], st[1], None, cu_q, cu_k, mq, mk, 0.0, causal,
                                          scale=scale)


KERNELS = {"flash": (flash_fwd, flash_bwd), "cudnn": (cudnn_fwd, cudnn_bwd)}


def single_fwd(kern, pl, q, k, v, scale):
    kg, vg = k.index_select(0, pl.full_idx), v.index_select(0, pl.full_idx)
    o, lse, st = KERNELS[kern][0](q, kg, vg, pl.cu_q, pl.cu_full, pl.max_q, pl.max_full, True, scale)
    return o, lse, (kg, vg, st)


def single_bwd(kern, pl, q, k, v, o, lse, saved, do, scale):
    kg, vg, st = saved
    dq, dkg, dvg = KERNELS[kern][1](do, q, kg, vg, o, lse, pl.cu_q, pl.cu_full, pl.max_q, pl.max_full, True, scale, st)
    dk = torch.zeros(k.shape, device=dev, dtype=torch.float32).index_add_(0, pl.full_idx, dkg.float())
    dv = torch.zeros(v.shape, device=dev, dtype=torch.float32).index_add_(0, pl.full_idx, dvg.float())
    return dq, dk.to(k.dtype), dv.to(v.dtype)


def split_fwd(kern, pl, q, k, v, scale):
    T, H = q.shape[0], q.shape[1]
    f = KERNELS[kern][0]
    os_, lses, sts = f(q, k, v, pl.cu_q, pl.cu_q, pl.max_q, pl.max_q, True, scale)
    lses = lse_tokens_major(lses, T, H)
    qa = q.index_select(0, pl.qrows)
    ka, va = k.index_select(0, pl.anc_idx), v.index_select(0, pl.anc_idx)
    oa, lsea, sta = f(qa, ka, va, pl.cu_qa, pl.cu_anc, pl.max_qa, pl.max_anc, False, scale)
    lsea = lse_tokens_major(lsea, qa.shape[0], H)
    ls_r = lses.index_select(0, pl.qrows)
    m = torch.maximum(ls_r, lsea)
    ws, wa = torch.exp(ls_r - m), torch.exp(lsea - m)
    lse_r = m + torch.log(ws + wa)
    o_r = (os_.index_select(0, pl.qrows).float() * (ws / (ws + wa)).unsqueeze(-1)
           + oa.float() * (wa / (ws + wa)).unsqueeze(-1)).to(q.dtype)
    o = os_.index_copy(0, pl.qrows, o_r)
    lse = lses.index_copy(0, pl.qrows, lse_r)
    return o, lse, (qa, ka, va, sts, sta)


def to_kernel_lse(lse_tm, like):
    """The merged [T, H] log-sum-exp in the layout the kernel returned (`like`)."""
    if like.dim() == 3:
        return lse_tm.unsqueeze(-1).contiguous()
    return lse_tm.contiguous() if like.shape == lse_tm.shape else lse_tm.t().contiguous()


def split_bwd(kern, pl, q, k, v, o, lse, saved, do, scale, lse_like):
    qa, ka, va, sts, sta = saved
    b = KERNELS[kern][1]
    lse_k = to_kernel_lse(lse, lse_like[0])
    dq, dk, dv = b(do, q, k, v, o, lse_k, pl.cu_q, pl.cu_q, pl.max_q, pl.max_q, True, scale, sts)
    oa, doa = o.index_select(0, pl.qrows), do.index_select(0, pl.qrows)
    lsea = to_kernel_lse(lse.index_select(0, pl.qrows), lse_like[1])
    dqa, dka, dva = b(doa, qa, ka, va, oa, lsea, pl.cu_qa, pl.cu_anc, pl.max_qa, pl.max_anc, False, scale, sta)
    dq = dq.float().index_add_(0, pl.qrows, dqa.float())
    dk = dk.float().index_add_(0, pl.anc_idx, dka.float())
    dv = dv.float().index_add_(0, pl.anc_idx, dva.float())
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def reference(pl, q, k, v, do, scale):
    T, Hq, D = q.shape
    Hk = k.shape[1]
    qi = torch.arange(T, device=dev)
    mask = (qi[None, :] <= qi[:, None]) & (qi[:, None] < pl.kend[None, :])
    qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
    rep = Hq // Hk
    s = torch.einsum("thd,shd->hts", qf, kf.repeat_interleave(rep, 1)) * scale
    s = s.masked_fill(~mask[None], float("-inf"))
    o = torch.einsum("hts,shd->thd", s.softmax(-1), vf.repeat_interleave(rep, 1))
    o.backward(do.float())
    return o.detach(), qf.grad, kf.grad, vf.grad


def relerr(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def check(pl, Hq, Hk, D, results, label):
    scale = 1 / math.sqrt(D)
    q, k, v, do = (torch.randn(pl.T, h, D, device=dev, dtype=torch.bfloat16) for h in (Hq, Hk, Hk, Hq))
    ro, rdq, rdk, rdv = reference(pl, q, k, v, do, scale)
    for kern in KERNELS:
        for form in ("single", "split"):
            name = f"{form}-{kern}"
            try:
                if form == "single":
                    o, lse, sv = single_fwd(kern, pl, q, k, v, scale)
                    dq, dk, dv = single_bwd(kern, pl, q, k, v, o, lse, sv, do, scale)
                else:
                    o, lse, sv = split_fwd(kern, pl, q, k, v, scale)
                    likes = shapes_of_lse(kern, pl, q, k, v, scale)
                    dq, dk, dv = split_bwd(kern, pl, q, k, v, o, lse, sv, do, scale, likes)
                torch.cuda.synchronize()
                errs = [relerr(o, ro), relerr(dq, rdq), relerr(dk, rdk), relerr(dv, rdv)]
                results.append(dict(check=label, variant=name, err=[round(e, 5) for e in errs]))
            except Exception as e:
                results.append(dict(check=label, variant=name, error=repr(e)[:300]))
            print(json.dumps(results[-1]), flush=True)


_lse_shape_cache = {}


def shapes_of_lse(kern, pl, q, k, v, scale):
    key = (kern, id(pl), q.shape)
    if key not in _lse_shape_cache:
        f = KERNELS[kern][0]
        _, l1, _ = f(q, k, v, pl.cu_q, pl.cu_q, pl.max_q, pl.max_q, True, scale)
        qa = q.index_select(0, pl.qrows)
        ka = k.index_select(0, pl.anc_idx)
        _, l2, _ = f(qa, ka, ka, pl.cu_qa, pl.cu_anc, pl.max_qa, pl.max_anc, False, scale)
        _lse_shape_cache[key] = (l1, l2)
    return _lse_shape_cache[key]


def timing(pl, Hq, Hk, D, label, results, flex_ok=True):
    scale = 1 / math.sqrt(D)
    q, k, v, do = (torch.randn(pl.T, h, D, device=dev, dtype=torch.bfloat16) for h in (Hq, Hk, Hk, Hq))
    row = dict(shape=label, Hq=Hq, Hkv=Hk, D=D, T=pl.T)
    # flat batch: every leaf's path, equal lengths for a regular trie
    L = len(pl.leaf_paths[0]); B = len(pl.leaf_paths)
    flat_pairs = B * L * (L + 1) // 2
    row["pair_red"] = flat_pairs / pl.pairs
    idx = torch.tensor([t for p in pl.leaf_paths for t in p], device=dev)
    fl = lambda x: x[idx].view(B, L, x.shape[1], D).transpose(1, 2).contiguous()
    qf, kf, vf, dof = fl(q), fl(k), fl(v), fl(do)
    gqa = Hq != Hk
    for be, nm in ((SDPBackend.CUDNN_ATTENTION, "cudnn"), (SDPBackend.FLASH_ATTENTION, "flash")):
        try:
            with sdpa_kernel([be]):
                row[f"flat_{nm}_fwd"] = bench(lambda: F.scaled_dot_product_attention(qf, kf, vf, is_causal=True,
                                                                                    scale=scale, enable_gqa=gqa))
                qg, kg, vg = (x.clone().requires_grad_() for x in (qf, kf, vf))

                def fb():
                    F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, scale=scale, enable_gqa=gqa).backward(dof)
                row[f"flat_{nm}_fb"] = bench(fb)
        except Exception as e:
            row[f"flat_{nm}_error"] = repr(e)[:200]
    del qf, kf, vf, dof
    for kern in KERNELS:
        for form in ("single", "split"):
            name = f"{form}-{kern}"
            try:
                if form == "single":
                    fwd = lambda: single_fwd(kern, pl, q, k, v, scale)
                    o, lse, sv = fwd()
                    bwd = lambda: single_bwd(kern, pl, q, k, v, o, lse, sv, do, scale)
                else:
                    fwd = lambda: split_fwd(kern, pl, q, k, v, scale)
                    o, lse, sv = fwd()
                    likes = shapes_of_lse(kern, pl, q, k, v, scale)
                    bwd = lambda: split_bwd(kern, pl, q, k, v, o, lse, sv, do, scale, likes)
                row[f"{name}_fwd"] = bench(fwd)
                row[f"{name}_bwd"] = bench(bwd)
                del o, lse, sv
            except Exception as e:
                row[f"{name}_error"] = repr(e)[:200]
    if flex_ok:
        try:
            from torch.nn.attention.flex_attention import flex_attention, create_block_mask
            kend = pl.kend

            def mask_mod(b, h, qi, ki):
                return (ki <= qi) & (qi < kend[ki])
            bm = create_block_mask(mask_mod, 1, 1, pl.T, pl.T, device=dev)
            flex = torch.compile(flex_attention)
            qt, kt, vt = (x.transpose(0, 1).unsqueeze(0).contiguous() for x in (q, k, v))
            row["flex_fwd"] = bench(lambda: flex(qt, kt, vt, block_mask=bm, scale=scale, enable_gqa=gqa))
            qr, kr, vr = (x.clone().requires_grad_() for x in (qt, kt, vt))
            dot = do.transpose(0, 1).unsqueeze(0).contiguous()

            def flex_fb():
                flex(qr, kr, vr, block_mask=bm, scale=scale, enable_gqa=gqa).backward(dot)
            row["flex_fb"] = bench(flex_fb)
        except Exception as e:
            row["flex_error"] = repr(e)[:200]
    results.append(row)
    best_flat = min(row.get("flat_cudnn_fwd", 1e9), row.get("flat_flash_fwd", 1e9))
    best_flat_fb = min(row.get("flat_cudnn_fb", 1e9), row.get("flat_flash_fb", 1e9))
    summ = dict(shape=label, pair_red=round(row["pair_red"], 2))
    for kern in KERNELS:
        for form in ("single", "split"):
            n = f"{form}-{kern}"
            if f"{n}_fwd" in row and f"{n}_bwd" in row:  # a failed backward leaves only its error
                f_, b_ = row[f"{n}_fwd"], row[f"{n}_bwd"]
                summ[n] = dict(fwd_ms=round(f_, 3), fb_ms=round(f_ + b_, 3),
                               fwd_of_bound=round(best_flat / f_ / row["pair_red"], 2),
                               fb_of_bound=round(best_flat_fb / (f_ + b_) / row["pair_red"], 2),
                               vs_flex_fwd=round(row.get("flex_fwd", float("nan")) / f_, 2),
                               vs_flex_fb=round(row.get("flex_fb", float("nan")) / (f_ + b_), 2),
                               bwd_over_fwd=round(b_ / f_, 2))
    summ["flat"] = {k: round(v, 3) for k, v in row.items() if k.startswith("flat_") and isinstance(v, float)}
    summ["flex"] = {k: round(v, 3) for k, v in row.items() if k.startswith("flex_") and isinstance(v, float)}
    print(json.dumps(summ), flush=True)
    for k_ in row:
        if k_.endswith("error"):
            print(" ", k_, row[k_], flush=True)


def main():
    print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
    for n in ("_flash_attention_forward", "_cudnn_attention_forward", "_flash_attention_backward",
              "_cudnn_attention_backward"):
        print(n, getattr(aten, n).default._schema if hasattr(aten, n) else "MISSING", flush=True)
    results = []
    gen = torch.Generator().manual_seed(int(time.time()))
    # correctness on small tries: 2-level, multi-level, 1-3-token segments, many leaves
    for label, tri in (("2lvl", regular_trie([(1, 100), (5, 37)])),
                       ("3lvl", regular_trie([(2, 70), (3, 20), (2, 33)])),
                       ("rand-tiny", random_trie(gen, 3, 6, 3, 3)),
                       ("rand", random_trie(gen, 2, 4, 4, 40))):
        pl = Plan(*tri)
        for Hq, Hk, D in ((8, 2, 128), (4, 4, 64)):
            check(pl, Hq, Hk, D, results, f"{label} T={pl.T} segs={pl.n} {Hq}/{Hk}/{D}")
    shapes = [(2048, 1024, 8), (8192, 1024, 16), (512, 4096, 4), (512, 256, 4), (2048, 4096, 16), (8192, 256, 8)]
    only = sys.argv[1:]
    for (P, R, G) in shapes:
        pl = Plan(*regular_trie([(1, P), (G, R)]))
        for Hq, Hk, D in ((32, 8, 128),):
            timing(pl, Hq, Hk, D, f"P{P} R{R} G{G}", results)
    pl = Plan(*regular_trie([(1, 1024), (8, 512), (4, 512)]))
    timing(pl, 32, 8, 128, "multi P1024 8x512 4x512", results)
    timing(Plan(*regular_trie([(1, 2048), (8, 1024)])), 16, 16, 64, "P2048 R1024 G8 MHA d64", results)


if __name__ == "__main__":
    main()
