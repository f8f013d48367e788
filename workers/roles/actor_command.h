// `tandem-worker actor`: its flags (ActorOptions, actor_options.h) and its
// run (docs/rl.md "The actor"; worker_command.h).
#pragma once

#include <string>

#include "workers/roles/actor_options.h"
#include "workers/roles/worker_command.h"

namespace tandem::roles {

class ActorCommand final : public WorkerCommand {
 public:
  void Register(CLI::App& app, const std::string& summary) override;
  int Run() override;

 private:
  ActorOptions o_;
  std::string dataset_options_, eval_options_, objectives_, algorithm_, workflow_;
  bool no_tree_packing_ = false;
};

}  // namespace tandem::roles
