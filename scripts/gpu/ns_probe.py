"""Newton–Schulz (issue #17: "within 1.2x of the same matrix multiplies in
cuBLAS") through the same ATen calls as workers/train/muon.cc's
NewtonSchulz5 (the normalisation, then per step mm, addmm with beta=b,
alpha=c, addmm with beta=a, alpha=1), against its 15 matrix multiplies
alone and against the elementwise form it replaced; bf16, 4096 x 11008
(train_optimizer_bench's shape), median of CUDA-event timings. For a
device call too short to build the C++ benchmark. Prints one JSON line.
"""
import json

import torch

from tree_varlen_probe import bench  # median of CUDA-event timings (same folder)

A_, B_, C_ = 3.4445, -4.7750, 2.0315


def ns_fused(g, steps=5):
    x = g / (torch.linalg.vector_norm(g, dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        a = x @ x.T
        b = torch.addmm(a, a, a, beta=B_, alpha=C_)
        x = torch.addmm(x, b, x, beta=A_, alpha=1)
    return x


def ns_elementwise(g, steps=5):
    x = g / (torch.linalg.vector_norm(g, dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        a = x @ x.T
        b = B_ * a + C_ * (a @ a)
        x = A_ * x + b @ x
    return x


def matmuls(x, steps=5):
    y = x
    for _ in range(steps):
        a = y @ y.T
        b = a @ a
        y = b @ y
    return y


def main():
    torch.manual_seed(0)
    g = torch.randn(4096, 11008, device="cuda", dtype=torch.bfloat16)
    x = g / g.norm()
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "ns_ms": bench(lambda: ns_fused(g)), "ns_elementwise_ms": bench(lambda: ns_elementwise(g)),
           "matmul_ms": bench(lambda: matmuls(x))}
    out["ns_vs_matmul"] = out["ns_ms"] / out["matmul_ms"]
    out["elementwise_vs_matmul"] = out["ns_elementwise_ms"] / out["matmul_ms"]
    d = (ns_fused(g).float() - ns_elementwise(g).float()).abs().max().item()
    out["max_abs_diff_fused_vs_elementwise"] = d
    print(json.dumps(out))


if __name__ == "__main__":
    main()
