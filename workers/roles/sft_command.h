// `tandem-worker sft`: its flags (SftOptions, sft_options.h) and its run
// (docs/model.md, "sft"; worker_command.h).
#pragma once

#include <string>

#include "workers/roles/sft_options.h"
#include "workers/roles/worker_command.h"

namespace tandem::roles {

class SftCommand final : public WorkerCommand {
 public:
  void Register(CLI::App& app, const std::string& summary) override;
  int Run() override;

 private:
  SftOptions o_;
  std::string dataset_options_, eval_options_;
  int64_t hidden_ = 0, layers_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0, intermediate_ = 0;
};

}  // namespace tandem::roles
