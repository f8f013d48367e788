// Test-only fault injection: see fault_injection.h.
#include "backends/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include "common/log.h"

namespace tandem::backends {

StatusOr<std::shared_ptr<const FaultPoints>> FaultPoints::Parse(std::string_view spec) {
  std::set<std::string> armed;
  std::string cur;
  auto flush = [&]() -> Status {
    if (cur.empty()) return InvalidArgument("fault points '" + std::string(spec) + "': empty name");
    armed.insert(cur);
    cur.clear();
    return Status::Ok();
  };
  for (char c : spec) {
    if (c == ' ') continue;
    if (c == ',') {
      TANDEM_RETURN_IF_ERROR(flush());
    } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_') {
      cur.push_back(c);
    } else {
      return InvalidArgument("fault points '" + std::string(spec) + "': unexpected character");
    }
  }
  TANDEM_RETURN_IF_ERROR(flush());
  return std::make_shared<const FaultPoints>(std::move(armed));
}

void FaultPoints::CrashIfArmed(std::string_view point, std::string_view what) const {
  if (!Armed(point)) return;
  log::Warn("fault", "point={} reached: killing tandemd {}", point, what);  // warn: flushed at once
  ::kill(::getpid(), SIGKILL);
}

StatusOr<TaskRef> FaultInjectingExecutor::Start(const LaunchRequest& request) {
  const std::string kind(inner_.kind());
  if (faults_->Armed(kind + ".start.unavailable"))
    return Unavailable("fault point " + kind + ".start.unavailable: nothing started");
  auto ref = inner_.Start(request);
  if (ref.ok()) faults_->CrashIfArmed(kind + ".after_start", "after starting task=" + request.task_id);
  return ref;
}

}  // namespace tandem::backends
