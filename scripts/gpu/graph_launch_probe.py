#!/usr/bin/env python3
"""How long cudaGraphLaunch holds the host, by what the graph holds (issue
#14: the engine's decode graph of ~280 nodes took ~0.5 ms to launch on an
H100, the GPU idle meanwhile). Captures graphs of N nodes of a few kinds and
times replay() on the host (no sync inside the timed loop beyond one per
replay, after it returns)."""
import time

import torch

torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"


def launch_us(graph, reps=50):
    graph.replay()
    torch.cuda.synchronize()
    host = 0.0
    for _ in range(reps):
        t = time.perf_counter()
        graph.replay()
        host += time.perf_counter() - t
        torch.cuda.synchronize()
    return 1e6 * host / reps


def capture(body):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()  # warm up
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    return g


x = torch.zeros(1024, device=dev, dtype=torch.bfloat16)
h = torch.randn(1, 1024, device=dev, dtype=torch.bfloat16)
w = torch.randn(4096, 1024, device=dev, dtype=torch.bfloat16)
a = torch.zeros(4096, device=dev, dtype=torch.float32)
b = torch.zeros(4096, device=dev, dtype=torch.float32)
for n in (70, 140, 280, 560):
    g = capture(lambda: [x.add_(1) for _ in range(n)])
    print(f"{n:4d} elementwise kernels: {launch_us(g):7.1f} us", flush=True)
for n in (70, 280):
    g = capture(lambda: [torch.nn.functional.linear(h, w) for _ in range(n)])
    print(f"{n:4d} bf16 linear [1,1024]x[4096,1024]: {launch_us(g):7.1f} us", flush=True)
    def mixed():
        for i in range(n):
            x.add_(1)
            if i % 10 == 0:
                a.copy_(b)  # a device-to-device memcpy node
    g = capture(mixed)
    print(f"{n:4d} elementwise + {n // 10} memcpy nodes: {launch_us(g):7.1f} us", flush=True)
