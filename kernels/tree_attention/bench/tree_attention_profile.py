#!/usr/bin/env python3
"""Runs each tree-attention backward variant once on one trie, for a profiler
(ncu) to attach to (issue #4, docs/benchmarks.md "Round 3"): the lazy forward,
then the backward of variants tc (1), fused (5) and fusedwide (7).
Usage: tree_attention_profile.py LIB.so [P R G]
"""
import ctypes, math, sys

import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
import tree_attention_bench as tb  # noqa: E402


def main():
    lib = tb.load(sys.argv[1])
    P, R, G = (int(x) for x in sys.argv[2:5]) if len(sys.argv) >= 5 else (2048, 4096, 16)
    H, D = tb.H, tb.D
    Tt = P + G * R
    starts, lens, parents = tb.group_segments(P, R, G)
    arr = lambda v: torch.tensor(v, dtype=torch.int32)
    st, ln, pa = arr(starts), arr(lens), arr(parents)
    plan = lib.tandem_tree_plan_create(Tt, len(starts), st.data_ptr(), ln.data_ptr(), pa.data_ptr())
    q, k, v, do = (torch.randn(Tt, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o = torch.empty_like(q)
    lse = torch.empty(H, Tt, device="cuda")
    delta = torch.empty(H, Tt, device="cuda")
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    ws = torch.empty(H * (Tt * D + (Tt + 63) // 64), device="cuda")
    p = lambda t: t.data_ptr()
    scale = 1 / math.sqrt(D)
    tb.check(lib, lib.tandem_tree_attention_fwd(plan, Tt, H, H, D, scale, p(q), p(k), p(v), p(o), p(lse), None, 4))
    for variant in (1, 5, 7):
        tb.check(lib, lib.tandem_tree_attention_bwd_ws(plan, Tt, H, H, D, scale, p(q), p(k), p(v), p(o), p(do), p(lse),
                                                       p(delta), p(dq), p(dk), p(dv), None, variant, p(ws)))
    torch.cuda.synchronize()
    lib.tandem_tree_plan_destroy(plan)
    print("done", P, R, G)


if __name__ == "__main__":
    main()
