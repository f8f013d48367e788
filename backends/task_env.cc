// BuildTaskEnvironment: the documented layering of task_env.h.
#include "backends/task_env.h"

#include <unistd.h>


extern char** environ;

namespace tandem::backends {
namespace {

std::string JoinInts(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(v[i]);
  }
  return out;
}

// A key that could not round-trip through "KEY=VALUE" (empty, or holding '='
// or NUL) is dropped; the spec parser rejects such keys before they get here.
bool ValidKey(const std::string& k) {
  return !k.empty() && k.find('=') == std::string::npos && k.find('\0') == std::string::npos;
}

void Overlay(EnvMap& env, const EnvMap& layer) {
  for (const auto& [k, v] : layer)
    if (ValidKey(k)) env[k] = v;
}

}  // namespace

const std::vector<std::string_view>& BaseEnvironmentAllowList() {
  static const std::vector<std::string_view> kAllow = {
      "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG",
      "LC_ALL", "TZ", "TMPDIR", "TERM", "LD_LIBRARY_PATH"};
  return kAllow;
}

EnvMap ProcessEnvironment() {
  EnvMap out;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    out.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return out;
}

std::vector<std::string> BuildTaskEnvironment(const TaskEnvInput& in) {
  EnvMap env;
  // 1. Clean base.
  const EnvMap source = in.base_source ? *in.base_source : ProcessEnvironment();
  for (std::string_view key : BaseEnvironmentAllowList()) {
    auto it = source.find(std::string(key));
    if (it != source.end()) env[it->first] = it->second;
  }
  if (!env.count("PATH")) env["PATH"] = std::string(kDefaultPath);
  // 2-4. User layers.
  Overlay(env, in.job_env);
  Overlay(env, in.role_env);
  Overlay(env, in.replica_env);
  Overlay(env, in.task_overrides);
  // 5. tandem's own variables.
  env["TANDEM_JOB_ID"] = in.job_id;
  env["TANDEM_TASK_ID"] = in.task_id;
  env["TANDEM_ROLE"] = in.role;
  env["TANDEM_RANK"] = std::to_string(in.rank);
  env["TANDEM_WORLD_SIZE"] = std::to_string(in.world_size);
  env["TANDEM_PORTS"] = JoinInts(in.ports);
  env["TANDEM_RUN_DIR"] = in.run_dir;
  env["TANDEM_DEVICES"] = JoinInts(in.logical_devices);
  env["CUDA_VISIBLE_DEVICES"] = JoinInts(in.physical_devices);
  if (!in.control.empty()) env["TANDEM_CONTROL"] = in.control;

  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;  // std::map iterates in key order: sorted, unique
}

std::string EnvValue(const std::vector<std::string>& env, std::string_view key) {
  for (const auto& e : env)
    if (e.size() > key.size() && e[key.size()] == '=' && e.compare(0, key.size(), key) == 0)
      return e.substr(key.size() + 1);
  return "";
}

}  // namespace tandem::backends
