// Time of one Sample() call (docs/inference.md "Sampling") on [B, V] fp32
// logits for each of the sampler's paths (greedy, unfiltered, top-k
// candidates, full sort), on the CPU and, when present, on CUDA.
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
      struct Setting {
        const char* name;
        double temperature, top_p;
        int64_t top_k;
      } settings[] = {{"greedy", 0, 1, -1}, {"plain (T 1)", 1, 1, -1}, {"top_k 50 + top_p 0.9", 0.7, 0.9, 50},
                      {"top_p 0.9 (full sort)", 0.7, 0.9, -1}};
      std::printf("%s B=%lld V=%lld:", dev.is_cpu() ? "cpu" : "cuda", static_cast<long long>(b),
                  static_cast<long long>(vocab));
      for (const Setting& st : settings) {
        tandem::inference::SampleSpec spec;
        spec.temperature = st.temperature;
        spec.top_p = st.top_p;
        spec.top_k = st.top_k;
        std::printf("  %s %.2f ms", st.name,
                    TimeMs(logits, std::vector<tandem::inference::SampleSpec>(static_cast<size_t>(b), spec), reps));
      }
      std::printf("\n");
    }
  }
  return 0;
}
