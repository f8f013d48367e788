// Parsing one role of a job spec (schemas/jobspec.schema.json, $defs/role
// and $defs/restart). See role_parser.h.
#include "orchestrator/spec/role_parser.h"

#include <algorithm>

#include <fmt/format.h>

namespace tandem::spec::internal {
namespace {

constexpr int64_t kMaxReplicas = 100000;
constexpr int64_t kMaxGpusPerReplica = 4096;
constexpr int64_t kMaxPorts = 64;
constexpr int64_t kMaxRestarts = 1000000;
constexpr double kMaxBackoffS = 86400;
constexpr int kDefaultMaxRestarts = 3;

RestartPolicy ParseRestart(const Json& v, const std::string& path, Reader& r) {
  RestartPolicy out;
  if (!r.ExpectObject(v, path)) return out;
  r.CheckKeys(v, path, {"policy", "max_restarts", "backoff_s", "backoff_max_s"});
  if (!v.contains("policy")) {
    r.Error(JoinKey(path, "policy"), "required key is missing");
  } else if (auto p = r.Enum(v["policy"], JoinKey(path, "policy"), {"never", "on-failure", "always"})) {
    out.kind = *p == "never"        ? RestartPolicy::Kind::kNever
               : *p == "on-failure" ? RestartPolicy::Kind::kOnFailure
                                    : RestartPolicy::Kind::kAlways;
  }
  out.max_restarts = kDefaultMaxRestarts;
  if (v.contains("max_restarts")) {
    if (auto n = r.Integer(v["max_restarts"], JoinKey(path, "max_restarts"), 0, kMaxRestarts)) {
      out.max_restarts = static_cast<int>(*n);
    }
  }
  std::optional<double> initial, max;
  if (v.contains("backoff_s")) {
    initial = r.Number(v["backoff_s"], JoinKey(path, "backoff_s"), 0, kMaxBackoffS);
    if (initial) out.backoff_initial_s = *initial;
  }
  if (v.contains("backoff_max_s")) {
    max = r.Number(v["backoff_max_s"], JoinKey(path, "backoff_max_s"), 0, kMaxBackoffS);
    if (max) out.backoff_max_s = *max;
  } else if (out.backoff_max_s < out.backoff_initial_s) {
    out.backoff_max_s = out.backoff_initial_s;  // default cap never below the first delay
  }
  if (initial && max && *max < *initial) {
    r.Error(JoinKey(path, "backoff_max_s"),
            fmt::format("expected a number >= backoff_s ({}), got {}", *initial, *max));
  }
  return out;
}

// '"probe"' or '"actor", "probe"': the workers a build has, for messages.
std::string QuotedList(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += fmt::format("{}\"{}\"", out.empty() ? "" : ", ", n);
  return out.empty() ? "none" : out;
}

}  // namespace

ParsedRole ParseRole(const Json& v, const std::string& name, const std::string& path,
                     const std::vector<std::string>& workers, Reader& r) {
  ParsedRole out;
  out.role.name = name;
  if (!r.ExpectObject(v, path)) {
    out.shape_ok = false;
    return out;
  }
  r.CheckKeys(v, path,
              {"command", "worker", "args", "replicas", "gpus_per_replica", "env", "replica_env",
               "ports", "restart", "colocate_with", "cwd"});
  RoleSpec& role = out.role;

  bool has_command = v.contains("command"), has_worker = v.contains("worker");
  if (has_command && has_worker) {
    r.Error(path, "expected exactly one of \"command\" or \"worker\", got both");
  } else if (!has_command && !has_worker) {
    r.Error(path, "expected exactly one of \"command\" (an argv array) or \"worker\" (a native "
                  "worker name), got neither");
  }
  if (has_command) {
    std::string p = JoinKey(path, "command");
    const Json& c = v["command"];
    if (!c.is_array() || c.empty()) {
      r.Error(p, "expected a non-empty array of strings (argv), got " + Describe(c));
    } else if (auto argv = r.StringArray(c, p, kAnyString)) {
      if ((*argv)[0].empty()) {
        r.Error(JoinIndex(p, 0), "expected a non-empty string (the program), got \"\"");
      } else {
        role.command = std::move(*argv);
      }
    }
  }
  if (has_worker) {
    const std::string p = JoinKey(path, "worker");
    if (auto w = r.Enum(v["worker"], p, {kWorkerKinds[0], kWorkerKinds[1], kWorkerKinds[2], kWorkerKinds[3], kWorkerKinds[4],
                                           kWorkerKinds[5]})) {
      // Kept even when refused below, so the handoff checks still see its kind.
      role.worker = *w;
      if (std::find(workers.begin(), workers.end(), *w) == workers.end()) {
        r.Error(p, fmt::format("this build's tandem-worker has no \"{}\" worker; it has {} "
                               "(tandem-worker --list-workers)",
                               *w, QuotedList(workers)));
      }
    }
  }
  if (v.contains("args")) {
    std::string p = JoinKey(path, "args");
    if (!has_worker) r.Error(p, "only allowed with \"worker\" (a command carries its own argv)");
    if (auto a = r.StringArray(v["args"], p, kAnyString)) role.args = std::move(*a);
  }

  bool replicas_ok = true;
  if (v.contains("replicas")) {
    auto n = r.Integer(v["replicas"], JoinKey(path, "replicas"), 1, kMaxReplicas);
    if (n) role.replicas = static_cast<int>(*n);
    else replicas_ok = false;
  }
  if (v.contains("gpus_per_replica")) {
    auto n = r.Integer(v["gpus_per_replica"], JoinKey(path, "gpus_per_replica"), 0, kMaxGpusPerReplica);
    if (n) role.gpus_per_replica = static_cast<int>(*n);
    else out.shape_ok = false;
  }
  if (!replicas_ok) out.shape_ok = false;
  if (v.contains("env")) {
    if (auto e = r.Env(v["env"], JoinKey(path, "env"))) role.env = std::move(*e);
  }
  if (v.contains("replica_env")) {
    std::string p = JoinKey(path, "replica_env");
    const Json& re = v["replica_env"];
    if (!re.is_array()) {
      r.Error(p, "expected an array of environment objects (one per replica), got " + Describe(re));
    } else {
      for (size_t i = 0; i < re.size(); ++i) {
        auto e = r.Env(re[i], JoinIndex(p, i));
        role.replica_env.push_back(e ? std::move(*e) : std::map<std::string, std::string>{});
      }
      if (replicas_ok && re.size() != static_cast<size_t>(role.replicas)) {
        r.Error(p, fmt::format("expected {} entries (one per replica, replicas is {}), got {}",
                               role.replicas, role.replicas, re.size()));
      }
    }
  }
  if (v.contains("ports")) {
    if (auto n = r.Integer(v["ports"], JoinKey(path, "ports"), 0, kMaxPorts)) {
      role.ports = static_cast<int>(*n);
    }
  }
  if (v.contains("restart")) role.restart = ParseRestart(v["restart"], JoinKey(path, "restart"), r);
  if (v.contains("colocate_with")) {
    auto c = r.String(v["colocate_with"], JoinKey(path, "colocate_with"), kRoleNameRule);
    if (c) role.colocate_with = *c;
    else out.shape_ok = false;
  }
  if (v.contains("cwd")) {
    if (auto c = r.String(v["cwd"], JoinKey(path, "cwd"), kText)) role.cwd = *c;
  }
  return out;
}

}  // namespace tandem::spec::internal
