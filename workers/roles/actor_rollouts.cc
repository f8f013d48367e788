// The actor's rollouts (actor_rollouts.h).
#include "workers/roles/actor_rollouts.h"

#include <algorithm>
#include <future>
#include <thread>

#include "common/log.h"
#include "common/replace_all.h"
#include "workers/roles/port_file.h"

namespace tandem::roles {
namespace {

using Clock = std::chrono::steady_clock;

// One rollout's share of a generate call (actor_rollouts.h: what is asked
// again and for how long).
StatusOr<std::vector<RolloutSample>> GenerateShare(const ActorOptions& o, const std::string& job, int64_t rank,
                                                   RolloutEndpoint* endpoint, const GenerateCall& call, int64_t version,
                                                   std::chrono::milliseconds timeout) {
  std::vector<RolloutSample> out;
  TANDEM_RETURN_IF_ERROR(AskAgainWhileDown(o, job, RolloutPortFile(o, rank), endpoint, "rollout " + std::to_string(rank),
                                           [&]() -> Status {
                                             TANDEM_ASSIGN_OR_RETURN(out, Generate(*endpoint, call, timeout));
                                             auto stale = std::find_if(out.begin(), out.end(), [version](const RolloutSample& x) {
                                               return version >= 0 && x.weight_version >= 0 && x.weight_version != version;
                                             });
                                             if (stale == out.end()) return Status::Ok();
                                             return Unavailable("samples of weight version " +
                                                                std::to_string(stale->weight_version) + ", not " +
                                                                std::to_string(version));
                                           }));
  return out;
}

}  // namespace

Status AskAgainWhileDown(const ActorOptions& o, const std::string& job, const std::string& port_file,
                         RolloutEndpoint* endpoint, const std::string& who, const std::function<Status()>& attempt) {
  const Clock::time_point deadline = Clock::now() + Millis(o.phase_timeout_s);
  for (int tries = 1;; ++tries) {
    const Status st = attempt();
    if (st.code() != StatusCode::kUnavailable) return st;
    if (Clock::now() > deadline)
      return Unavailable(who + ": " + st.message() + " (asked " + std::to_string(tries) + " times in " +
                         std::to_string(o.phase_timeout_s) + " s)");
    if (tries == 1) log::Warn("actor", "{}: {}; asking again until it is back", who, st.message());
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    std::string ignored;
    StatusOr<std::optional<int>> port = ReadPortFile(port_file, job, &ignored);
    if (port.ok() && *port) endpoint->port = **port;
  }
}

std::string RolloutPortFile(const ActorOptions& o, int64_t rank) {
  return ReplaceAll(o.rollout_port_file, "{rank}", std::to_string(rank));
}

StatusOr<int> WaitForPortFile(const ActorOptions& o, const std::string& path, const std::string& job,
                              const std::string& what) {
  const Clock::time_point deadline = Clock::now() + Millis(o.phase_timeout_s);
  std::string seen_job;
  for (;;) {
    TANDEM_ASSIGN_OR_RETURN(const std::optional<int> port, ReadPortFile(path, job, &seen_job));
    if (port) return *port;
    if (Clock::now() > deadline)
      return DeadlineExceeded("actor: no " + what + " port file " + path + (job.empty() ? "" : " of job " + job) +
                              " within " + std::to_string(o.phase_timeout_s) + " s" +
                              (seen_job.empty() ? "" : " (it names job " + seen_job + ")"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

StatusOr<std::vector<RolloutEndpoint>> WaitForRollouts(const ActorOptions& o, const std::string& job) {
  std::vector<RolloutEndpoint> out;
  for (int64_t r = 0; r < o.rollouts; ++r) {
    TANDEM_ASSIGN_OR_RETURN(const int port, WaitForPortFile(o, RolloutPortFile(o, r), job, "rollout"));
    out.push_back({o.rollout_host, port});
  }
  return out;
}

StatusOr<std::vector<RolloutSample>> GenerateOnAll(const ActorOptions& o, const std::string& job,
                                                   std::vector<RolloutEndpoint>& rollouts,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   const GenerateCall& shape, int64_t version,
                                                   std::chrono::milliseconds timeout) {
  const size_t r = std::min(rollouts.size(), prompts.size());
  std::vector<std::future<StatusOr<std::vector<RolloutSample>>>> calls;
  size_t begin = 0;
  for (size_t i = 0; i < r; ++i) {
    const size_t end = begin + (prompts.size() - begin) / (r - i);
    GenerateCall call = shape;
    call.prompts.assign(prompts.begin() + static_cast<std::ptrdiff_t>(begin),
                        prompts.begin() + static_cast<std::ptrdiff_t>(end));
    calls.push_back(std::async(std::launch::async, [&o, &job, &rollouts, i, call, version, timeout] {
      return GenerateShare(o, job, static_cast<int64_t>(i), &rollouts[i], call, version, timeout);
    }));
    begin = end;
  }
  std::vector<RolloutSample> out;
  Status first_error;
  for (auto& c : calls) {
    StatusOr<std::vector<RolloutSample>> part = c.get();
    if (!part.ok()) {
      if (first_error.ok()) first_error = part.status();
      continue;
    }
    for (RolloutSample& s : *part) out.push_back(std::move(s));
  }
  if (!first_error.ok()) return first_error;
  return out;
}

}  // namespace tandem::roles
