// Replica choice (replica_set.h).
#include "workers/agents/replica_set.h"

#include <algorithm>

#include "common/log.h"
#include "workers/roles/port_file.h"

namespace tandem::agents {

ReplicaSet::ReplicaSet(ReplicaOptions options) : options_(std::move(options)), replicas_(options_.port_files.size()) {
  for (size_t i = 0; i < replicas_.size(); ++i) Refresh(i);
}

void ReplicaSet::Refresh(size_t i) {
  std::string seen;
  auto port = roles::ReadPortFile(options_.port_files[i], options_.job, &seen);
  Replica& r = replicas_[i];
  const int before = r.port;
  if (port.ok() && port->has_value()) {
    r.port = **port;
    r.down = false;
  } else {
    r.port = 0;
  }
  if (r.port != before && r.port > 0)
    log::Info("proxy", "replica up replica={} port={} file={}", i, r.port, options_.port_files[i]);
}

std::optional<size_t> ReplicaSet::Pick(std::string_view session, const std::vector<bool>& tried) {
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = replicas_[i];
    if ((r.port == 0 || r.down) && now >= r.retry_at) {
      Refresh(i);
      r.retry_at = now + options_.down_for;
    }
  }
  auto usable = [&](size_t i) { return i < replicas_.size() && !tried[i] && up(i); };
  if (!session.empty()) {
    const auto it = sticky_.find(session);
    if (it != sticky_.end() && usable(it->second)) return it->second;
  }
  std::optional<size_t> best;
  for (size_t i = 0; i < replicas_.size(); ++i)
    if (usable(i) && (!best || replicas_[i].outstanding < replicas_[*best].outstanding)) best = i;
  if (best && !session.empty()) {
    const auto [it, inserted] = sticky_.insert_or_assign(std::string(session), *best);
    if (inserted) {
      sticky_order_.push_back(it->first);
      if (sticky_order_.size() > options_.max_sticky_sessions) {
        sticky_.erase(sticky_order_.front());
        sticky_order_.pop_front();
      }
    }
  }
  return best;
}

void ReplicaSet::Done(size_t i, bool replica_failed) {
  Replica& r = replicas_[i];
  --r.outstanding;
  if (replica_failed && !r.down) {
    r.down = true;
    r.retry_at = std::chrono::steady_clock::now() + options_.down_for;
    log::Warn("proxy", "replica down replica={} port={} retry_in_ms={}", i, r.port, options_.down_for.count());
  }
}

void ReplicaSet::ForgetSession(std::string_view session) {
  const auto it = sticky_.find(session);
  if (it == sticky_.end()) return;
  sticky_order_.erase(std::remove(sticky_order_.begin(), sticky_order_.end(), it->first), sticky_order_.end());
  sticky_.erase(it);
}

}  // namespace tandem::agents
