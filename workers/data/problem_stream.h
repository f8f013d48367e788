// The problems a trainer or a rollout draws, one after another
// (docs/model.md, "Data sets and rewards", "Sampling"): a data set, an
// optional prompt-length limit (prompt_filter.h) and a PromptSampler. For a
// bounded set the limit is applied up front and the sampler shuffles the
// problems that fit; for an unbounded set each draw that does not fit is
// passed over (at most kMaxSkippedDraws in a row, then an error). The cursor
// is the sampler's, so a stream restored from it gives the same problems.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "common/status.h"
#include "workers/data/dataset.h"
#include "workers/data/prompt_filter.h"
#include "workers/data/prompt_sampler.h"

namespace tandem::data {

class ProblemStream {
 public:
  static constexpr size_t kMaxSkippedDraws = 10'000;

  // `dataset` must outlive the stream. `resume`: a cursor saved from a
  // stream over the same data set and limit (else `seed` starts epoch 0).
  static StatusOr<ProblemStream> Create(const Dataset& dataset, uint64_t seed, std::optional<PromptLengthLimit> limit,
                                        const std::optional<SamplerCursor>& resume = std::nullopt);

  StatusOr<Problem> Next();
  SamplerCursor cursor() const { return sampler_.cursor(); }
  // Problems eligible (bounded sets), after filtering.
  std::optional<size_t> eligible() const;
  // How many the filter dropped up front (bounded) or passed over (unbounded).
  size_t dropped() const { return dropped_; }

 private:
  ProblemStream(const Dataset& d, std::optional<PromptLengthLimit> limit, std::optional<std::vector<size_t>> kept,
                PromptSampler sampler, size_t dropped)
      : dataset_(&d), limit_(std::move(limit)), kept_(std::move(kept)), sampler_(std::move(sampler)), dropped_(dropped) {}

  const Dataset* dataset_;
  std::optional<PromptLengthLimit> limit_;
  std::optional<std::vector<size_t>> kept_;  // bounded: the eligible indices
  PromptSampler sampler_;
  size_t dropped_;
};

}  // namespace tandem::data
