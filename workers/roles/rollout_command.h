// `tandem-worker rollout`: its flags (RolloutOptions, rollout_role.h) and its
// run (docs/inference.md "tandem-worker rollout"). Compiled into
// tandem-worker; in a build without LibTorch the subcommand exists (the table
// of common/native_workers.h lists it) and says so when run.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "workers/roles/rollout_role.h"

namespace tandem::roles {

class RolloutCommand {
 public:
  void Register(CLI::App& app, const std::string& summary);
  bool selected() const { return sub_ != nullptr && sub_->parsed(); }
  // Exit status: 0 stopped by a signal, 1 failed (a log line says why), 2 bad options.
  int Run();

 private:
  CLI::App* sub_ = nullptr;
  RolloutOptions o_;
};

}  // namespace tandem::roles
