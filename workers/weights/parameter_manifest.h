// A ParameterSet seen through a weight manifest (weight_manifest.h): the
// manifest a publisher's parameters are published under, the check that a
// reader's parameters can take a published version, and the copy into them
// (docs/weights.md "The manifest"; LibTorch).
//
// Contract:
//   * ManifestOf(version, params): one manifest buffer per params buffer
//     (its dtype and nbytes), one tensor per slot (parameter_set.h: HF names,
//     MoE experts stacked per layer) at its byte offset. Digest 0 (the
//     transport computes it). InvalidArgument for a non-float buffer.
//   * CheckReaderMatches(m, params): the published tensors are exactly the
//     reader's slots, with the same shapes; dtypes may differ (any of F32,
//     BF16, F16, F64 converts to the reader's; a non-float tensor is
//     refused). Errors name the tensor: a missing one, an unexpected one, a
//     shape that differs ("tensor \"model.norm.weight\": published shape [64],
//     this model has [32]").
//   * CopyIntoParameters(m, bytes, params): after CheckReaderMatches, copies
//     into the reader's existing buffers (same addresses): when the layouts
//     are identical (same dtypes, buffer sizes and offsets) one memcpy per
//     buffer (copy_ to a device buffer), else tensor by tensor, converting.
//     `bytes[b]` is buffer b of m, aligned to 256 bytes, in host memory or,
//     with `source` a CUDA device, in that device's memory (cuda-ipc: the
//     reader's mapping of the export). A device copy is queued on LibTorch's
//     current stream: the caller synchronises before it relies on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/status.h"
#include "workers/model/parameter_set.h"
#include "workers/weights/weight_manifest.h"

namespace tandem::weights {

StatusOr<WeightManifest> ManifestOf(int64_t version, const model::ParameterSet& params);
Status CheckReaderMatches(const WeightManifest& m, const model::ParameterSet& params);
Status CopyIntoParameters(const WeightManifest& m, std::span<const std::byte* const> bytes,
                          const model::ParameterSet& params, at::Device source = at::Device(at::kCPU));
// True when CopyIntoParameters takes the one-memcpy-per-buffer path.
bool SameLayout(const WeightManifest& m, const model::ParameterSet& params);

}  // namespace tandem::weights
