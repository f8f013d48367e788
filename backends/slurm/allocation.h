// What Slurm gave an allocation (issue #5, allocation mode;
// docs/slurm.md): its job id, nodes and GPUs.
//
// Inside an allocation (SLURM_JOB_ID set) tandem's device namespace is the
// allocation's GPUs: logical device i of a job is the i-th GPU Slurm gave the
// allocation, and CUDA_VISIBLE_DEVICES carries that GPU's index as the
// allocation's processes see it. Without device cgroups (the test cluster)
// those are node indices ("2,3" for the second job on a node); with
// ConstrainDevices=yes Slurm renumbers from 0 and SLURM_JOB_GPUS still holds
// node indices while CUDA_VISIBLE_DEVICES holds 0..k-1. We take, in order:
// CUDA_VISIBLE_DEVICES of the allocation's own environment (what a process of
// the allocation sees), else SLURM_JOB_GPUS / SLURM_STEP_GPUS, else the
// `IDX:` list of `scontrol show job -d`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::backends::slurm {

struct Allocation {
  std::string job_id;
  std::vector<std::string> nodes;  // expanded hostlist
  std::vector<int> gpus;           // GPU ids as the allocation's processes see them
  // Per node, from the detail lines of `scontrol show job -d` ("Nodes=gpu[01-02]
  // ... GRES=gpu:8(IDX:0-7)"); empty when unknown (from the environment).
  std::map<std::string, std::vector<int>> node_gpus;
};

// From an allocation's environment (SLURM_JOB_ID, SLURM_JOB_NODELIST,
// CUDA_VISIBLE_DEVICES, SLURM_JOB_GPUS). NotFound when SLURM_JOB_ID is unset.
StatusOr<Allocation> AllocationFromEnvironment(const std::map<std::string, std::string>& env);

// From `scontrol show job -d <id>` (for a daemon outside the allocation:
// tests, submit mode). Node indices from the GRES `IDX:` field.
StatusOr<Allocation> QueryAllocation(const std::string& job_id);

// Parses the text of `scontrol show job -d` (one job). Exposed for tests.
StatusOr<Allocation> ParseScontrolJob(const std::string& text);

// The value of `Key=` in `scontrol show` output ("" when absent).
std::string ScontrolField(const std::string& text, const std::string& key);

}  // namespace tandem::backends::slurm
