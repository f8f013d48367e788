// `tandem-worker rollout`: its flags (RolloutOptions, rollout_role.h) and its
// run (docs/inference.md "tandem-worker rollout"; worker_command.h).
#pragma once

#include <string>

#include "workers/roles/rollout_role.h"
#include "workers/roles/worker_command.h"

namespace tandem::roles {

class RolloutCommand final : public WorkerCommand {
 public:
  void Register(CLI::App& app, const std::string& summary) override;
  int Run() override;

 private:
  RolloutOptions o_;
};

}  // namespace tandem::roles
