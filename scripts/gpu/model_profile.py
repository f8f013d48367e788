#!/usr/bin/env python3
"""Where tandem's forward+backward step spends its GPU time (issue #13,
"Performance"; docs/benchmarks.md "The model").

Builds the two benchmark models of model_bench.py (same configs, same seed),
saves them, runs `tandem-model-bench --profile` (one step under LibTorch's
Kineto profiler after the warm-up) in flat and packed mode, and summarises
each Chrome trace:
  * the step's wall time and the GPU's busy time (union of kernel
    intervals): their difference is launch/CPU overhead;
  * GPU time per kernel class (GEMM, tandem's kernels, elementwise glue,
    reductions, copies/casts, ...);
  * GPU time per launching ATen op, forward and backward apart (the
    backward ones named by their autograd node);
  * the top kernels by name.
The traces go gzipped to $OUT for a closer look (TANDEM_PROFILE_TRACES=0:
not).

Usage: model_profile.py TANDEM_MODEL_BENCH WORKDIR [MODEL ...]
"""
import bisect
import collections
import gzip
import json
import os
import shutil
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_bench  # noqa: E402  (the configs and batch shape)


def kernel_class(name):
    n = name.lower()
    if any(s in n for s in ("gemm", "sm90_xmma", "nvjet", "cutlass", "cublas", "wgmma")):
        return "gemm"
    if "tandem" in n or "tree" in n or "moe" in n or "lmhead" in n or "lm_head" in n:
        return "tandem kernels"
    if "reduce" in n:
        return "reductions"
    if "copy" in n or "cat" in n or "index" in n or "gather" in n or "scatter" in n:
        return "copies/cat/index"
    if "elementwise" in n or "vectorized" in n:
        return "elementwise"
    return "other"


def device_events(ev):
    """The kernels, copies and memsets of a Chrome trace's events."""
    return [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]


def busy_us(kernels):
    """Microseconds in which at least one of `kernels` ran (the union of their intervals)."""
    return sum(added_us(kernels)[0].values())


def added_us(kernels):
    """Microseconds each kernel name adds to the busy time, and its count: a
    kernel's interval past the end of every interval that started before it.
    Summed over names, the busy time: kernels that overlap (dependent
    launches wait resident) count once, where their plain durations do not."""
    added, count = collections.Counter(), collections.Counter()
    reach = float("-inf")
    for k in sorted(kernels, key=lambda k: k["ts"]):
        s, e = k["ts"], k["ts"] + k["dur"]
        added[k["name"][:110]] += max(0.0, e - max(s, reach))
        count[k["name"][:110]] += 1
        reach = max(reach, e)
    return added, count


def summarise(trace_path, label, out):
    with open(trace_path) as f:
        ev = json.load(f)["traceEvents"]
    kernels = device_events(ev)
    runtime = {e["args"].get("correlation"): e for e in ev
               if e.get("ph") == "X" and e.get("cat") == "cuda_runtime" and "args" in e}
    ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    by_tid = collections.defaultdict(list)
    for o in ops:
        by_tid[o["tid"]].append(o)
    starts = {}
    for tid, lst in by_tid.items():
        lst.sort(key=lambda o: o["ts"])
        starts[tid] = [o["ts"] for o in lst]

    def stack_at(tid, ts):
        lst = by_tid.get(tid, [])
        i = bisect.bisect_right(starts.get(tid, []), ts)
        st = [o for o in lst[max(0, i - 4000):i] if o["ts"] <= ts <= o["ts"] + o["dur"]]
        return st  # outer first (sorted by start)

    if not kernels:
        print(f"[profile] {label}: no kernels in the trace", file=out)
        return
    t0 = min(k["ts"] for k in kernels)
    t1 = max(k["ts"] + k["dur"] for k in kernels)
    busy = busy_us(kernels)
    total = sum(k["dur"] for k in kernels)
    print(f"[profile] {label}: {len(kernels)} kernels, GPU span {(t1 - t0) / 1e3:.1f} ms, busy {busy / 1e3:.1f} ms, "
          f"kernel sum {total / 1e3:.1f} ms", file=out)
    by_class = collections.Counter()
    by_name = collections.Counter()
    count_name = collections.Counter()
    by_op = collections.Counter()
    count_op = collections.Counter()
    for k in kernels:
        by_class[kernel_class(k["name"])] += k["dur"]
        nm = k["name"][:110]
        by_name[nm] += k["dur"]
        count_name[nm] += 1
        rt = runtime.get(k.get("args", {}).get("correlation"))
        key = "?"
        if rt is not None:
            st = stack_at(rt["tid"], rt["ts"])
            bwd = [o["name"] for o in st if o["name"].startswith("autograd::engine::evaluate_function")]
            aten = [o["name"] for o in st if not o["name"].startswith("autograd::")]
            inner = aten[-1] if aten else (st[-1]["name"] if st else "?")
            outer = aten[0] if aten else inner
            if bwd:
                key = "bwd " + bwd[-1].replace("autograd::engine::evaluate_function: ", "") + " > " + inner
            else:
                key = "fwd " + (outer if outer == inner else outer + " > " + inner)
        by_op[key] += k["dur"]
        count_op[key] += 1
    print(f"[profile] {label}: by kernel class (ms):", file=out)
    for c, d in by_class.most_common():
        print(f"    {d / 1e3:8.2f}  {100 * d / total:5.1f}%  {c}", file=out)
    print(f"[profile] {label}: by launching op (ms, kernels):", file=out)
    for c, d in by_op.most_common(45):
        print(f"    {d / 1e3:8.2f}  {count_op[c]:6d}  {c[:150]}", file=out)
    print(f"[profile] {label}: top kernels (ms, count):", file=out)
    for c, d in by_name.most_common(30):
        print(f"    {d / 1e3:8.2f}  {count_name[c]:6d}  {c}", file=out)


def main():
    tool, work = sys.argv[1], sys.argv[2]
    which = sys.argv[3:] or None
    out_dir = os.environ.get("OUT", work)
    os.makedirs(work, exist_ok=True)
    P, R, G, PROMPTS = model_bench.P, model_bench.R, model_bench.G, model_bench.PROMPTS
    for name, cfg in model_bench.configs().items():
        if which and name not in which:
            continue
        model_dir = os.path.join(work, name)
        if not os.path.exists(os.path.join(model_dir, "config.json")):
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
            model.save_pretrained(model_dir)
            del model
        for mode in ("flat", "packed"):
            trace = os.path.join(work, f"{name}-{mode}.json")
            r = subprocess.run([tool, "--model", model_dir, "--prompts", str(PROMPTS), "--prompt-len", str(P),
                                "--group", str(G), "--response-len", str(R), "--mode", mode, "--iters", "3",
                                "--warmup", "2", "--profile", trace], capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                print(f"[profile] {name} {mode} failed rc={r.returncode}: {r.stderr[-1500:]}", flush=True)
                continue
            step = json.loads(r.stdout.strip().splitlines()[-1])["seconds_per_step"]
            print(f"[profile] {name} {mode}: {step * 1e3:.1f} ms/step (timed, unprofiled)", flush=True)
            summarise(trace, f"{name} {mode}", sys.stdout)
            if os.environ.get("TANDEM_PROFILE_TRACES", "1") != "0":
                with open(trace, "rb") as src, \
                        gzip.open(os.path.join(out_dir, f"trace-{name}-{mode}.json.gz"), "wb") as dst:
                    shutil.copyfileobj(src, dst)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
