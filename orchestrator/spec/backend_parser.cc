// Parsing the backend object of a job spec (schemas/jobspec.schema.json,
// $defs/backend, backend_local, backend_slurm, backend_redis): the kind and
// that kind's options, which the backend itself interprets later.
#include <map>

#include <fmt/format.h>

#include "orchestrator/spec/role_parser.h"

namespace tandem::spec::internal {
namespace {

// Consumes one or more ASCII digits at `i`.
bool Digits(std::string_view s, size_t& i) {
  size_t start = i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  return i > start;
}

// ^([0-9]+-)?[0-9]+(:[0-9]+){0,2}$
bool IsSlurmTime(std::string_view s) {
  size_t i = 0;
  if (!Digits(s, i)) return false;
  if (i < s.size() && s[i] == '-') {
    ++i;
    if (!Digits(s, i)) return false;
  }
  for (int parts = 0; parts < 2 && i < s.size() && s[i] == ':'; ++parts) {
    ++i;
    if (!Digits(s, i)) return false;
  }
  return i == s.size();
}

// ^(redis|rediss|unix)://[^\u0000]+$
bool IsRedisUrl(std::string_view s) {
  for (std::string_view scheme : {"redis://", "rediss://", "unix://"}) {
    if (s.substr(0, scheme.size()) == scheme) return s.size() > scheme.size() && !HasNul(s);
  }
  return false;
}

const StringRule kSlurmTime{IsSlurmTime,
                            "a Slurm time limit (M, M:S, H:M:S, D-H, D-H:M or D-H:M:S)"};
const StringRule kRedisUrl{IsRedisUrl, "a redis://, rediss:// or unix:// URL"};

void ParseSlurm(const Json& v, const std::string& path, Reader& r) {
  r.CheckKeys(v, path,
              {"kind", "partition", "account", "qos", "time", "nodes", "gpus_per_node", "gres",
               "constraint", "reservation", "exclusive", "nodelist", "exclude", "sbatch_args",
               "srun_args"});
  for (const char* key : {"partition", "account", "qos", "gres", "constraint", "reservation",
                          "nodelist", "exclude"}) {
    if (v.contains(key)) (void)r.String(v[key], JoinKey(path, key), kText);
  }
  if (v.contains("time")) (void)r.String(v["time"], JoinKey(path, "time"), kSlurmTime);
  if (v.contains("nodes")) (void)r.Integer(v["nodes"], JoinKey(path, "nodes"), 1, 100000);
  if (v.contains("gpus_per_node")) {
    (void)r.Integer(v["gpus_per_node"], JoinKey(path, "gpus_per_node"), 0, 1024);
  }
  if (v.contains("exclusive")) (void)r.Bool(v["exclusive"], JoinKey(path, "exclusive"));
  for (const char* key : {"sbatch_args", "srun_args"}) {
    if (v.contains(key)) (void)r.StringArray(v[key], JoinKey(path, key), kAnyString);
  }
}

void ParseRedis(const Json& v, const std::string& path, Reader& r) {
  r.CheckKeys(v, path, {"kind", "url", "key_prefix", "nodes"});
  if (v.contains("url")) (void)r.String(v["url"], JoinKey(path, "url"), kRedisUrl);
  if (v.contains("key_prefix")) (void)r.String(v["key_prefix"], JoinKey(path, "key_prefix"), kText);
  if (v.contains("nodes")) {
    std::string p = JoinKey(path, "nodes");
    if (auto nodes = r.StringArray(v["nodes"], p, kText)) {
      std::map<std::string, size_t> seen;
      for (size_t i = 0; i < nodes->size(); ++i) {
        auto [it, fresh] = seen.emplace((*nodes)[i], i);
        if (!fresh) {
          r.Error(JoinIndex(p, i), fmt::format("duplicate node \"{}\" (also at [{}])", (*nodes)[i], it->second));
        }
      }
    }
  }
}

}  // namespace

BackendSpec ParseBackend(const Json& v, const std::string& path, Reader& r) {
  BackendSpec out;
  if (!r.ExpectObject(v, path)) return out;
  if (!v.contains("kind")) {
    r.Error(JoinKey(path, "kind"), "required key is missing (one of \"local\", \"slurm\", \"redis\")");
    return out;
  }
  auto kind = r.Enum(v["kind"], JoinKey(path, "kind"), {"local", "slurm", "redis"});
  if (!kind) return out;  // the options of an unknown kind cannot be checked
  if (*kind == "local") {
    out.kind = BackendKind::kLocal;
    r.CheckKeys(v, path, {"kind"});
  } else if (*kind == "slurm") {
    out.kind = BackendKind::kSlurm;
    ParseSlurm(v, path, r);
  } else {
    out.kind = BackendKind::kRedis;
    ParseRedis(v, path, r);
  }
  out.options = nlohmann::json::object();
  for (const auto& [key, value] : v.items()) {
    if (key != "kind") out.options[key] = nlohmann::json(value);
  }
  return out;
}

}  // namespace tandem::spec::internal
