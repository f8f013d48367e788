// Drawing problems through the filter and the sampler (problem_stream.h).
#include "workers/data/problem_stream.h"

#include <numeric>
#include <string>

namespace tandem::data {

StatusOr<ProblemStream> ProblemStream::Create(const Dataset& dataset, uint64_t seed, std::optional<PromptLengthLimit> limit,
                                              const std::optional<SamplerCursor>& resume) {
  std::optional<std::vector<size_t>> kept;
  size_t dropped = 0;
  std::optional<size_t> population;
  if (const std::optional<size_t> n = dataset.size()) {
    if (limit) {
      TANDEM_ASSIGN_OR_RETURN(FilteredIndices f, FilterByPromptLength(dataset, *limit));
      dropped = f.dropped;
      kept = std::move(f.kept);
    } else {
      kept.emplace(*n);
      std::iota(kept->begin(), kept->end(), size_t{0});
    }
    population = kept->size();
  }
  TANDEM_ASSIGN_OR_RETURN(PromptSampler sampler,
                          resume ? PromptSampler::Restore(population, *resume) : PromptSampler::Create(population, seed),
                          std::string(dataset.name()));
  return ProblemStream(dataset, std::move(limit), std::move(kept), std::move(sampler), dropped);
}

std::optional<size_t> ProblemStream::eligible() const {
  return kept_ ? std::optional<size_t>(kept_->size()) : std::nullopt;
}

StatusOr<Problem> ProblemStream::Next() {
  if (kept_) return dataset_->Get((*kept_)[sampler_.Next()]);
  for (size_t skipped = 0; skipped < kMaxSkippedDraws; ++skipped) {
    TANDEM_ASSIGN_OR_RETURN(Problem p, dataset_->Get(sampler_.Next()));
    if (!limit_ || limit_->Admits(p)) return p;
    ++dropped_;
  }
  return ResourceExhausted(std::string(dataset_->name()) + ": " + std::to_string(kMaxSkippedDraws) +
                           " draws in a row had prompts over " + std::to_string(limit_->max_tokens) + " tokens");
}

}  // namespace tandem::data
