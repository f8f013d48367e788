// Steps a restarted daemon finds by name but cannot re-attach through their
// srun client (issue #5 item 4, recovery; docs/slurm.md "Restart"): the
// daemon was killed between starting a step and writing its .step.json. The
// submit executor writes an intent record (<exit_path>.step-intent.json: the
// batch job and the step's name) before it starts a step; on re-attach with
// an intent but no .step.json it finds out what became of the step
// (step_intent.h) and, when it runs or ran, adopts it here instead of
// starting the task a second time.
//
// An adopted step is watched from a worker: every `poll` the step is looked
// up by name; once it is gone, its exit comes from the exit record tandem-exec
// wrote inside the step (newer than the intent). Without one (Slurm or an
// outside scancel ended the step, its node died) the exit has
// status_known=false (or SIGKILL when Kill was called) and a detail naming
// the step and Slurm's banner from the task's stderr or srun's log
// ("slurm: STEP 12.3 ON vm CANCELLED AT ...; step T.x ended with no exit
// record"); the submit executor appends the batch job's state. Signal and
// Kill go to the step through scancel (step_control.h).
// All calls return at once; blocking work runs on `workers`, exits are
// posted to `io`.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "backends/executor.h"

namespace tandem::backends::slurm {

// Whether `exit_path` holds an exit record written at or after `since_ms`.
bool HasExitRecordSince(const std::filesystem::path& exit_path, int64_t since_ms);

class AdoptedSteps {
 public:
  // (task id, batch job id, how it ended), on the io thread.
  using ExitCallback = std::function<void(const std::string& task_id, const std::string& job_id, const TaskExit&)>;
  AdoptedSteps(boost::asio::io_context& io, boost::asio::thread_pool& workers, ExitCallback on_exit,
               std::chrono::milliseconds poll);
  ~AdoptedSteps();
  // Watches task `task_id`'s step; `since_ms`: when its intent was written
  // (an older exit record is another run's); `stderr_path`: the task's
  // stderr, where Slurm's end banner lands.
  void Adopt(const std::string& task_id, const std::string& job_id, const std::string& step_name,
             const std::filesystem::path& exit_path, const std::filesystem::path& stderr_path, int64_t since_ms);
  bool Has(const std::string& task_id) const { return steps_.count(task_id) > 0; }
  void Signal(const std::string& task_id, int sig);
  void Kill(const std::string& task_id);

 private:
  struct Step {
    std::string job_id, step_name;
    std::filesystem::path exit_path, stderr_path;
    int64_t since_ms = 0;
    bool killed = false;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  void Check(const std::string& task_id);

  boost::asio::io_context& io_;
  boost::asio::thread_pool& workers_;
  ExitCallback on_exit_;
  std::chrono::milliseconds poll_;
  std::map<std::string, Step> steps_;
  std::shared_ptr<std::atomic<bool>> stop_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace tandem::backends::slurm
