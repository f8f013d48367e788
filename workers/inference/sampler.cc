// Batched filtered sampling with counter-based draws (sampler.h).
#include <ATen/core/ivalue.h>  // first, for clang
#include "workers/inference/sampler.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <array>
#include <exception>
#include <string>

namespace tandem::inference {
namespace {

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11), as in Random123 and cuRAND.
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53U, kM1 = 0xCD9E8D57U, kW0 = 0x9E3779B9U, kW1 = 0xBB67AE85U;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
  }
  return c;
}

// Temperatures below this are greedy (SGLang's _SAMPLING_EPS): logits / T
// would overflow.
constexpr double kGreedyBelow = 1e-6;

SamplerOutput SampleOnDevice(const at::Tensor& logits, const std::vector<SampleSpec>& rows) {
  const int64_t b_count = logits.size(0);
  const int64_t vocab = logits.size(1);
  const at::Device dev = logits.device();
  const at::Tensor greedy_choice = logits.argmax(-1);  // first maximum: lowest id
  bool all_greedy = true;
  std::vector<float> temperature(static_cast<size_t>(b_count)), top_p(temperature), min_p(temperature), u(temperature);
  std::vector<int64_t> top_k(static_cast<size_t>(b_count));
  std::vector<uint8_t> greedy(static_cast<size_t>(b_count));
  for (size_t b = 0; b < rows.size(); ++b) {
    const SampleSpec& r = rows[b];
    greedy[b] = r.temperature < kGreedyBelow ? 1 : 0;
    all_greedy = all_greedy && greedy[b] != 0;
    temperature[b] = greedy[b] != 0 ? 1.0F : static_cast<float>(r.temperature);
    top_p[b] = static_cast<float>(r.top_p);
    min_p[b] = static_cast<float>(r.min_p);
    top_k[b] = r.top_k >= 1 && r.top_k < vocab ? r.top_k : vocab;
    u[b] = SampleUniform(r.seed, r.sample_index, r.step);
  }
  at::Tensor tokens = greedy_choice;
  if (!all_greedy) {
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    auto column = [&](const std::vector<float>& v) { return at::tensor(v, f32).to(dev).unsqueeze(1); };
    const at::Tensor probs = at::softmax(logits / column(temperature), -1);
    const auto [sorted, order] = at::sort(probs, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
    const at::Tensor exclusive = sorted.cumsum(-1) - sorted;
    const at::Tensor rank = at::arange(vocab, at::TensorOptions().dtype(at::kLong).device(dev)).unsqueeze(0);
    const at::Tensor k = at::tensor(top_k, at::TensorOptions().dtype(at::kLong)).to(dev).unsqueeze(1);
    const at::Tensor p = column(top_p);
    at::Tensor keep = rank < k;
    keep = keep & ((exclusive < p) | (p >= 1.0));
    keep = keep & (sorted >= column(min_p) * sorted.narrow(1, 0, 1));
    keep = keep | (rank == 0);
    const at::Tensor cdf = (sorted * keep).cumsum(-1);
    const at::Tensor target = column(u) * cdf.narrow(1, vocab - 1, 1);
    // The kept tokens are a prefix of the sorted order: the first whose CDF
    // passes the target, never past the last kept (rounding at u -> 1).
    const at::Tensor last_kept = keep.sum(-1, /*keepdim=*/true) - 1;
    const at::Tensor pos = at::minimum((cdf <= target).sum(-1, /*keepdim=*/true), last_kept);
    const at::Tensor drawn = order.gather(1, pos).squeeze(1);
    const at::Tensor is_greedy = at::tensor(std::vector<int64_t>(greedy.begin(), greedy.end()),
                                            at::TensorOptions().dtype(at::kLong)).to(dev) != 0;
    tokens = at::where(is_greedy, greedy_choice, drawn);
  }
  const at::Tensor logprobs = at::log_softmax(logits, -1).gather(1, tokens.unsqueeze(1)).squeeze(1);
  return SamplerOutput{tokens, logprobs};
}

}  // namespace

float SampleUniform(uint64_t seed, int64_t sample_index, int64_t step) {
  const auto si = static_cast<uint64_t>(sample_index);
  const auto st = static_cast<uint64_t>(step);
  const std::array<uint32_t, 4> out =
      Philox4x32({static_cast<uint32_t>(si), static_cast<uint32_t>(si >> 32), static_cast<uint32_t>(st),
                  static_cast<uint32_t>(st >> 32)},
                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return static_cast<float>(out[0] >> 8) * (1.0F / 16777216.0F);
}

StatusOr<SamplerOutput> Sample(const at::Tensor& logits, const std::vector<SampleSpec>& rows) {
  if (!logits.defined() || logits.dim() != 2 || logits.size(1) < 1)
    return InvalidArgument("sampler: logits must be [B, V >= 1]");
  if (logits.scalar_type() != at::kFloat)
    return InvalidArgument(std::string("sampler: logits must be fp32, got ") + c10::toString(logits.scalar_type()));
  if (static_cast<int64_t>(rows.size()) != logits.size(0))
    return InvalidArgument("sampler: " + std::to_string(rows.size()) + " sample specs for " +
                           std::to_string(logits.size(0)) + " logits rows");
  if (rows.empty()) {
    const auto opts = at::TensorOptions().device(logits.device());
    return SamplerOutput{at::empty({0}, opts.dtype(at::kLong)), at::empty({0}, opts.dtype(at::kFloat))};
  }
  try {
    c10::NoGradGuard no_grad;
    return SampleOnDevice(logits.contiguous(), rows);
  } catch (const std::exception& e) {
    return Internal(std::string("sampler: ") + e.what());
  }
}

}  // namespace tandem::inference
