// Port files: how a role's replica tells the rest of its job where it
// listens (a rollout's HTTP port for the actor; the actor's rank 0's
// rendezvous port for its other replicas). Torch-free.
//
// A port file is "PORT\nJOB\n", JOB being $TANDEM_JOB_ID (empty outside a
// job), written atomically (a temporary file renamed). A reused run dir
// keeps an earlier job's files: a reader of this job waits past them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::roles {

// $TANDEM_PORTS (the ports tandem leased to this task, comma-separated):
// empty when it is unset or empty; InvalidArgument naming an entry that is
// not a port.
StatusOr<std::vector<int>> LeasedPorts();
// The first of them, 0 when there is none.
StatusOr<int> FirstLeasedPort();

// Writes `port` and $TANDEM_JOB_ID to `path`; Internal naming the path when
// it cannot.
Status WritePortFile(const std::string& path, int port);

// The port in `path`, or nullopt while there is none of `job` (empty: any).
// `seen_job`: the job a file named, when it named another. InvalidArgument
// when the file's port is outside [1, 65535].
StatusOr<std::optional<int>> ReadPortFile(const std::string& path, const std::string& job, std::string* seen_job);

}  // namespace tandem::roles
