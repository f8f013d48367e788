"""The summary the GPU job scripts print (run_rl.sh, run_mopd.sh,
run_agents.sh): for each job NAME whose OUT/NAME.metrics.jsonl exists
(gpu_run_job in lib.sh copies it there), its held-out evals, the number of
steps, the mean of every `seconds/`, `tokens/` and `episode/` metric over the
steps after the first (which warms up), and its base's sft evals when
OUT/NAME.sft.jsonl exists. Extra JSON files join as named entries. Writes
OUT/SUMMARY.json and prints one line per entry (its means, its last eval;
an extra's "mean" when it has one): only a few files under $OUT come back
from the device, and only the end of stdout does.

Usage: summarize_runs.py OUT SUMMARY NAME... [--with LABEL=FILE ...]
"""
import argparse
import json
import os

MEANS = ("seconds/", "tokens/", "episode/")


def summarize(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    evals = [{k: r[k] for k in r if k.startswith("eval/") or k == "step"} for r in rows if "eval/accuracy" in r]
    steps = [r for r in rows if "seconds/step" in r]
    steady = steps[1:] or steps
    keys = sorted({k for r in steady for k in r if k.startswith(MEANS) and isinstance(r[k], (int, float))})
    means = {k: sum(r.get(k, 0) for r in steady) / len(steady) for k in keys}
    return {"steps": len(steps), "steps_measured": len(steady), "means": means, "evals": evals}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("summary")
    ap.add_argument("names", nargs="+")
    ap.add_argument("--with", dest="extra", action="append", default=[], metavar="LABEL=FILE")
    a = ap.parse_args()
    res = {}
    for name in a.names:
        p = os.path.join(a.out, name + ".metrics.jsonl")
        if not os.path.exists(p):
            continue
        res[name] = summarize(p)
        s = os.path.join(a.out, name + ".sft.jsonl")
        if os.path.exists(s):
            res[name]["sft"] = [json.loads(line) for line in open(s) if line.strip()]
    for item in a.extra:
        label, _, path = item.partition("=")
        if os.path.exists(path):
            res[label] = json.load(open(path))
    json.dump(res, open(os.path.join(a.out, a.summary + ".json"), "w"), indent=1)
    for label, r in res.items():
        line = {"steps_measured": r.get("steps_measured"), "means": r.get("means", r.get("mean"))}
        if r.get("evals"):
            line["last_eval"] = r["evals"][-1]
        print(label + ": " + json.dumps(line, separators=(",", ":"), default=str)[:1500])


if __name__ == "__main__":
    main()
