// The command loop of a native worker's role (DESIGN.md "Layout of
// workers/"; docs/control-protocol.md): what joins a role (rollout,
// teacher, ...) to tandemd's control protocol.
//
// Start() connects (hello with the role's tags and residency, welcome) and
// then serves on its own thread: each command from the daemon runs the
// handler the role registered for it, and is answered with ack or error
// (ControlClient's rules). An exception a handler throws (LibTorch, CUDA,
// std::bad_alloc) is caught here and answered error{code: "internal"} with
// its message: a command never kills the worker. After a lost connection the
// host reconnects for `reconnect_window` with a fresh hello carrying the
// same token and the current residency (how a restarted daemon re-adopts
// the worker). The loop ends when the daemon's `shutdown` was acked (Wait
// returns Ok), when no daemon came back within the window (Unavailable), or
// on Stop() (Ok, used on SIGTERM).
//
// Threading: handlers and the residency function run on the host's thread,
// one at a time; they synchronise with the role's own threads themselves.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "workers/runtime/control_client.h"

namespace tandem::control {

class RoleHost {
 public:
  struct Options {
    ControlClient::Options client;  // endpoint, hello, residency, timeouts
    // 0: a lost connection ends the loop at once.
    std::chrono::milliseconds reconnect_window{60'000};
    // How often the serving thread looks at Stop() between lines.
    std::chrono::milliseconds poll{200};
  };

  explicit RoleHost(Options options);
  ~RoleHost();  // Stop() and join
  RoleHost(const RoleHost&) = delete;
  RoleHost& operator=(const RoleHost&) = delete;

  // Registers the handler of a command type (before Start); see the file
  // comment for exceptions.
  void On(const std::string& type, ControlClient::Handler handler);

  // Connects within the client's connect_timeout and starts serving. The
  // connection's error when no daemon answered.
  Status Start();
  // True once the loop has ended.
  bool done() const { return done_.load(); }
  // Blocks until the loop ends; its outcome (see the file comment).
  Status Wait();
  // Ends the loop within `poll` and closes the connection. Idempotent.
  void Stop();

 private:
  void Loop();
  Status Reconnect();
  void Finish(Status status);

  Options options_;
  ControlClient client_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::condition_variable ended_;
  Status outcome_;
};

}  // namespace tandem::control
