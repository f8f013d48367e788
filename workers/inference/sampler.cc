// Batched filtered sampling with counter-based draws (sampler.h).
#include <ATen/core/ivalue.h>  // first, for clang
#include "workers/inference/sampler.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <array>
#include <tuple>
#include <exception>
#include <string>

#include "workers/inference/device_copy.h"

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
// Rows whose top_k is at most this draw among at::topk's candidates
// instead of a full sort of the vocabulary.
constexpr int64_t kTopKPathMax = 1024;

// Which computation a row takes; decided by the row's own spec only, so a
// row's token never depends on its batch.
enum class Path { kGreedy, kPlain, kTopK, kSorted };

Path PathOf(const SampleSpec& r, int64_t vocab) {
  if (r.temperature < kGreedyBelow) return Path::kGreedy;
  const bool all_k = r.top_k < 1 || r.top_k >= vocab;
  if (all_k && r.top_p >= 1.0 && r.min_p <= 0.0) return Path::kPlain;
  if (!all_k && r.top_k <= kTopKPathMax) return Path::kTopK;
  return Path::kSorted;
}

struct RowParams {  // [R, 1] columns on the device
  at::Tensor temperature, top_p, min_p, top_k, u;
};

// The rows' parameters in two copies to the device (device_copy.h): the
// floats as one [4, R] block, top_k apart (int64).
RowParams Columns(const std::vector<SampleSpec>& specs, int64_t vocab, at::Device dev) {
  const size_t n = specs.size();
  std::vector<float> f(4 * n);
  std::vector<int64_t> k(n);
  for (size_t i = 0; i < n; ++i) {
    const SampleSpec& r = specs[i];
    f[i] = static_cast<float>(r.temperature);
    f[n + i] = static_cast<float>(r.top_p);
    f[2 * n + i] = static_cast<float>(r.min_p);
    f[3 * n + i] = SampleUniform(r.seed, r.sample_index, r.step);
    k[i] = r.top_k >= 1 && r.top_k < vocab ? r.top_k : vocab;
  }
  const at::Tensor cols = ToDevice(f, dev).view({4, static_cast<int64_t>(n), 1});
  return {cols[0], cols[1], cols[2], ToDevice(k, dev).unsqueeze(1), cols[3]};
}

// Inverse CDF: the first entry whose cumulative mass passes u * total,
// never past the last entry of positive mass (rounding at u -> 1).
// `mass` [R, C] >= 0; returns [R, 1] positions.
at::Tensor DrawPosition(const at::Tensor& mass, const at::Tensor& u) {
  const at::Tensor cdf = mass.cumsum(-1);
  const at::Tensor target = u * cdf.narrow(1, mass.size(1) - 1, 1);
  const at::Tensor rank = at::arange(mass.size(1), at::TensorOptions().dtype(at::kLong).device(mass.device()));
  const at::Tensor last = at::where(mass > 0, rank.unsqueeze(0), at::zeros_like(rank).unsqueeze(0)).amax(-1, true);
  return at::minimum((cdf <= target).sum(-1, /*keepdim=*/true), last);
}

// No filter: draw straight from softmax(logits / T) in id order.
at::Tensor DrawPlain(const at::Tensor& logits, const RowParams& c) {
  const at::Tensor probs = at::softmax(logits / c.temperature, -1);
  return DrawPosition(probs, c.u).squeeze(1);
}

// Filters over the candidates in descending probability (ties: lowest id
// first); `candidates` < V takes the top ones, else all of the vocabulary.
at::Tensor DrawFiltered(const at::Tensor& logits, const RowParams& c, int64_t candidates) {
  const at::Tensor probs = at::softmax(logits / c.temperature, -1);
  at::Tensor sorted, order;
  if (candidates < logits.size(1)) {
    // at::topk leaves open which of equal values it keeps: rank by one
    // integer key instead, the probability's bits (>= 0, so ordered as
    // integers) above V - 1 - id, so equal probabilities rank lowest id first.
    const int64_t v = logits.size(1);
    const at::Tensor id_desc =
        (v - 1) - at::arange(v, at::TensorOptions().dtype(at::kLong).device(probs.device())).unsqueeze(0);
    const at::Tensor key = probs.contiguous().view(at::kInt).to(at::kLong) * (int64_t{1} << 32) + id_desc;
    order = std::get<1>(at::topk(key, candidates, -1, /*largest=*/true, /*sorted=*/true));
    sorted = probs.gather(1, order);
  } else {
    std::tie(sorted, order) = at::sort(probs, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
  }
  const at::Tensor exclusive = sorted.cumsum(-1) - sorted;
  const at::Tensor rank = at::arange(sorted.size(1), at::TensorOptions().dtype(at::kLong).device(sorted.device())).unsqueeze(0);
  at::Tensor keep = rank < c.top_k;
  keep = keep & ((exclusive < c.top_p) | (c.top_p >= 1.0));
  keep = keep & (sorted >= c.min_p * sorted.narrow(1, 0, 1));
  keep = keep | (rank == 0);
  return order.gather(1, DrawPosition(sorted * keep, c.u)).squeeze(1);
}

SamplerOutput SampleOnDevice(const at::Tensor& logits, const std::vector<SampleSpec>& rows) {
  const int64_t vocab = logits.size(1);
  const at::Device dev = logits.device();
  std::vector<int64_t> plain, topk, full;
  int64_t k_max = 1;
  bool greedy = false;
  for (size_t b = 0; b < rows.size(); ++b) {
    const Path path = PathOf(rows[b], vocab);
    greedy = greedy || path == Path::kGreedy;
    if (path == Path::kPlain) plain.push_back(static_cast<int64_t>(b));
    if (path == Path::kTopK) {
      topk.push_back(static_cast<int64_t>(b));
      k_max = std::max(k_max, rows[b].top_k);
    }
    if (path == Path::kSorted) full.push_back(static_cast<int64_t>(b));
  }
  at::Tensor tokens = greedy ? logits.argmax(-1)  // first maximum: lowest id
                             : at::empty({logits.size(0)}, logits.options().dtype(at::kLong));
  auto run = [&](const std::vector<int64_t>& which, auto draw) {
    if (which.empty()) return;
    if (which.size() == rows.size()) {  // every row takes this path (the usual batch)
      tokens = draw(logits, Columns(rows, vocab, dev));
      return;
    }
    std::vector<SampleSpec> specs;
    for (const int64_t b : which) specs.push_back(rows[static_cast<size_t>(b)]);
    const at::Tensor index = ToDevice(which, dev);
    const at::Tensor drawn = draw(logits.index_select(0, index), Columns(specs, vocab, dev));
    tokens.index_copy_(0, index, drawn);
  };
  run(plain, [](const at::Tensor& l, const RowParams& c) { return DrawPlain(l, c); });
  run(topk, [k_max](const at::Tensor& l, const RowParams& c) { return DrawFiltered(l, c, k_max); });
  run(full, [vocab](const at::Tensor& l, const RowParams& c) { return DrawFiltered(l, c, vocab); });
  // The log-prob of the drawn token under the distribution it was drawn
  // from, softmax(logits / T) (SGLang's default; a greedy row: T = 1).
  std::vector<float> t(rows.size());
  bool all_one = true;
  for (size_t b = 0; b < rows.size(); ++b) {
    t[b] = rows[b].temperature < kGreedyBelow ? 1.0F : static_cast<float>(rows[b].temperature);
    all_one = all_one && t[b] == 1.0F;
  }
  const at::Tensor scaled = all_one ? logits : logits / ToDevice(t, dev).unsqueeze(1);
  const at::Tensor logprobs = at::log_softmax(scaled, -1).gather(1, tokens.unsqueeze(1)).squeeze(1);
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
