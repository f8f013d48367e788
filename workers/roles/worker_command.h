// A LibTorch subcommand of tandem-worker (sft, rollout, teacher): it adds
// its flags to the app, and runs when the command line selected it.
// Compiled into tandem-worker itself; in a build without LibTorch each
// subcommand exists (the table of common/native_workers.h lists it) and
// says so when run. Exit status of Run: 0 done (or stopped by a signal or
// the daemon), 1 failed (a log line says why), 2 bad options.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace tandem::roles {

class WorkerCommand {
 public:
  virtual ~WorkerCommand() = default;
  virtual void Register(CLI::App& app, const std::string& summary) = 0;
  virtual int Run() = 0;
  bool selected() const { return sub_ != nullptr && sub_->parsed(); }

 protected:
  CLI::App* sub_ = nullptr;
};

}  // namespace tandem::roles
