// The role's command loop (role_host.h).
#include "workers/runtime/role_host.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "common/log.h"

namespace tandem::control {

using std::chrono::milliseconds;

RoleHost::RoleHost(Options options) : options_(std::move(options)), client_(options_.client) {}

RoleHost::~RoleHost() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void RoleHost::On(const std::string& type, ControlClient::Handler handler) {
  client_.On(type, [type, handler = std::move(handler)](const Command& c) -> StatusOr<nlohmann::json> {
    try {
      return handler(c);
    } catch (const std::exception& e) {
      log::Error("role", "{} {}: {}", type, c.id, e.what());
      return Internal(type + ": " + e.what());
    } catch (...) {
      log::Error("role", "{} {}: unknown exception", type, c.id);
      return Internal(type + ": unknown exception");
    }
  });
}

Status RoleHost::Start() {
  TANDEM_RETURN_IF_ERROR(client_.Connect(), "control");
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

Status RoleHost::Wait() {
  std::unique_lock<std::mutex> l(mu_);
  ended_.wait(l, [this] { return done_.load(); });
  return outcome_;
}

void RoleHost::Stop() { stop_ = true; }

void RoleHost::Finish(Status status) {
  client_.Close();
  std::lock_guard<std::mutex> l(mu_);
  outcome_ = std::move(status);
  done_ = true;
  ended_.notify_all();
}

// Reconnects in slices of at most one second, so that Stop is seen.
Status RoleHost::Reconnect() {
  const auto deadline = std::chrono::steady_clock::now() + options_.reconnect_window;
  Status st = Unavailable("control: the daemon went away");
  while (!stop_) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return st;
    st = client_.Connect(std::min(left, milliseconds(1000)));
    if (st.ok() || st.code() != StatusCode::kUnavailable) return st;
  }
  return Status::Ok();
}

void RoleHost::Loop() {
  while (!stop_) {
    StatusOr<bool> served = client_.ServeOnce(options_.poll);
    if (served.ok()) {
      if (*served) return Finish(Status::Ok());  // shutdown acked
      continue;
    }
    if (served.status().code() == StatusCode::kDeadlineExceeded) continue;
    if (served.status().code() != StatusCode::kUnavailable || options_.reconnect_window.count() <= 0)
      return Finish(served.status());
    log::Warn("role", "{}; reconnecting for up to {}ms", served.status().message(), options_.reconnect_window.count());
    Status st = Reconnect();
    if (!st.ok()) return Finish(st);
  }
  Finish(Status::Ok());
}

}  // namespace tandem::control
