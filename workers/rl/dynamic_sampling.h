// Dynamic sampling's filter (DAPO, docs/rl.md "Losses and advantages"): a
// group whose rewards are all equal (all correct, all wrong) has zero
// group-relative advantage and teaches the policy nothing, so DAPO drops it
// and samples more prompts until the batch is full (the controller's part).
//
// Kept: the groups with at least two distinct rewards. A group of one sample
// is dropped too (its advantage is zero, advantages.h); verl keeps such
// groups, which matters only for a rollout with n = 1. Empty groups (size 0)
// are dropped. Rewards are compared exactly, as read in float64.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "workers/rl/groups.h"

namespace tandem::rl {

struct KeptGroups {
  std::vector<int64_t> groups;  // indices into `groups` (0..G-1), ascending
  at::Tensor samples;           // [K] int64: the kept groups' samples in batch order, on the rewards' device
};

// `rewards` [B] (floating, finite) and `groups` of B samples.
StatusOr<KeptGroups> GroupsWithVariedRewards(const at::Tensor& rewards, const Groups& groups);

}  // namespace tandem::rl
