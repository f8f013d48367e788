// The rollout replicas behind the proxy and which one takes a call (docs/
// agents.md "Balancing"). Torch-free.
//
// Each replica is named by its port file (workers/roles/port_file.h:
// "PORT\nJOB\n", written by `tandem-worker rollout --port-file`). A replica
// is up once its file names a port; a call that failed on it for a reason of
// the replica's (refused, reset, 503; see upstream_call.h) marks it down for
// `down_for`, after which its port file is read again (a restarted replica
// writes a new port) and it is tried again. Pick gives, among the replicas
// up and not yet tried by the call: the session's replica while it stays up
// (its prefix cache holds the session's history), else the one with the
// fewest calls outstanding (ties: the lowest index); a session sticks to the
// replica it was first given. Not thread-safe: the proxy uses it on its io
// thread only (a port file read is a read of a few bytes).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::agents {

struct ReplicaOptions {
  std::vector<std::string> port_files;
  std::string host = "127.0.0.1";
  std::string job;  // the job whose port files count ("" any: $TANDEM_JOB_ID by the role)
  std::chrono::milliseconds down_for{500};
  size_t max_sticky_sessions = 1 << 16;  // beyond it the oldest stickiness is forgotten
};

class ReplicaSet {
 public:
  explicit ReplicaSet(ReplicaOptions options);

  size_t size() const { return replicas_.size(); }
  // `tried[i]`: the call already failed on replica i (its size is size()).
  std::optional<size_t> Pick(std::string_view session, const std::vector<bool>& tried);
  std::string host() const { return options_.host; }
  int port(size_t i) const { return replicas_[i].port; }
  void Begin(size_t i) { ++replicas_[i].outstanding; }
  // `replica_failed`: the replica is down for down_for.
  void Done(size_t i, bool replica_failed);
  int64_t outstanding(size_t i) const { return replicas_[i].outstanding; }
  bool up(size_t i) const { return replicas_[i].port > 0 && !replicas_[i].down; }
  void ForgetSession(std::string_view session);

 private:
  struct Replica {
    int port = 0;
    bool down = false;
    std::chrono::steady_clock::time_point retry_at{};
    int64_t outstanding = 0;
  };
  void Refresh(size_t i);

  const ReplicaOptions options_;
  std::vector<Replica> replicas_;
  std::map<std::string, size_t, std::less<>> sticky_;
  std::deque<std::string> sticky_order_;  // oldest first, for the bound
};

}  // namespace tandem::agents
