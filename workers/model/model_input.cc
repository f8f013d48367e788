// Building the model's inputs (model_input.h): sequences -> packed forest
// and scoring pairs; the contiguous decode cache.
#include "workers/model/model_input.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "kernels/tree_attention/forest_builder.h"

namespace tandem::model {
namespace {

at::Tensor ToDevice(const std::vector<int64_t>& v, at::Device device) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::TensorOptions().dtype(at::kLong));
  std::copy(v.begin(), v.end(), t.data_ptr<int64_t>());
  return t.to(device);
}

}  // namespace

StatusOr<ForestBatch> BuildForestBatch(const std::vector<std::vector<int32_t>>& sequences,
                                       const std::vector<int32_t>& score_from, int64_t vocab_size,
                                       at::Device device) {
  if (sequences.empty()) return InvalidArgument("forest batch: no sequences");
  if (!score_from.empty() && score_from.size() != sequences.size())
    return InvalidArgument("forest batch: score_from has " + std::to_string(score_from.size()) +
                           " entries for " + std::to_string(sequences.size()) + " sequences");
  for (size_t s = 0; s < sequences.size(); ++s) {
    const auto& seq = sequences[s];
    if (seq.empty()) return InvalidArgument("forest batch: sequence " + std::to_string(s) + " is empty");
    for (size_t j = 0; j < seq.size(); ++j)
      if (seq[j] < 0 || seq[j] >= vocab_size)
        return InvalidArgument("forest batch: sequence " + std::to_string(s) + " token " + std::to_string(j) +
                               ": id " + std::to_string(seq[j]) + " outside the vocabulary [0, " +
                               std::to_string(vocab_size) + ")");
    const int64_t from = score_from.empty() ? 1 : score_from[s];
    if (from < 1 || from > static_cast<int64_t>(seq.size()))
      return InvalidArgument("forest batch: score_from[" + std::to_string(s) + "] = " + std::to_string(from) +
                             ", expected in [1, " + std::to_string(seq.size()) + "]");
  }
  TANDEM_ASSIGN_OR_RETURN(kernels::PackedForest packed, kernels::BuildPackedForest(sequences), "forest batch");

  ForestBatch b;
  std::vector<int64_t> tokens(packed.tokens.begin(), packed.tokens.end());
  std::vector<int64_t> labels;
  b.pair_offsets.push_back(0);
  for (size_t s = 0; s < sequences.size(); ++s) {
    const auto& seq = sequences[s];
    const int64_t from = score_from.empty() ? 1 : score_from[s];
    const int32_t* rows = packed.seq_positions.data() + packed.seq_offsets[s];
    for (int64_t i = from; i < static_cast<int64_t>(seq.size()); ++i) {
      b.pair_rows.push_back(rows[i - 1]);
      labels.push_back(seq[static_cast<size_t>(i)]);
    }
    b.pair_offsets.push_back(static_cast<int64_t>(labels.size()));
  }
  std::vector<int64_t> head = b.pair_rows;
  std::sort(head.begin(), head.end());
  head.erase(std::unique(head.begin(), head.end()), head.end());
  std::vector<int64_t> pair_head(b.pair_rows.size());
  for (size_t m = 0; m < b.pair_rows.size(); ++m)
    pair_head[m] = std::lower_bound(head.begin(), head.end(), b.pair_rows[m]) - head.begin();

  b.forest = ops::TreeForest::Create(std::move(packed.forest));
  b.tokens = ToDevice(tokens, device);
  b.positions = b.forest->position_ids().to(device);
  b.head_rows = ToDevice(head, device);
  b.pair_head = ToDevice(pair_head, device);
  b.labels = ToDevice(labels, device);
  b.seq_offsets = std::move(packed.seq_offsets);
  b.seq_positions = std::move(packed.seq_positions);
  return b;
}

KvCache KvCache::Empty(const ModelConfig& config, int64_t batch, at::Device device, at::ScalarType dtype) {
  KvCache c;
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    c.keys.push_back(at::empty({batch, 0, config.num_key_value_heads, config.head_dim}, opts));
    c.values.push_back(at::empty({batch, 0, config.num_key_value_heads, config.head_dim}, opts));
  }
  c.lengths = at::zeros({batch}, at::TensorOptions().dtype(at::kLong).device(device));
  return c;
}

void KvCache::Append(const std::vector<at::Tensor>& new_keys, const std::vector<at::Tensor>& new_values) {
  TORCH_CHECK(new_keys.size() == keys.size() && new_values.size() == values.size(),
              "KvCache::Append: one new key and value per layer expected, got ", new_keys.size(), " and ",
              new_values.size(), " for ", keys.size(), " layers");
  const int64_t b = batch();
  const int64_t need = lengths.max().item<int64_t>() + 1;
  const at::Tensor rows = at::arange(b, lengths.options());
  for (size_t l = 0; l < keys.size(); ++l) {
    TORCH_CHECK(new_keys[l].dim() == 3 && new_keys[l].size(0) == b && new_values[l].sizes() == new_keys[l].sizes(),
                "KvCache::Append: layer ", l, ": new keys/values must be [B, Hkv, D] with B = ", b);
    if (need > keys[l].size(1)) {
      const int64_t grow = need - keys[l].size(1);
      auto pad = [&](const at::Tensor& t) {
        return at::cat({t, at::zeros({b, grow, t.size(2), t.size(3)}, t.options())}, 1);
      };
      keys[l] = pad(keys[l]);
      values[l] = pad(values[l]);
    }
    keys[l].index_put_({rows, lengths}, new_keys[l].detach().to(keys[l].scalar_type()));
    values[l].index_put_({rows, lengths}, new_values[l].detach().to(values[l].scalar_type()));
  }
  lengths.add_(1);
}

}  // namespace tandem::model
