// `tandem-worker sft`: its flags (SftOptions, sft_options.h) and its run
// (docs/model.md, "sft"). Compiled into tandem-worker; in a build without
// LibTorch the subcommand exists (the table of common/native_workers.h
// lists it) and says so when run.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "workers/roles/sft_options.h"

namespace tandem::roles {

class SftCommand {
 public:
  void Register(CLI::App& app, const std::string& summary);
  bool selected() const { return sub_ != nullptr && sub_->parsed(); }
  // Exit status: 0 done, 1 failed (a log line says why), 2 bad options.
  int Run();

 private:
  CLI::App* sub_ = nullptr;
  SftOptions o_;
  std::string dataset_options_, eval_options_;
  int64_t hidden_ = 0, layers_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0, intermediate_ = 0;
};

}  // namespace tandem::roles
