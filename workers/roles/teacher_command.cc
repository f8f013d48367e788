// Flags and run of `tandem-worker teacher` (teacher_command.h).
#include "workers/roles/teacher_command.h"

#include <iostream>

namespace tandem::roles {

void TeacherCommand::Register(CLI::App& app, const std::string& summary) {
  sub_ = app.add_subcommand("teacher", summary);
  AddServeFlags(*sub_, o_.serve);
  sub_->add_option("--max-batch-tokens", o_.max_batch_tokens, "input tokens per forward (a longer sequence runs alone)")
      ->capture_default_str();
  sub_->add_option("--max-waiting", o_.max_waiting, "queued requests before 503")->capture_default_str();
  sub_->add_option("--max-model-len", o_.max_model_len, "tokens per sequence at most (default: the model's)");
}

int TeacherCommand::Run() {
#if TANDEM_WORKER_WITH_ROLLOUT
  return ServeExitStatus("teacher", RunTeacher(o_));
#else
  std::cerr << "tandem-worker teacher: this build has no LibTorch model (TANDEM_WITH_TORCH)\n";
  return 1;
#endif
}

}  // namespace tandem::roles
