// `tandem-worker proxy`: the OpenAI-compatible proxy in front of a job's
// rollout replicas (docs/agents.md "tandem-worker proxy"); its flags
// (ProxyRoleOptions, workers/agents/proxy_role.h) and its run
// (worker_command.h). Torch-free: the role is tandem::agents.
#pragma once

#include <string>

#include "workers/agents/proxy_role.h"
#include "workers/roles/worker_command.h"

namespace tandem::roles {

class ProxyCommand final : public WorkerCommand {
 public:
  void Register(CLI::App& app, const std::string& summary) override;
  int Run() override;

 private:
  agents::ProxyRoleOptions o_;
};

}  // namespace tandem::roles
