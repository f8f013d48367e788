// Control tokens: how a worker proves, in its hello, that it is the launch
// of the task it names (docs/control-protocol.md
// "Authentication"). A unix control socket is protected by its mode (0600);
// a TCP one is not, so every launch gets a token:
//
//   token = hex HMAC-SHA256(key, "tandem-control-v1\n" job_id "\n" task_id "\n" launch)
//
// where task_id is the daemon's task id (TANDEM_TASK_ID), launch the task's
// launch number (1 for its first start, journaled, TANDEM_CONTROL_LAUNCH) and
// key the daemon's control secret (a 0600 file in its state dir, created once,
// so tokens survive daemon restarts) — or, for tasks of the redis backend, the
// cluster key, which the node agent holds: the agent derives the token
// locally, so it never crosses Redis in clear. A token opens one launch of one
// task and nothing else: a restarted task's old process, or another task
// presenting it, is refused. The token travels in clear on the control
// connection itself (no TLS); see the doc's threat model.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tandem::control {

// Environment variables a launch carries (besides TANDEM_CONTROL).
inline constexpr const char* kTokenEnv = "TANDEM_CONTROL_TOKEN";
inline constexpr const char* kLaunchEnv = "TANDEM_CONTROL_LAUNCH";

// The token of one launch under `key` (64 lowercase hex digits).
std::string ControlToken(std::string_view key, std::string_view job_id, std::string_view task_id, int launch);

// Equality that takes the same time wherever the strings differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// Reads the daemon's control secret from `path`, or creates it (32 random
// bytes, hex, mode 0600, written atomically) when the file does not exist.
// Refuses a file that group or others may read.
StatusOr<std::string> LoadOrCreateSecret(const std::filesystem::path& path);

// The keys of one daemon: its own secret, and per-backend keys (redis: the
// cluster key) for backends whose launches derive their tokens elsewhere.
class ControlKeys {
 public:
  ControlKeys() = default;
  explicit ControlKeys(std::string daemon_secret) : secret_(std::move(daemon_secret)) {}
  void SetBackendKey(const std::string& backend, std::string key) { backend_keys_[backend] = std::move(key); }
  // The key that signs launches of `backend`.
  const std::string& KeyFor(const std::string& backend) const;
  bool empty() const { return secret_.empty(); }
  std::string TokenFor(const std::string& backend, std::string_view job_id, std::string_view task_id, int launch) const {
    return ControlToken(KeyFor(backend), job_id, task_id, launch);
  }
  // Whether `presented` is that launch's token (constant time).
  bool Verify(const std::string& backend, std::string_view job_id, std::string_view task_id, int launch,
              std::string_view presented) const {
    return !empty() && ConstantTimeEquals(TokenFor(backend, job_id, task_id, launch), presented);
  }

 private:
  std::string secret_;
  std::map<std::string, std::string> backend_keys_;
};

}  // namespace tandem::control
