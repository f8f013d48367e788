// Loading and saving a Transformer as a Hugging Face model directory
// (docs/model.md "Checkpoints"): config.json plus model.safetensors, or
// model.safetensors.index.json and its shards (the format is
// workers/model/safetensors.h's).
//
// LoadPretrained(dir, device, dtype): reads config.json (config.h), opens the
// weights, creates the model and copies every HF-named parameter into its
// view, converting F32 / BF16 / F16 / F64 to `dtype` on the way. Every
// parameter must be present with its exact shape, and the checkpoint may
// hold nothing else (a tied model's lm_head.weight, which some writers keep,
// is the one tolerated extra and is ignored). Errors are values naming the
// directory or file and the tensor: NotFound for a missing config.json, weight
// file or tensor; InvalidArgument for a bad config, a wrong shape, a
// non-float dtype or an unexpected tensor.
//
// SavePretrained(model, dir, options): writes the weights (in the model's
// dtype unless options.dtype says otherwise; sharded above
// options.max_shard_bytes, as huggingface_hub does) and then config.json
// (ToHfJson, its dtype set to the saved one), each file atomically. Saving
// copies each parameter to the host, one tensor at a time held until the
// files are written (the model's size in host memory).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "workers/model/safetensors.h"
#include "workers/model/transformer.h"

namespace tandem::model {

StatusOr<std::unique_ptr<Transformer>> LoadPretrained(const std::string& dir, at::Device device,
                                                      at::ScalarType dtype);

// A safetensors dtype as LibTorch's and back (the float types: F64, F32,
// F16, BF16; nullopt for any other).
std::optional<at::ScalarType> TorchType(DType t);
std::optional<DType> DTypeOf(at::ScalarType t);

// Copies the weights of an opened checkpoint into `model` (same rules),
// every check before the first copy (a refused checkpoint writes nothing).
// The ParameterSet form is for parameters without a Transformer (a weight
// reader's); a checkpoint's lm_head.weight is a tied copy when `params`
// has none.
Status LoadWeights(Transformer& model, const SafetensorsCheckpoint& checkpoint);
Status LoadWeights(const ParameterSet& params, const SafetensorsCheckpoint& checkpoint);

struct SaveOptions {
  uint64_t max_shard_bytes = 5ull << 30;
  std::optional<ConfigDtype> dtype;  // default: the parameters' dtype
  std::map<std::string, std::string> metadata;  // safetensors __metadata__
};

Status SavePretrained(const Transformer& model, const std::string& dir, const SaveOptions& options = {});
// The same for parameters laid out by `config` (ParameterSet::Create).
Status SavePretrained(const ParameterSet& params, const ModelConfig& config, const std::string& dir,
                      const SaveOptions& options = {});

}  // namespace tandem::model
