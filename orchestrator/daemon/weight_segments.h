// The shared-memory weight segments a job's publishers leave behind
// (docs/weights.md "shm"): a publisher killed with SIGKILL or SIGTERM (a
// cancelled job) cannot unlink its versions, so the daemon does when the
// job ends. A segment is /dev/shm/tandem-<job>-<task>-v<N>, job and task
// ids with every byte outside [A-Za-z0-9._] replaced by '_' (an empty one
// is "_")
// (workers/weights/shm_segment.h SegmentPrefix: the same rule, kept in
// step by weight_segments_test). Only exact names of the job's own tasks
// are removed. Local-backend jobs only: the segments of tasks on other
// hosts are on those hosts.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "orchestrator/daemon/job_model.h"

namespace tandem::daemon {

// "tandem-<job>-<task>-v" (no leading '/': a file name in shm_dir).
std::string WeightSegmentPrefix(std::string_view job_id, std::string_view task_id);

// Removes shm_dir/<prefix><digits> for every task of `job`; returns how many.
size_t RemoveJobWeightSegments(const Job& job, const std::filesystem::path& shm_dir = "/dev/shm");

}  // namespace tandem::daemon
