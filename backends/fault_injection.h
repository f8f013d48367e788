// Test-only fault injection, kept out of the backends' own logic (issue #12
// point 8; STYLE.md, the Ray anchor: a decorator adds fault injection without
// touching the implementation).
//
// Two parts, both inert unless a test arms them:
//   - FaultInjectingExecutor wraps any Executor and injects faults at its
//     interface: "<kind>.start.unavailable" makes Start answer Unavailable
//     (nothing started; the daemon retries), "<kind>.after_start" kills this
//     process right after the wrapped Start succeeded, before the caller can
//     journal the task.
//   - FaultPoints, a hook an executor calls at named points inside its own
//     work, where no wrapper can reach: the Slurm submit executor's
//     "slurm.after_submit" (Slurm accepted the batch job, its id is recorded
//     nowhere yet; this runs on the io thread after the asynchronous submit,
//     long after Start returned) and "slurm.after_step_start" (a step was
//     started, its .step.json not yet written; steps start whenever the batch
//     job runs, not inside Start). An executor given no FaultPoints (every
//     production configuration) has nothing to check.
//
// tandemd arms points from TANDEM_TEST_FAULTS="point[,point...]" only; no
// other process reads it. An armed crash point logs
//   [fault] point=P reached: killing tandemd <what>
// at warn level (flushed) and SIGKILLs its own process.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "backends/executor.h"

namespace tandem::backends {

class FaultPoints {
 public:
  // The points named in `spec` ("a,b,c"; spaces ignored). Errors for an
  // empty name or characters outside [a-z0-9._].
  static StatusOr<std::shared_ptr<const FaultPoints>> Parse(std::string_view spec);
  explicit FaultPoints(std::set<std::string> armed) : armed_(std::move(armed)) {}

  bool Armed(std::string_view point) const { return armed_.count(std::string(point)) > 0; }
  // When `point` is armed: logs it with `what` and SIGKILLs this process.
  void CrashIfArmed(std::string_view point, std::string_view what) const;
  const std::set<std::string>& armed() const { return armed_; }

 private:
  std::set<std::string> armed_;
};

// Wraps `inner` (not owned: it must outlive the wrapper). Every call is
// forwarded unchanged except where an armed point says otherwise (above).
class FaultInjectingExecutor final : public Executor {
 public:
  FaultInjectingExecutor(Executor& inner, std::shared_ptr<const FaultPoints> faults)
      : inner_(inner), faults_(std::move(faults)) {}

  std::string_view kind() const override { return inner_.kind(); }
  StatusOr<TaskRef> Start(const LaunchRequest& request) override;
  Status Signal(const TaskRef& ref, int sig) override { return inner_.Signal(ref, sig); }
  Status Kill(const TaskRef& ref) override { return inner_.Kill(ref); }
  Status Reattach(const TaskRef& ref) override { return inner_.Reattach(ref); }
  bool Alive(const TaskRef& ref) override { return inner_.Alive(ref); }

 private:
  Executor& inner_;
  std::shared_ptr<const FaultPoints> faults_;
};

}  // namespace tandem::backends
