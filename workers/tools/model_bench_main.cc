// tandem-model-bench: forward+backward time of tandem's model on one
// GRPO-shaped batch (issue #13 "Performance"; docs/benchmarks.md "Model
// forward+backward"; scripts/gpu/model_bench.py compares it with
// transformers on the same weights in the same run).
//
//   tandem-model-bench --model DIR [--prompts 4] [--prompt-len 512]
//       [--group 8] [--response-len 512] [--mode packed|flat]
//       [--iters 5] [--warmup 2] [--device cuda|cpu] [--profile TRACE.json]
//
// The batch: `prompts` random prompts, each followed by `group` random
// responses; the loss is the mean negative log-prob of the response tokens
// through the chunked LM-head op (what GRPO's policy loss reads), then
// backward into the flat gradient buffer. --mode packed stores each prompt
// once (a trie); flat keeps every sequence whole. Prints one JSON line:
// seconds_per_step, tokens (the flat batch's), packed_tokens, pairs.
// --profile: after the timed steps, one more step under LibTorch's Kineto
// profiler (CPU ops and CUDA kernels), its Chrome trace written to the file
// (scripts/gpu/model_profile.py summarises it).
#include <ATen/core/ivalue.h>  // before ATen.h (clang 14, C++20)
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "workers/model/checkpoint.h"

namespace mdl = tandem::model;

namespace {

void Sync(const at::Device& d) {
#ifdef TANDEM_TORCH_CUDA
  if (d.is_cuda()) c10::cuda::device_synchronize();
#else
  (void)d;
#endif
}

int Run(std::map<std::string, std::string>& v) {
  const at::Device device = v["--device"] == "cpu" ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0);
  const at::ScalarType dtype = device.is_cuda() ? at::kBFloat16 : at::kFloat;
  const int prompts = std::stoi(v["--prompts"]), plen = std::stoi(v["--prompt-len"]);
  const int group = std::stoi(v["--group"]), rlen = std::stoi(v["--response-len"]);
  const int iters = std::stoi(v["--iters"]), warmup = std::stoi(v["--warmup"]);
  auto model = mdl::LoadPretrained(v["--model"], device, dtype);
  if (!model.ok()) { std::cerr << "tandem-model-bench: " << model.status().ToString() << "\n"; return 1; }
  mdl::Transformer& m = **model;

  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(m.config().vocab_size - 1));
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int32_t> score_from;
  for (int p = 0; p < prompts; ++p) {
    std::vector<int32_t> prompt(plen);
    for (auto& t : prompt) t = tok(rng);
    for (int g = 0; g < group; ++g) {
      std::vector<int32_t> s = prompt;
      for (int r = 0; r < rlen; ++r) s.push_back(tok(rng));
      seqs.push_back(std::move(s));
      score_from.push_back(plen);  // the response tokens only
    }
  }
  auto batch = mdl::BuildForestBatch(seqs, score_from, m.config().vocab_size, device, v["--mode"] != "flat");
  if (!batch.ok()) { std::cerr << "tandem-model-bench: " << batch.status().ToString() << "\n"; return 1; }
  m.parameters().EnableGrad();
  auto step = [&] {
    m.parameters().ZeroGrad();
    mdl::ForestOutput out = m.Forward(*batch);
    at::Tensor loss = -out.logprob.sum() / static_cast<double>(batch->num_pairs());
    torch::autograd::backward({loss});
  };
  for (int i = 0; i < warmup; ++i) step();
  Sync(device);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) step();
  Sync(device);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  std::printf("{\"mode\": \"%s\", \"seconds_per_step\": %.6f, \"tokens\": %lld, \"packed_tokens\": %lld, "
              "\"pairs\": %lld}\n",
              v["--mode"].c_str(), sec, static_cast<long long>(prompts) * group * (plen + rlen),
              static_cast<long long>(batch->num_tokens()), static_cast<long long>(batch->num_pairs()));
  if (!v["--profile"].empty()) {
    namespace prof = torch::profiler::impl;
    const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
    const std::set<prof::ActivityType> activities{prof::ActivityType::CPU, prof::ActivityType::CUDA};
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
    step();
    Sync(device);
    torch::autograd::profiler::disableProfiler()->save(v["--profile"]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> v = {{"--model", ""},     {"--prompts", "4"},   {"--prompt-len", "512"},
                                          {"--group", "8"},    {"--response-len", "512"}, {"--mode", "packed"},
                                          {"--iters", "5"},    {"--warmup", "2"},    {"--device", "cuda"},
                                          {"--profile", ""}};
  for (int i = 1; i < argc; i += 2) {
    if (!v.count(argv[i]) || i + 1 >= argc) {
      std::cerr << "tandem-model-bench: unknown flag or missing value: " << argv[i] << "\n";
      return 2;
    }
    v[argv[i]] = argv[i + 1];
  }
  if (v["--model"].empty()) { std::cerr << "tandem-model-bench: --model is required\n"; return 2; }
  try {
    return Run(v);
  } catch (const std::exception& e) {
    std::cerr << "tandem-model-bench: " << e.what() << "\n";
    return 1;
  }
}
