// Waiting for a model directory that another task of the job is making
// (`--wait-for-model S` of the actor, rollout and teacher; docs/rl.md "The
// quickstart"): the quickstart's sft task writes its base model while the
// others start. A directory counts as there once it holds config.json (sft
// stages the whole directory beside --out and renames it in, so config.json
// is never seen without its weights). Torch-free.
#pragma once

#include <string>

#include "common/status.h"

namespace tandem::roles {

// Ok at once when `dir`/config.json exists or timeout_s is 0; else polls
// every 100 ms, logging one line under `component`, and returns
// DeadlineExceeded naming the directory after timeout_s seconds.
Status WaitForModelDir(const std::string& dir, double timeout_s, const std::string& component);

}  // namespace tandem::roles
