// The Qwen3 / Qwen3-MoE causal LM on LibTorch (docs/model.md "The model"):
// token embedding -> num_hidden_layers decoder layers (RMSNorm, GQA
// attention with per-head q_norm/k_norm and rotary at explicit positions,
// RMSNorm, dense SwiGLU or MoE MLP as config.IsMoeLayer says) -> final
// RMSNorm -> LM head (lm_head.weight, or the embedding when tied).
//
// Two input forms share every layer:
//   Forward(ForestBatch): a packed forest (training, scoring, prefill).
//     Attention is tree attention over the forest; the LM head is the
//     chunked LM-head loss op, which returns the log-prob of each (row,
//     label) pair and the entropy of each scored row at `temperature` —
//     full [T, V] logits are never built. Optionally the final hidden states
//     and every layer's K/V (prefill).
//   Decode(tokens, positions, cache): one new token per row against a
//     caller-owned contiguous KvCache; returns that position's full logits
//     [B, V] (fp32) and the new K/V per layer, which the caller appends
//     (KvCache::Append). Decoding is for inference: run it under
//     c10::NoGradGuard (it is differentiable, but nothing needs that).
//   DecodePaged(tokens, positions, PagedKv): the inference engine's step
//     over its paged KV cache (workers/model/paged_kv.h): one or a few new
//     tokens per sequence, their K/V written into the cache's blocks,
//     attention by the paged kernel (ops::PagedAttention). Forward only.
//
// Devices and dtypes: CPU with fp32, or CUDA with bf16 (builds with the ops'
// CUDA path, TANDEM_TORCH_CUDA). Autograd runs through everything: after
// parameters().EnableGrad(), a loss built from ForestOutput backpropagates
// into the flat gradient buffer. Forward and Decode are const and keep no
// state between calls; calls with tensors on another device, of another
// dtype or of wrong shapes throw c10::Error naming the argument. Not
// supported yet: sliding-window attention, rope scaling, attention biases,
// dropout, tensor/expert parallelism.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "workers/model/config.h"
#include "workers/model/layers.h"
#include "workers/model/model_input.h"
#include "workers/model/paged_kv.h"
#include "workers/model/parameter_set.h"

namespace tandem::model {

struct ForwardOptions {
  double temperature = 1.0;   // log-probs and entropy of softmax(logits / temperature); > 0
  int64_t chunk_rows = 1024;  // LM-head rows per chunk (bounds the CUDA workspace)
  bool return_hidden = false; // fill ForestOutput::hidden
  bool return_kv = false;     // fill ForestOutput::keys/values
  // > 0: fill ForestOutput::top_logprobs/top_ids with the top_k most likely
  // tokens of each pair's row (the teacher's /score). The logits of chunk_rows
  // rows at a time are built for it; not differentiable (run under
  // c10::NoGradGuard). At most vocab_size.
  int64_t top_k = 0;
  // More labels scored at the rows of some pairs (MOPD's teacher top-k:
  // the student's log-prob of each token the teacher ranks high at that
  // position): extra_pairs [E] int64, each a pair index in [0, M) whose row
  // is used, and extra_labels [E] int64 in [0, vocab_size), on the model's
  // device. Fills ForestOutput::extra_logprob, differentiable like logprob,
  // in the same LM-head call (a row's logits are built once for all its
  // labels). Both undefined (the default) or both defined.
  at::Tensor extra_pairs;
  at::Tensor extra_labels;
};

struct ForestOutput {
  at::Tensor logprob;  // [M] fp32: log p(label | row), ForestBatch pair order
  at::Tensor entropy;  // [M] fp32: entropy of the pair's row distribution
  at::Tensor hidden;   // [T, H] after the final norm, model dtype (return_hidden)
  std::vector<at::Tensor> keys, values;  // per layer [T, Hkv, D], packed order (return_kv)
  std::vector<RouterStats> router;       // one per MoE layer, in layer order
  at::Tensor top_logprobs;  // [M, top_k] fp32, descending (top_k > 0)
  at::Tensor top_ids;       // [M, top_k] int64, their token ids
  at::Tensor extra_logprob;  // [E] fp32: log p(extra_labels[e] | row of pair extra_pairs[e]) (extra_pairs)
};

struct DecodeOutput {
  at::Tensor logits;                             // [B, V] fp32
  std::vector<at::Tensor> new_keys, new_values;  // per layer [B, Hkv, D], model dtype
  std::vector<RouterStats> router;               // one per MoE layer
};

class Transformer {
 public:
  // A model of `config` with uninitialised parameters (load a checkpoint or
  // call InitRandom). InvalidArgument for an invalid config or an
  // unsupported (device, dtype): CPU takes kFloat, CUDA kBFloat16.
  // `parameter_buffer`, when defined, holds the parameters
  // (ParameterSet::Create; InvalidArgument when it does not fit): the rollout
  // puts them in its `weights` tagged-memory pool.
  static StatusOr<std::unique_ptr<Transformer>> Create(const ModelConfig& config, at::Device device,
                                                       at::ScalarType dtype, const at::Tensor& parameter_buffer = {});
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return config_; }
  at::Device device() const { return device_; }
  at::ScalarType dtype() const { return dtype_; }
  ParameterSet& parameters() { return params_; }
  const ParameterSet& parameters() const { return params_; }

  // HF's initialisation, reproducible from `seed` on every device: norms 1,
  // every other weight normal(0, std) drawn on the CPU in fp32.
  void InitRandom(uint64_t seed, double std = 0.02);

  ForestOutput Forward(const ForestBatch& batch, const ForwardOptions& options = {}) const;

  // tokens [B] int64 and positions [B] int64 (the new token's position id)
  // on the model's device; cache.keys/values one per layer [B, P, Hkv, D]
  // with lengths [B]: row b attends to its first lengths[b] cached entries
  // and to itself.
  DecodeOutput Decode(const at::Tensor& tokens, const at::Tensor& positions, const KvCache& cache) const;

  // tokens and positions [T] int64 on the model's device, packed sequence
  // by sequence (kv.q_lens[b] new tokens of sequence b; kv as
  // workers/model/paged_kv.h says, its pools in the model's dtype). Each
  // layer writes its new K/V (after k_norm and rotary) at kv.slot_mapping,
  // then attends through the block tables. Returns the logits [B, V] fp32
  // of each sequence's last new token, or with all_logits [T, V] of every
  // new token (chunked prefill, speculative checks); new_keys/new_values
  // stay empty (they are in the cache). Not differentiable: run it under
  // c10::NoGradGuard. Bad shapes, dtypes or devices throw c10::Error; bad
  // metadata throws on the CPU and gives NaN logits on CUDA
  // (ops::PagedAttention).
  DecodeOutput DecodePaged(const at::Tensor& tokens, const at::Tensor& positions, const PagedKv& kv,
                           bool all_logits = false) const;

 private:
  Transformer(ModelConfig config, at::Device device, at::ScalarType dtype);
  struct LayerWeights;
  const LayerWeights& Layer(int64_t l) const;
  at::Tensor HeadWeight() const;
  at::Tensor Embed(const at::Tensor& tokens, const char* fn) const;
  void TopLogprobs(const at::Tensor& rows, const at::Tensor& pair_head, const ForwardOptions& options,
                   ForestOutput& out) const;

  ModelConfig config_;
  at::Device device_;
  at::ScalarType dtype_;
  ParameterSet params_;
  at::Tensor inv_freq_;  // [D/2] fp32 on device_
  std::vector<std::unique_ptr<LayerWeights>> layers_;
};

}  // namespace tandem::model
