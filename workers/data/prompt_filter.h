// Prompt filtering by token length after the chat template (docs/model.md,
// "Data sets and rewards", "Filtering"). The data library does not know the
// tokenizer: the caller passes a TokenCounter, the number of tokens of a
// problem's prompt as the model will see it (chat template applied, the
// generation prompt included); the sft and rollout roles wire the real
// tokenizer in. Problems whose count exceeds the limit are dropped.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "common/status.h"
#include "workers/data/dataset.h"

namespace tandem::data {

using TokenCounter = std::function<size_t(const Problem&)>;

struct PromptLengthLimit {
  TokenCounter count;
  size_t max_tokens = 0;
  bool Admits(const Problem& p) const { return count(p) <= max_tokens; }
};

struct FilteredIndices {
  std::vector<size_t> kept;  // indices into the data set, ascending
  size_t dropped = 0;
  size_t longest_kept = 0;   // tokens of the longest prompt kept
};

// The problems of a bounded `dataset` within `limit`. InvalidArgument for an
// unbounded set (ProblemStream filters those as it draws) and when nothing
// is left ("no prompt of gsm8k fits in 16 tokens; the shortest has 40").
StatusOr<FilteredIndices> FilterByPromptLength(const Dataset& dataset, const PromptLengthLimit& limit);

}  // namespace tandem::data
