// The actor's data-parallel replicas: messages, the deal, the rendezvous
// (actor_replicas.h).
#include "workers/roles/actor_replicas.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "workers/roles/port_file.h"

namespace tandem::roles {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

const char* KindName(ReplicaMessage::Kind k) {
  switch (k) {
    case ReplicaMessage::Kind::kStart: return "start";
    case ReplicaMessage::Kind::kStep: return "step";
    case ReplicaMessage::Kind::kEnd: return "end";
    case ReplicaMessage::Kind::kAbort: return "abort";
  }
  return "?";
}

json TrajectoryToJson(const train::Trajectory& t) {
  json j = {{"p", t.prompt}, {"r", t.response}, {"l", t.old_logprobs}, {"w", t.reward}, {"g", t.group}};
  if (!t.trained.empty()) j["m"] = t.trained;  // a multi-turn episode's mask
  if (!t.route.empty()) j["o"] = t.route;  // MOPD
  if (!t.teacher_logprobs.empty()) j["t"] = t.teacher_logprobs;
  if (!t.teacher_top_ids.empty()) j["ti"] = t.teacher_top_ids;  // the distill loss's top-k
  if (!t.teacher_top_logprobs.empty()) j["tl"] = t.teacher_top_logprobs;
  return j;
}

// An array of numbers at `v` (`where` names it).
Status Floats(const json& v, const std::string& where, std::vector<float>& out) {
  if (!v.is_array()) return InvalidArgument(where + ": expected an array of numbers");
  out.reserve(v.size());
  for (const json& x : v) {
    if (!x.is_number()) return InvalidArgument(where + ": expected numbers");
    out.push_back(x.get<float>());
  }
  return Status::Ok();
}

// An array of 32-bit integers at `v` (`where` names it).
Status Ints(const json& v, const std::string& where, std::vector<int32_t>& out) {
  if (!v.is_array()) return InvalidArgument(where + ": expected an array of token ids");
  out.reserve(v.size());
  for (const json& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < std::numeric_limits<int32_t>::min() ||
        x.get<int64_t>() > std::numeric_limits<int32_t>::max())
      return InvalidArgument(where + ": expected 32-bit integers");
    out.push_back(x.get<int32_t>());
  }
  return Status::Ok();
}

Status TokenIds(const json& j, const char* key, const std::string& where, std::vector<int32_t>& out) {
  const auto it = j.find(key);
  if (it == j.end()) return InvalidArgument(where + "." + key + ": expected an array of token ids");
  return Ints(*it, where + "." + key, out);
}

// The optional per-teacher arrays at j[key] (`parse` reads one of them).
template <typename T, typename Parse>
Status PerTeacher(const json& j, const char* key, const std::string& where, Parse parse, std::vector<std::vector<T>>& out) {
  const auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  const std::string at = where + "." + key;
  if (!it->is_array()) return InvalidArgument(at + ": expected an array per teacher");
  out.resize(it->size());
  for (size_t k = 0; k < it->size(); ++k) TANDEM_RETURN_IF_ERROR(parse((*it)[k], at + "[" + std::to_string(k) + "]", out[k]));
  return Status::Ok();
}

StatusOr<train::Trajectory> TrajectoryFromJson(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument(where + ": expected an object");
  train::Trajectory t;
  TANDEM_RETURN_IF_ERROR(TokenIds(j, "p", where, t.prompt));
  TANDEM_RETURN_IF_ERROR(TokenIds(j, "r", where, t.response));
  const auto l = j.find("l");
  if (l == j.end()) return InvalidArgument(where + ".l: expected an array of log-probs");
  TANDEM_RETURN_IF_ERROR(Floats(*l, where + ".l", t.old_logprobs));
  if (const auto m = j.find("m"); m != j.end()) {
    if (!m->is_array()) return InvalidArgument(where + ".m: expected an array of 0 and 1");
    for (const json& x : *m) {
      if (!x.is_number_integer() || (x.get<int64_t>() != 0 && x.get<int64_t>() != 1))
        return InvalidArgument(where + ".m: expected an array of 0 and 1");
      t.trained.push_back(static_cast<uint8_t>(x.get<int64_t>()));
    }
  }
  if (const auto o = j.find("o"); o != j.end()) TANDEM_RETURN_IF_ERROR(Floats(*o, where + ".o", t.route));
  TANDEM_RETURN_IF_ERROR(PerTeacher(j, "t", where, Floats, t.teacher_logprobs));
  TANDEM_RETURN_IF_ERROR(PerTeacher(j, "ti", where, Ints, t.teacher_top_ids));
  TANDEM_RETURN_IF_ERROR(PerTeacher(j, "tl", where, Floats, t.teacher_top_logprobs));
  const auto w = j.find("w");
  if (w == j.end() || !w->is_number()) return InvalidArgument(where + ".w: expected the reward, a number");
  t.reward = w->get<double>();  // NaN travels: the trainer drops it with its reason
  const auto g = j.find("g");
  if (g == j.end() || !g->is_number_integer()) return InvalidArgument(where + ".g: expected the group, an integer");
  t.group = g->get<int64_t>();
  return t;
}

}  // namespace

std::string EncodeReplicaMessage(const ReplicaMessage& m) {
  json j = {{"kind", KindName(m.kind)}};
  switch (m.kind) {
    case ReplicaMessage::Kind::kStart: j["checkpoint"] = m.checkpoint; break;
    case ReplicaMessage::Kind::kStep: {
      j["step"] = m.step;
      j["progress"] = m.progress;
      j["check"] = m.check;
      json shares = json::array();
      for (const auto& share : m.shares) {
        json s = json::array();
        for (const train::Trajectory& t : share) s.push_back(TrajectoryToJson(t));
        shares.push_back(std::move(s));
      }
      j["shares"] = std::move(shares);
      break;
    }
    case ReplicaMessage::Kind::kEnd: break;
    case ReplicaMessage::Kind::kAbort: j["error"] = m.error; break;
  }
  const std::vector<uint8_t> bytes = json::to_msgpack(j);
  return std::string(bytes.begin(), bytes.end());
}

StatusOr<ReplicaMessage> DecodeReplicaMessage(const std::string& bytes, int world_size) {
  const json j = json::from_msgpack(bytes, /*strict=*/true, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("replica message: not a MessagePack object");
  const auto kind = j.find("kind");
  if (kind == j.end() || !kind->is_string()) return InvalidArgument("replica message: no kind");
  ReplicaMessage m;
  auto text = [&j](const char* key) -> StatusOr<std::string> {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return InvalidArgument(std::string("replica message: ") + key + ": expected a string");
    return it->get<std::string>();
  };
  const std::string k = kind->get<std::string>();
  if (k == "start") {
    m.kind = ReplicaMessage::Kind::kStart;
    TANDEM_ASSIGN_OR_RETURN(m.checkpoint, text("checkpoint"));
  } else if (k == "end") {
    m.kind = ReplicaMessage::Kind::kEnd;
  } else if (k == "abort") {
    m.kind = ReplicaMessage::Kind::kAbort;
    TANDEM_ASSIGN_OR_RETURN(m.error, text("error"));
  } else if (k == "step") {
    m.kind = ReplicaMessage::Kind::kStep;
    const auto step = j.find("step");
    const auto progress = j.find("progress");
    const auto shares = j.find("shares");
    const auto check = j.find("check");
    if (check == j.end() || !check->is_boolean()) return InvalidArgument("replica message: check: expected a boolean");
    m.check = check->get<bool>();
    if (step == j.end() || !step->is_number_integer() || step->get<int64_t>() < 1)
      return InvalidArgument("replica message: step: expected an integer >= 1");
    if (progress == j.end() || !progress->is_number() || !(progress->get<double>() >= 0 && progress->get<double>() <= 1))
      return InvalidArgument("replica message: progress: expected a number in [0, 1]");
    if (shares == j.end() || !shares->is_array() || shares->size() != static_cast<size_t>(world_size))
      return InvalidArgument("replica message: shares: expected an array of " + std::to_string(world_size));
    m.step = step->get<int64_t>();
    m.progress = progress->get<double>();
    for (size_t r = 0; r < shares->size(); ++r) {
      const json& share = (*shares)[r];
      if (!share.is_array()) return InvalidArgument("replica message: shares[" + std::to_string(r) + "]: expected an array");
      m.shares.emplace_back();
      for (size_t i = 0; i < share.size(); ++i) {
        TANDEM_ASSIGN_OR_RETURN(train::Trajectory t,
                                TrajectoryFromJson(share[i], "replica message: shares[" + std::to_string(r) + "][" +
                                                                 std::to_string(i) + "]"));
        m.shares.back().push_back(std::move(t));
      }
    }
  } else {
    return InvalidArgument("replica message: unknown kind '" + k + "'");
  }
  return m;
}

std::vector<std::vector<train::Trajectory>> DealGroups(const std::vector<train::Trajectory>& trajectories, int ranks) {
  ranks = std::max(ranks, 1);
  struct Run {
    size_t begin = 0, end = 0;
    int64_t tokens = 0;
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < trajectories.size(); ++i) {
    const train::Trajectory& t = trajectories[i];
    if (i == 0 || t.group != trajectories[i - 1].group) runs.push_back({i, i, 0});
    runs.back().end = i + 1;
    runs.back().tokens += static_cast<int64_t>(t.prompt.size() + t.response.size());
  }
  std::vector<size_t> order(runs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&runs](size_t a, size_t b) { return runs[a].tokens > runs[b].tokens; });
  std::vector<int64_t> load(static_cast<size_t>(ranks), 0);
  std::vector<std::vector<size_t>> dealt(static_cast<size_t>(ranks));
  for (const size_t g : order) {
    const size_t r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[r] += runs[g].tokens;
    dealt[r].push_back(g);
  }
  std::vector<std::vector<train::Trajectory>> shares(static_cast<size_t>(ranks));
  for (size_t r = 0; r < dealt.size(); ++r) {
    std::sort(dealt[r].begin(), dealt[r].end());
    for (const size_t g : dealt[r])
      shares[r].insert(shares[r].end(), trajectories.begin() + static_cast<std::ptrdiff_t>(runs[g].begin),
                       trajectories.begin() + static_cast<std::ptrdiff_t>(runs[g].end));
  }
  return shares;
}

std::chrono::milliseconds ReplicaWait(const ActorOptions& o) {
  // Between two steps rank 0 asks for up to four phases (train, sync,
  // rollout, an eval's rollout), generates twice and may write a checkpoint.
  return Millis(6 * o.phase_timeout_s + 2 * o.request_timeout_s);
}

StatusOr<std::unique_ptr<collective::Group>> JoinActorReplicas(const ActorOptions& o,
                                                                      const control::Hello& hello) {
  collective::GroupOptions d;
  d.rank = static_cast<int>(hello.rank);
  d.world_size = static_cast<int>(hello.world_size);
  d.host = o.dp_host;
  d.device = o.device == "cuda" ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  d.timeout = Millis(o.phase_timeout_s);
  d.connect_timeout = Millis(o.phase_timeout_s);
  if (d.world_size > 1 && d.rank == 0) {
    TANDEM_ASSIGN_OR_RETURN(d.port, FirstLeasedPort(), "actor");
    if (d.port == 0)
      return InvalidArgument("actor: with replicas > 1 (data parallel) rank 0 needs a leased port for the "
                             "replicas' rendezvous: give the actor role \"ports\": 1");
    TANDEM_RETURN_IF_ERROR(WritePortFile(o.dp_port_file, d.port), "actor: --dp-port-file");
  } else if (d.world_size > 1) {
    // Rank 0's file, read again before each attempt: a restarted rank 0
    // (on_fault restart) may serve on another port than its last life's.
    const Clock::time_point deadline = Clock::now() + d.connect_timeout;
    std::string seen_job;
    for (int attempt = 1;; ++attempt) {
      TANDEM_ASSIGN_OR_RETURN(const std::optional<int> port, ReadPortFile(o.dp_port_file, hello.job_id, &seen_job),
                              "actor: --dp-port-file");
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (!port) {
        if (left.count() <= 0)
          return DeadlineExceeded("actor: rank 0 wrote no --dp-port-file " + o.dp_port_file +
                                  (hello.job_id.empty() ? "" : " of job " + hello.job_id) + " within " +
                                  std::to_string(o.phase_timeout_s) + " s" +
                                  (seen_job.empty() ? "" : " (it names job " + seen_job + ")"));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      d.port = *port;
      d.connect_timeout = std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(15'000));
      StatusOr<std::unique_ptr<collective::Group>> group = collective::Group::Connect(d);
      if (group.ok()) {
        log::Info("actor", "data-parallel replica {} of {} ({}, rendezvous {}:{})", d.rank, d.world_size,
                  (*group)->backend(), d.host, d.port);
        return group;
      }
      const StatusCode code = group.status().code();
      if ((code != StatusCode::kUnavailable && code != StatusCode::kDeadlineExceeded) || Clock::now() >= deadline)
        return group.status().WithContext("actor");
      if (attempt == 1) log::Warn("actor", "joining rank 0: {}; trying again", group.status().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<collective::Group> group, collective::Group::Connect(d),
                          "actor");
  if (d.world_size > 1)
    log::Info("actor", "data-parallel rank 0 of {} ({}, rendezvous {}:{})", d.world_size, group->backend(), d.host,
              d.port);
  return group;
}

}  // namespace tandem::roles
