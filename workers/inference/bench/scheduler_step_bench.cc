// Host cost of one engine step in the scheduler (docs/inference.md "KV
// blocks and the scheduler"): Plan + Commit with `batch` sequences decoding
// (GRPO-shaped: prompts of `prompt` tokens, n samples each, blocks of 16),
// against the time a decode step takes on the device. No model: the
// sampled tokens are made up.
//   scheduler_step_bench [batch=256] [n=8] [prompt=512] [steps=512]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "workers/inference/scheduler.h"

int main(int argc, char** argv) {
  using namespace tandem::inference;
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 256;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 8;
  const int64_t prompt = argc > 3 ? std::atoll(argv[3]) : 512;
  const int64_t steps = argc > 4 ? std::atoll(argv[4]) : 512;
  SchedulerOptions o;
  o.block_size = 16;
  o.max_model_len = prompt + steps + 1;
  o.num_blocks = static_cast<int32_t>(batch * ((o.max_model_len + 15) / 16) + 64);
  o.max_running = batch;
  o.max_step_tokens = 1 << 20;
  o.max_waiting = batch;
  auto s = Scheduler::Create(o);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
    return 1;
  }
  for (int64_t r = 0; r < batch / n; ++r) {
    GenerateRequest req;
    req.input_ids.assign(static_cast<size_t>(prompt), static_cast<int32_t>(r + 2));
    req.params.n = n;
    req.params.max_new_tokens = steps;
    req.params.seed = static_cast<uint64_t>(r);
    if (!(*s)->Add(req).ok()) return 1;
  }
  double plan_s = 0, commit_s = 0;
  int64_t timed = 0;
  for (int64_t step = 0; step < steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    auto plan = (*s)->Plan();
    const auto t1 = std::chrono::steady_clock::now();
    if (!plan.ok()) return 1;
    std::vector<SampledToken> tokens(plan->samples.size());
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i].token = static_cast<int32_t>((step * 131 + static_cast<int64_t>(i)) % 50000 + 2);
    const auto t2 = std::chrono::steady_clock::now();
    if (!(*s)->Commit(*plan, tokens).ok()) return 1;
    const auto t3 = std::chrono::steady_clock::now();
    if (step >= 2) {  // decode steps only
      plan_s += std::chrono::duration<double>(t1 - t0).count();
      commit_s += std::chrono::duration<double>(t3 - t2).count();
      ++timed;
    }
  }
  std::printf("batch %lld (n %lld, prompt %lld): Plan %.1f us/step, Commit %.1f us/step over %lld decode steps\n",
              static_cast<long long>(batch), static_cast<long long>(n), static_cast<long long>(prompt),
              1e6 * plan_s / static_cast<double>(timed), 1e6 * commit_s / static_cast<double>(timed),
              static_cast<long long>(timed));
  return 0;
}
