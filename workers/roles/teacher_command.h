// `tandem-worker teacher`: its flags (TeacherOptions, teacher_role.h) and its
// run (docs/inference.md "tandem-worker teacher"; worker_command.h).
#pragma once

#include <string>

#include "workers/roles/teacher_role.h"
#include "workers/roles/worker_command.h"

namespace tandem::roles {

class TeacherCommand final : public WorkerCommand {
 public:
  void Register(CLI::App& app, const std::string& summary) override;
  int Run() override;

 private:
  TeacherOptions o_;
};

}  // namespace tandem::roles
