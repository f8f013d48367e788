"""The teacher's /score on the GPU against transformers (issue #14 item 6).

Usage: teacher_check.py TANDEM_WORKER MODEL_DIR WORK_DIR [--bench]

Starts `tandem-worker teacher --device cuda` on MODEL_DIR (bf16), scores 16
sequences of 8..600 tokens (two groups of four sharing a 300-token prompt,
eight alone) with top_logprobs_num 5, and compares each token's log-prob
with transformers' bf16 forward and with its fp32 forward over the same
bf16 weights. Prints the largest and mean absolute differences, and the
share of positions whose top-1 token agrees with transformers' fp32; fails
when the teacher is further from fp32 than 2x transformers' own bf16 error
(plus 0.02). With --bench, also a GRPO-shaped workload (32 prompts of 512
tokens x 8 responses of 256): /score's scored tokens/s (the prompts shared
as tries) against transformers' bf16 forward over the same sequences
(batches of 8 padded-free equal-length rows, log_softmax of the scored
positions), each the best of 3 after a warm-up. Stops the worker by pid.
"""
import json, os, random, signal, subprocess, sys, time, urllib.request

import torch
from transformers import AutoModelForCausalLM


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def hf_logprobs(model, seq):
    ids = torch.tensor([seq], device="cuda")
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    lp = torch.log_softmax(logits[:-1], -1)
    return lp.gather(1, ids[0, 1:, None])[:, 0].cpu(), lp.argmax(-1).cpu()


def bench(port, model, vocab, rng, prompts=32, n=8, plen=512, rlen=256):
    seqs = []
    for _ in range(prompts):
        p = [rng.randrange(vocab) for _ in range(plen)]
        seqs += [p + [rng.randrange(vocab) for _ in range(rlen)] for _ in range(n)]
    body = {"input_ids": seqs, "score_from": plen}
    scored = len(seqs) * rlen

    def tandem():
        t = time.time()
        post(port, "/score", body)
        return time.time() - t

    ids = torch.tensor(seqs, device="cuda")

    def hf():
        torch.cuda.synchronize()
        t = time.time()
        with torch.no_grad():
            for b in range(0, len(seqs), 8):
                x = ids[b:b + 8]
                logits = model(x).logits[:, plen - 1:-1].float()
                torch.log_softmax(logits, -1).gather(2, x[:, plen:, None])
        torch.cuda.synchronize()
        return time.time() - t

    tandem(), hf()
    t_tandem, t_hf = min(tandem() for _ in range(3)), min(hf() for _ in range(3))
    print(json.dumps({"workload": f"{prompts} prompts x {n} responses, {plen}+{rlen} tokens", "scored_tokens": scored,
                      "tandem_scored_tokens_per_s": round(scored / t_tandem), "hf_bf16_scored_tokens_per_s":
                      round(scored / t_hf), "ratio": round(t_hf / t_tandem, 2)}, indent=1))


def main():
    tool, model_dir, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    port_file = os.path.join(work, "teacher.port")
    if os.path.exists(port_file):
        os.remove(port_file)
    log = open(os.path.join(work, "teacher.log"), "w")
    proc = subprocess.Popen([tool, "teacher", "--model", model_dir, "--device", "cuda", "--port-file", port_file],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            if os.path.exists(port_file) or proc.poll() is not None:
                break
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])  # "PORT\nJOB\n"
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        rng = random.Random(0)
        vocab = min(cfg["vocab_size"], 150000)
        seqs = []
        for g in range(2):
            prompt = [rng.randrange(vocab) for _ in range(300)]
            seqs += [prompt + [rng.randrange(vocab) for _ in range(rng.randrange(8, 300))] for _ in range(4)]
        seqs += [[rng.randrange(vocab) for _ in range(rng.randrange(8, 600))] for _ in range(8)]
        t0 = time.time()
        got = post(port, "/score", {"input_ids": seqs, "top_logprobs_num": 5})
        elapsed = time.time() - t0
        bf16 = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
        fp32 = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).float().cuda().eval()
        d_teacher, d_hf, top_agree, n = [], [], 0, 0
        for s, r in zip(seqs, got["results"]):
            ref, ref_top = hf_logprobs(fp32, s)
            hf, _ = hf_logprobs(bf16, s)
            mine = torch.tensor(r["token_logprobs"])
            d_teacher.append((mine - ref).abs())
            d_hf.append((hf - ref).abs())
            top = torch.tensor([row[0][1] for row in r["top_logprobs"]])
            top_agree += int((top == ref_top).sum())
            n += len(top)
        dt, dh = torch.cat(d_teacher), torch.cat(d_hf)
        summary = {"sequences": len(seqs), "input_tokens": got["meta_info"]["input_tokens"],
                   "score_seconds": round(elapsed, 3),
                   "teacher_vs_fp32": {"max": dt.max().item(), "mean": dt.mean().item()},
                   "hf_bf16_vs_fp32": {"max": dh.max().item(), "mean": dh.mean().item()},
                   "top1_agrees_with_fp32": top_agree / n}
        print(json.dumps(summary, indent=1))
        ok = summary["teacher_vs_fp32"]["mean"] <= 2 * summary["hf_bf16_vs_fp32"]["mean"] + 0.02
        print("[teacher_check]", "ok" if ok else "FAIL: further from fp32 than 2x transformers' bf16")
        if "--bench" in sys.argv:
            del fp32
            torch.cuda.empty_cache()
            bench(port, bf16, vocab, rng)
        return 0 if ok else 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
