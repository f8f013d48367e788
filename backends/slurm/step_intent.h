// Deciding what became of a step a killed daemon meant to start (issue #5
// follow-up, "re-attach robustness"; docs/slurm.md "Restart"). Submit mode
// writes an intent record (<exit_path>.step-intent.json: batch job, step
// name, time) before it spawns srun, and .step.json (the srun client's pid)
// after. A restarted daemon that finds an intent but no .step.json does not
// know whether the step runs, ran, is still being created, or never started.
// The rule it keeps: a task never runs twice, and "never started" never
// hangs.
//
// Evidence, looked at in this order every `poll` on a worker (ProbeIntent):
//   1. live srun clients of the step: processes whose command line names it
//      (srun_client.h; the name is chosen before the spawn);
//   2. the step itself in squeue (by name; a squeue that fails proves nothing);
//   3. the exit record tandem-exec writes in the step (newer than the intent);
//   4. srun's own exit record (<exit_path>.srun.json, written by the local
//      exec shim when the srun client ends).
// The verdict (DecideIntent, pure, tested as a table):
//   step live or exit record            -> adopt it (adopted_step.h)
//   srun client alive, no step yet      -> wait: it is being created; after
//        `create_wait` (or when the task is killed) SIGTERM the client (srun
//        then cancels what it is creating), after `term_grace` SIGKILL it;
//        keep looking until it is gone
//   no client, no step, no record       -> never started: start it again
//   ... but srun's record says it ended while no daemon watched (and no
//        client was seen alive by this daemon) -> it may have run: the task
//        ends with status_known=false, it is not started again.
// The srun client is looked for before the step, so "no client" means no
// client can still create one.
//
// IntentResolver runs that loop per task from the io thread: probes on
// `workers`, decisions and timers on `io`, the outcome posted as a callback
// there. Nothing blocks the io thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "backends/local/proc_table.h"

namespace tandem::backends::slurm {

// The intent record's content.
struct StepIntent {
  std::string job_id;     // the batch job the step was started in
  std::string step_name;  // srun --job-name
  int64_t at_ms = 0;      // written just before srun was spawned (epoch ms)
};

// One look at an intent's step (blocks: /proc scan, squeue, two files).
struct IntentProbe {
  std::vector<local::ProcStat> clients;  // live srun client processes of the step
  bool squeue_ok = true;                 // squeue answered
  std::string step;                      // "J.S" while the step is live
  bool exit_record = false;              // the step's exit record, newer than the intent
  std::optional<std::string> srun_ended; // srun's own record newer than the intent: how it ended
};
// Takes a probe after sending `signal_clients` (0: none) to the live clients.
IntentProbe ProbeIntent(const StepIntent& intent, const std::filesystem::path& exit_path, int signal_clients);

enum class IntentVerdict {
  kWait,          // look again after `poll`
  kAdopt,         // the step runs or ran: watch it by name (adopted_step.h)
  kNeverStarted,  // start the task again
  kEndedUnknown,  // srun ended unwatched, no exit record: it may have run; do not start it again
};
std::string_view ToString(IntentVerdict v);

struct IntentClock {
  std::chrono::milliseconds elapsed{0};      // since resolution began
  std::chrono::milliseconds create_wait{0};  // how long a living client may take to create the step
  std::chrono::milliseconds term_grace{0};   // SIGTERM -> SIGKILL
  std::optional<std::chrono::milliseconds> since_term;  // since the clients were first SIGTERMed
  bool cancel = false;        // the task was killed meanwhile: stop the clients now
  bool clients_seen = false;  // an earlier probe saw a live client
};

struct IntentDecision {
  IntentVerdict verdict = IntentVerdict::kWait;
  int signal_clients = 0;  // send this to the clients with the next probe (SIGTERM, SIGKILL)
  std::string why;         // for logs and the task's detail
};

IntentDecision DecideIntent(const IntentProbe& probe, const IntentClock& clock);

// Resolves intents one task at a time from the io thread.
class IntentResolver {
 public:
  struct Outcome {
    StepIntent intent;
    IntentDecision decision;
  };
  using Done = std::function<void(const std::string& task_id, const Outcome& outcome)>;

  IntentResolver(boost::asio::io_context& io, boost::asio::thread_pool& workers, Done done,
                 std::chrono::milliseconds create_wait, std::chrono::milliseconds poll,
                 std::chrono::milliseconds term_grace);
  ~IntentResolver();
  // Starts resolving; `done` is posted once, on the io thread.
  void Resolve(const std::string& task_id, const StepIntent& intent, const std::filesystem::path& exit_path);
  bool Has(const std::string& task_id) const { return entries_.count(task_id) > 0; }
  // The task was killed: stop waiting for its step, stop its srun client now.
  void Cancel(const std::string& task_id);

 private:
  struct Entry {
    StepIntent intent;
    std::filesystem::path exit_path;
    std::chrono::steady_clock::time_point started;
    std::optional<std::chrono::steady_clock::time_point> term_at;
    int next_signal = 0;
    bool clients_seen = false;
    bool waiting_logged = false;
    bool killed = false;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  void Probe(const std::string& task_id);
  void OnProbe(const std::string& task_id, IntentProbe probe);

  boost::asio::io_context& io_;
  boost::asio::thread_pool& workers_;
  Done done_;
  std::chrono::milliseconds create_wait_, poll_, term_grace_;
  std::map<std::string, Entry> entries_;
  std::shared_ptr<std::atomic<bool>> stop_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace tandem::backends::slurm
