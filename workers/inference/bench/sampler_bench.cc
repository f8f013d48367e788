// Time of one Sample() call (docs/inference.md "Sampling") on [B, V] fp32
// logits, greedy rows against filtered rows (temperature 0.7, top_p 0.9,
// top_k 50), on the CPU and, when present, on CUDA.
//   sampler_bench [vocab=151936] [reps=5]
#include <ATen/core/ivalue.h>  // first, for clang
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "workers/inference/sampler.h"

namespace {

double TimeMs(const at::Tensor& logits, const std::vector<tandem::inference::SampleSpec>& rows, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {  // the first is a warm-up
    const auto t0 = std::chrono::steady_clock::now();
    auto out = tandem::inference::Sample(logits, rows);
    if (!out.ok()) {
      std::fprintf(stderr, "%s\n", out.status().ToString().c_str());
      std::exit(1);
    }
    (void)out->tokens.to(at::kCPU);  // synchronises
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0 && ms < best) best = ms;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t vocab = argc > 1 ? std::atoll(argv[1]) : 151936;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<at::Device> devices{at::kCPU};
  if (at::hasCUDA()) devices.emplace_back(at::kCUDA);
  for (const at::Device dev : devices) {
    for (const int64_t b : {1, 64, 256}) {
      const at::Tensor logits = (at::randn({b, vocab}) * 3).to(dev);
      tandem::inference::SampleSpec greedy;
      greedy.temperature = 0;
      tandem::inference::SampleSpec filtered;
      filtered.temperature = 0.7;
      filtered.top_p = 0.9;
      filtered.top_k = 50;
      std::printf("%s B=%lld V=%lld: greedy %.2f ms, filtered %.2f ms\n", dev.is_cpu() ? "cpu" : "cuda",
                  static_cast<long long>(b), static_cast<long long>(vocab),
                  TimeMs(logits, std::vector<tandem::inference::SampleSpec>(static_cast<size_t>(b), greedy), reps),
                  TimeMs(logits, std::vector<tandem::inference::SampleSpec>(static_cast<size_t>(b), filtered), reps));
    }
  }
  return 0;
}
