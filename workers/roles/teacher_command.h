// `tandem-worker teacher`: its flags (TeacherOptions, teacher_role.h) and its
// run (docs/inference.md "tandem-worker teacher"). Compiled into
// tandem-worker; in a build without LibTorch the subcommand exists and says
// so when run.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "workers/roles/teacher_role.h"

namespace tandem::roles {

class TeacherCommand {
 public:
  void Register(CLI::App& app, const std::string& summary);
  bool selected() const { return sub_ != nullptr && sub_->parsed(); }
  // Exit status: 0 stopped by a signal or the daemon, 1 failed (a log line says why), 2 bad options.
  int Run();

 private:
  CLI::App* sub_ = nullptr;
  TeacherOptions o_;
};

}  // namespace tandem::roles
