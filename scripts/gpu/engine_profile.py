#!/usr/bin/env python3
"""Where a decode step of the rollout engine spends its time (issue #14,
"Performance"; docs/benchmarks.md "The rollout engine, decode").

The model of engine_bench.py (same config and seed: TANDEM_ENGINE_MODEL=3b
works here too), B prompts of 512 tokens, NEW greedy tokens, through
`tandem-generate --cuda-graphs auto --repeat 2 --profile`: the second run
under LibTorch's Kineto profiler. Prints, per batch size:
  * the engine thread's mean time per step by part (plan, launch, wait,
    commit: EngineStats), unprofiled (first run) and profiled;
  * the GPU's busy time per step (union of kernel intervals) against the
    wall time per step: the difference is the device idling on the host;
  * what each kernel adds to that busy time (model_profile.added_us: with
    dependent launches kernels overlap, and their durations do not add up);
  * kernels per step, and GPU time by kernel class and by kernel name
    (model_profile.summarise).
The traces go gzipped to $OUT (TANDEM_PROFILE_TRACES=0: not).

Usage: engine_profile.py TANDEM_GENERATE WORKDIR [B ...]   (default: 1 64)
"""
import gzip
import json
import os
import shutil
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_bench  # noqa: E402  (the model config and prompt length)
import model_profile  # noqa: E402  (the trace summary)

NEW = 64


def main():
    tool, work = sys.argv[1], sys.argv[2]
    batches = [int(b) for b in sys.argv[3:]] or [1, 64]
    out_dir = os.environ.get("OUT", work)
    os.makedirs(work, exist_ok=True)
    cfg = engine_bench.config()
    model_dir = os.path.join(work, "bench_model")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(model_dir)
    gen = torch.Generator().manual_seed(1)
    for b in batches:
        prompts = torch.randint(0, cfg.vocab_size, (b, engine_bench.PROMPT), generator=gen).tolist()
        pfile, out = os.path.join(work, f"profile_{b}.json"), os.path.join(work, f"profile_{b}_out.json")
        trace = os.path.join(work, f"engine-trace-{b}.json")
        with open(pfile, "w") as f:
            json.dump({"prompts": prompts}, f)
        r = subprocess.run([tool, "--model", model_dir, "--prompts", pfile, "--out", out, "--device", "cuda",
                            "--max-new-tokens", str(NEW), "--kv-cache-mib", "16384", "--repeat", "2",
                            "--max-running", "512", "--max-step-tokens", "16384", "--cuda-graphs", "auto",
                            "--profile", trace], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(f"[profile] batch {b} failed rc={r.returncode}: {r.stderr[-1500:]}", flush=True)
            continue
        with open(out) as f:
            runs = json.load(f)["runs"]
        for label, run in (("unprofiled", runs[0]), ("profiled", runs[-1])):
            ms = run["step_ms"]
            print(f"[profile] batch {b} {label}: {run['steps']} steps, {1e3 * run['seconds'] / run['steps']:.3f} ms "
                  f"a step (wall); engine thread: plan {ms['plan']:.3f}, launch {ms['launch']:.3f}, wait "
                  f"{ms['wait']:.3f}, commit {ms['commit']:.3f} ms", flush=True)
        with open(trace) as f:
            kernels = model_profile.device_events(json.load(f)["traceEvents"])
        busy, steps = model_profile.busy_us(kernels), runs[-1]["steps"]
        print(f"[profile] batch {b}: GPU busy {busy / 1e3 / steps:.3f} ms a step of "
              f"{1e3 * runs[-1]['seconds'] / steps:.3f}; {len(kernels) / steps:.0f} kernels and copies a step",
              flush=True)
        added, count = model_profile.added_us(kernels)
        print(f"[profile] batch {b}: what each kernel adds to the busy time (ms a step, µs a launch, launches a step):",
              flush=True)
        for name, us in added.most_common(12):
            print(f"  {us / 1e3 / steps:8.3f} {us / count[name]:8.2f} {count[name] / steps:6.1f}  {name}")
        model_profile.summarise(trace, f"batch {b}", sys.stdout)
        if os.environ.get("TANDEM_PROFILE_TRACES", "1") != "0":
            with open(trace, "rb") as src, gzip.open(os.path.join(out_dir, f"engine-trace-{b}.json.gz"), "wb") as dst:
                shutil.copyfileobj(src, dst)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
