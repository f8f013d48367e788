// Groups of samples (docs/rl.md "Losses and advantages"): the responses drawn
// for one prompt form a group, and GRPO's baseline is the group's mean
// reward. A batch of B samples names its groups either as contiguous runs
// (`FromRuns({8, 8, 8})`: samples 0..7, 8..15, 16..23, the order a rollout
// returns prompts x G) or as a group-id tensor ([B] integers; samples with
// the same id form a group wherever they sit in the batch).
//
// Both give the same canonical form: each sample's group index 0..G-1 and
// each group's size and the caller's name for it (the run's index, or the
// id). Groups are numbered by first appearance in the batch. A run of size
// 0 is allowed (a prompt whose responses were all dropped) and keeps its
// index with size 0; it holds no sample.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace tandem::rl {

struct Groups {
  std::vector<int64_t> group_of_sample;  // [B]: index into sizes / names
  std::vector<int64_t> sizes;            // [G]
  std::vector<int64_t> names;            // [G]: run index (FromRuns) or id (FromIds)

  int64_t num_samples() const { return static_cast<int64_t>(group_of_sample.size()); }
  int64_t num_groups() const { return static_cast<int64_t>(sizes.size()); }

  // Runs of the given sizes covering exactly `num_samples` samples in order.
  // InvalidArgument when a size is negative or they do not sum to num_samples.
  static StatusOr<Groups> FromRuns(const std::vector<int64_t>& run_sizes, int64_t num_samples);
  // One group per distinct value of `ids` ([B], any integer dtype, any
  // device; copied to the host).
  static StatusOr<Groups> FromIds(const at::Tensor& ids);
};

// A Groups assembled by hand is consistent: every group index in range and
// the sizes counting the samples (InvalidArgument otherwise). The functions
// that take a Groups check it.
Status Validate(const Groups& groups);

}  // namespace tandem::rl
