// Greedy decoding over the model's incremental-decode API (docs/model.md,
// "sft"): the evaluation path of sft, and a reference for the engine to
// come. Prompts of a batch advance in lock step, one position per step
// through Transformer::Decode with a contiguous KvCache: a row still in its
// prompt is fed its next prompt token, a row past it is fed the token it
// just chose (the argmax of the logits; ties go to the lowest id). A row
// stops at a stop token (not included in its output) or after
// max_new_tokens; rows that stopped idle until the batch is done. A
// prompt's result does not depend on the others of its batch (up to the
// floating-point order of batched products, which can flip a near tie).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "workers/model/transformer.h"

namespace tandem::inference {

struct GreedyOptions {
  int64_t max_new_tokens = 64;
  std::vector<int32_t> stop_tokens;
  int64_t batch_size = 64;  // prompts decoded together
};

// One continuation per prompt, in order. InvalidArgument for an empty
// prompt, a token outside the vocabulary, or prompt plus continuation longer
// than max_position_embeddings; Internal for a LibTorch error.
StatusOr<std::vector<std::vector<int32_t>>> GreedyDecode(const model::Transformer& model,
                                                         const std::vector<std::vector<int32_t>>& prompts,
                                                         const GreedyOptions& options);

}  // namespace tandem::inference
