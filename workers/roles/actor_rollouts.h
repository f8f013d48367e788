// The actor's rollouts: where they listen and how a step's prompts reach
// them (docs/rl.md "The actor", "Faults"). Torch-free.
//
// A rollout writes its port file ("PORT\nJOB\n", rollout_port_file with
// {rank} replaced) once it listens. In a job, a file that names another job
// (a reused run dir keeps it) is waited past, never taken.
//
// GenerateOnAll spreads a call's prompts over the rollouts in contiguous
// chunks, asked in parallel, and returns the samples prompt-major. A
// rollout that is down or coming back (refused, reset, HTTP 503: a task the
// daemon restarts by on_fault "restart"), or that answers with samples of
// another weight version than the one the actor expects (a restarted
// rollout before recovery reloaded it), is asked again, at the port its
// file names by then, until --phase-timeout; a failed attempt's samples are
// dropped whole, so no sample is counted twice. Other errors (a malformed
// answer, a request timeout) end the call.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/roles/actor_options.h"
#include "workers/roles/rollout_client.h"

namespace tandem::roles {

// Calls `attempt` until it returns anything but Unavailable (a server down
// or coming back, or an answer it chose to ask again about), for at most
// --phase-timeout: between tries (250 ms) the port `port_file` names by
// then is put in *endpoint. Past the deadline: Unavailable naming `who`,
// the last reason and the tries.
Status AskAgainWhileDown(const ActorOptions& o, const std::string& job, const std::string& port_file,
                         RolloutEndpoint* endpoint, const std::string& who, const std::function<Status()>& attempt);

// rollout_port_file for replica `rank`.
std::string RolloutPortFile(const ActorOptions& o, int64_t rank);

// Waits up to --phase-timeout for the port file at `path` (`what`: whose,
// for the error).
StatusOr<int> WaitForPortFile(const ActorOptions& o, const std::string& path, const std::string& job,
                              const std::string& what);

// Waits up to --phase-timeout for every rollout's port file.
StatusOr<std::vector<RolloutEndpoint>> WaitForRollouts(const ActorOptions& o, const std::string& job);

// `version`: the weight version every sample must come from (< 0: any).
StatusOr<std::vector<RolloutSample>> GenerateOnAll(const ActorOptions& o, const std::string& job,
                                                   std::vector<RolloutEndpoint>& rollouts,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   const GenerateCall& shape, int64_t version,
                                                   std::chrono::milliseconds timeout);

}  // namespace tandem::roles
