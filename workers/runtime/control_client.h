// The worker side of the control protocol (schemas/control.schema.json;
// docs/control-protocol.md).
//
// A worker builds a ControlClient, registers one handler per command it
// supports, connects (hello -> welcome), then serves: each command line from
// the daemon runs its handler and is answered with `ack` or `error`, both
// carrying the residency the worker reports at that moment. Unknown commands,
// malformed and over-long lines are answered with an error; the client never
// throws or aborts on what the daemon sends. Blocking I/O on one thread: the
// worker calls Serve/ServeOnce from its control thread (or between steps).
//
// Timeouts and reconnection: Connect() retries connect() until
// `connect_timeout` (the daemon may still be starting), backing off from 50 ms
// to 1 s between attempts, and then waits `handshake_timeout` for `welcome`;
// a connection that breaks during the handshake is tried again within
// `connect_timeout`. The client never reconnects by itself mid-session: when
// Serve or RequestPhase returns kUnavailable (the daemon went away) the
// worker calls Connect() again, which sends a fresh hello, with the same
// token and its current residency: how a restarted daemon re-adopts it and
// re-learns what it holds (workers/probe_worker.cc does so by default).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "common/control/control_messages.h"

namespace tandem::control {

class ControlClient {
 public:
  // A handler's ok value is the ack's `detail` object (may be empty/null);
  // an error becomes an `error` line with ErrorCodeFor(code).
  using Handler = std::function<StatusOr<nlohmann::json>(const Command&)>;
  using ResidencyFn = std::function<Residency()>;

  struct Options {
    Endpoint endpoint;
    Hello hello;
    ResidencyFn residency;  // called for hello and every answer; may be empty
    std::chrono::milliseconds connect_timeout{10'000};
    std::chrono::milliseconds handshake_timeout{10'000};
    std::chrono::milliseconds write_timeout{10'000};
    size_t max_line_bytes = kDefaultMaxLineBytes;
  };

  explicit ControlClient(Options options);
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Registers (or replaces) the handler for a command type. "shutdown" has a
  // default handler that acks; every other command without one is answered
  // with error{code: unknown_command}. Register before Connect so that the
  // hello's capabilities list them.
  void On(const std::string& type, Handler handler);

  // Connects, sends hello, waits for welcome. kUnavailable when nobody
  // listens within connect_timeout; kDeadlineExceeded without a welcome;
  // kFailedPrecondition when the daemon refuses (e.g. unsupported version).
  Status Connect() { return Connect(options_.connect_timeout); }
  Status Connect(std::chrono::milliseconds connect_timeout);
  bool connected() const { return fd_ >= 0; }
  const nlohmann::json& welcome() const { return welcome_; }

  // Reads and answers at most one line, waiting up to `timeout` (negative:
  // forever). Returns true when that line was a shutdown the worker acked.
  // kDeadlineExceeded when nothing arrived; kUnavailable when the daemon
  // closed the connection.
  StatusOr<bool> ServeOnce(std::chrono::milliseconds timeout);
  // Serves until shutdown (ok) or an error from ServeOnce. A positive
  // `idle_timeout` bounds the wait for each line.
  Status Serve(std::chrono::milliseconds idle_timeout = std::chrono::milliseconds(-1));
  bool shutdown_requested() const { return shutdown_; }

  // Sends request_phase and serves commands (the controller is usually part
  // of the phase too) until the daemon's phase_done with the same id.
  // An `error` for that id is returned as a Status: kUnavailable for the
  // code `unavailable` (the group is busy: ask again), else
  // kFailedPrecondition; kUnavailable with connected() false when the
  // daemon went away (Connect again).
  Status RequestPhase(const std::string& phase, std::optional<int64_t> version,
                      std::chrono::milliseconds timeout);
  // Sends one metrics line; no answer is expected.
  Status SendMetrics(const nlohmann::json& values, std::optional<int64_t> step = std::nullopt);

  // Sends a raw line (for tests and adapters); a newline is appended.
  Status SendLine(const std::string& line);
  void Close();

 private:
  struct Line {
    std::string text;
    bool too_long = false;
  };
  StatusOr<Line> ReadLine(std::chrono::milliseconds timeout);
  Status ConnectAndHandshake(std::chrono::milliseconds connect_timeout);
  Status Send(const nlohmann::json& j);
  Residency CurrentResidency() const;
  // Answers one daemon line; returns the parsed command when it was not a
  // command for a handler (welcome, phase_done, error), for the caller.
  StatusOr<std::optional<Command>> HandleLine(const Line& line);

  Options options_;
  std::map<std::string, Handler> handlers_;
  std::map<int64_t, std::string> answered_;  // id -> answer line, for retries
  int fd_ = -1;
  std::string buffer_;
  bool discarding_ = false;
  bool shutdown_ = false;
  int64_t next_request_id_ = 1;
  nlohmann::json welcome_;
};

}  // namespace tandem::control
