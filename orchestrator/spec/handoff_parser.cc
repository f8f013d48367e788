// The job spec's `handoff` section: schemas/jobspec.schema.json $defs/handoff
// (and $defs/handoff_phase, $defs/byte_size), read into HandoffSpec, plus
// the checks against roles and colocation groups (see handoff_parser.h).
#include "orchestrator/spec/handoff_parser.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "orchestrator/spec/byte_size.h"

namespace tandem::spec {

std::string HandoffSpec::KindOf(const RoleSpec& role) const {
  if (auto it = roles.find(role.name); it != roles.end()) return it->second;
  if (role.worker == "actor" || role.worker == "rollout" || role.worker == "teacher") return role.worker;
  return "";
}

namespace internal {
namespace {

constexpr double kMaxTimeoutS = 86400;

// The wire names of docs/control-protocol.md (orchestrator/handoff/types.h).
const std::initializer_list<std::string_view> kKinds{"actor", "rollout", "teacher"};
const std::initializer_list<std::string_view> kTags{"weights",   "kv_cache", "cuda_graph",
                                                    "params",    "grads",    "optimizer",
                                                    "activations", "ipc_exports"};

bool IsKind(std::string_view s) { return std::find(kKinds.begin(), kKinds.end(), s) != kKinds.end(); }

// handoff.phases.<phase>.release / .resume: kind -> distinct tags.
std::map<std::string, std::vector<std::string>> ParseTagsByKind(const Json& v, const std::string& path,
                                                                Reader& r) {
  std::map<std::string, std::vector<std::string>> out;
  if (!v.is_object()) {
    r.Error(path, "expected an object of role kinds (\"actor\", \"rollout\", \"teacher\") to "
                  "arrays of tags, got " + Describe(v));
    return out;
  }
  for (const auto& [kind, tags] : v.items()) {
    std::string p = JoinKey(path, kind);
    bool ok = true;
    if (!IsKind(kind)) {
      r.Error(p, "expected a role kind (\"actor\", \"rollout\" or \"teacher\") as the key");
      ok = false;
    }
    if (!tags.is_array()) {
      r.Error(p, "expected an array of tags, got " + Describe(tags));
      continue;
    }
    std::vector<std::string> list;
    for (size_t i = 0; i < tags.size(); ++i) {
      auto tag = r.Enum(tags[i], JoinIndex(p, i), kTags);
      if (!tag) {
        ok = false;
      } else if (std::find(list.begin(), list.end(), *tag) != list.end()) {
        r.Error(JoinIndex(p, i), fmt::format("expected distinct tags, got \"{}\" twice", *tag));
        ok = false;
      } else {
        list.push_back(*tag);
      }
    }
    if (ok) out[kind] = std::move(list);
  }
  return out;
}

HandoffPhaseSpec ParsePhase(const Json& v, const std::string& phase, const std::string& path,
                            Reader& r) {
  HandoffPhaseSpec out;
  if (!r.ExpectObject(v, path)) return out;
  r.CheckKeys(v, path, {"release", "resume", "timeout_s"});
  if (v.contains("release")) out.release = ParseTagsByKind(v["release"], JoinKey(path, "release"), r);
  if (v.contains("resume")) out.resume = ParseTagsByKind(v["resume"], JoinKey(path, "resume"), r);
  if (v.contains("timeout_s")) {
    if (auto t = r.NumberAbove(v["timeout_s"], JoinKey(path, "timeout_s"), 0, kMaxTimeoutS)) {
      out.timeout_s = *t;
    }
  }
  // A kind cannot give memory back and take it again in one step. In the
  // teacher phase a teacher's release is for the others, its resume its own.
  for (const auto& [kind, tags] : out.resume) {
    if (phase == "teacher" && kind == "teacher") continue;
    auto released = out.release.find(kind);
    if (released == out.release.end()) continue;
    for (size_t i = 0; i < tags.size(); ++i) {
      const auto& rel = released->second;
      if (std::find(rel.begin(), rel.end(), tags[i]) == rel.end()) continue;
      r.Error(JoinIndex(JoinKey(JoinKey(path, "resume"), kind), i),
              fmt::format("expected a tag that this phase does not also release for \"{}\", got "
                          "\"{}\" ({} releases it)",
                          kind, tags[i], JoinKey(JoinKey(path, "release"), kind)));
    }
  }
  return out;
}

// handoff.gpu_memory: an integer >= 1 or a size string.
uint64_t ParseGpuMemory(const Json& v, const std::string& path, Reader& r) {
  if (v.is_number()) {
    auto n = r.Integer(v, path, 1, static_cast<int64_t>(kMaxByteSize));
    return n ? static_cast<uint64_t>(*n) : 0;
  }
  if (!v.is_string()) {
    r.Error(path, "expected a number of bytes (an integer >= 1) or a size such as \"80GiB\", got " +
                      Describe(v));
    return 0;
  }
  StatusOr<uint64_t> bytes = ParseByteSize(v.get_ref<const std::string&>());
  if (!bytes.ok()) {
    r.Error(path, bytes.status().message());
    return 0;
  }
  return *bytes;
}

std::string RoleNames(const std::vector<RoleSpec>& roles) {
  std::string names;
  for (const RoleSpec& role : roles) names += (names.empty() ? "" : ", ") + role.name;
  return names;
}

// Where a participating role's handoff errors are reported: its entry in
// handoff.roles when it has one, else its worker.
std::string ParticipantPath(const HandoffSpec& h, const RoleSpec& role) {
  if (h.roles.count(role.name)) return JoinKey("handoff.roles", role.name);
  return JoinKey(JoinKey("roles", role.name), "worker");
}

}  // namespace

ParsedHandoff ParseHandoff(const Json& v, const std::string& path, Reader& r) {
  ParsedHandoff parsed;
  HandoffSpec& out = parsed.handoff;
  if (!r.ExpectObject(v, path)) {
    parsed.roles_ok = false;
    return parsed;
  }
  r.CheckKeys(v, path, {"roles", "controller", "timeout_s", "on_fault", "gpu_memory", "phases"});
  if (v.contains("roles")) {
    const std::string p = JoinKey(path, "roles");
    const Json& roles = v["roles"];
    if (!roles.is_object()) {
      parsed.roles_ok = false;
      r.Error(p, "expected an object of role names to kinds (\"actor\", \"rollout\", \"teacher\"), "
                 "got " + Describe(roles));
    } else {
      for (const auto& [name, kind] : roles.items()) {
        std::string rp = JoinKey(p, name);
        bool ok = true;
        if (!IsRoleName(name)) {
          r.Error(rp, std::string("expected ") + kRoleNameRule.expected + " as the key");
          ok = false;
        }
        auto k = r.Enum(kind, rp, kKinds);
        if (ok && k) out.roles[name] = *k;
        else parsed.roles_ok = false;
      }
    }
  }
  if (v.contains("controller")) {
    if (auto c = r.String(v["controller"], JoinKey(path, "controller"), kRoleNameRule)) {
      out.controller = *c;
    }
  }
  if (v.contains("timeout_s")) {
    if (auto t = r.NumberAbove(v["timeout_s"], JoinKey(path, "timeout_s"), 0, kMaxTimeoutS)) {
      out.timeout_s = *t;
    }
  }
  if (v.contains("on_fault")) {
    if (auto f = r.Enum(v["on_fault"], JoinKey(path, "on_fault"), {"fail", "restart"})) out.on_fault = *f;
  }
  if (v.contains("gpu_memory")) out.gpu_memory = ParseGpuMemory(v["gpu_memory"], JoinKey(path, "gpu_memory"), r);
  if (v.contains("phases")) {
    const std::string p = JoinKey(path, "phases");
    const Json& phases = v["phases"];
    if (r.ExpectObject(phases, p)) {
      r.CheckKeys(phases, p, {"rollout", "teacher", "train", "sync"});
      for (const char* phase : {"rollout", "teacher", "train", "sync"}) {
        if (!phases.contains(phase)) continue;
        out.phases[phase] = ParsePhase(phases[phase], phase, JoinKey(p, phase), r);
      }
    }
  }
  return parsed;
}

void CheckHandoffRoles(const ParsedHandoff& parsed, const std::vector<RoleSpec>& roles,
                       const Colocation* col, Reader& r) {
  if (!parsed.roles_ok) return;
  const HandoffSpec& h = parsed.handoff;
  const size_t errors_before = r.error_count();
  auto find = [&](std::string_view name) -> const RoleSpec* {
    for (const RoleSpec& role : roles) {
      if (role.name == name) return &role;
    }
    return nullptr;
  };
  for (const auto& [name, kind] : h.roles) {
    const std::string path = JoinKey("handoff.roles", name);
    const RoleSpec* role = find(name);
    if (!role) {
      r.Error(path, fmt::format("expected the name of a role ({}), got \"{}\"", RoleNames(roles), name));
      continue;
    }
    if (IsKind(role->worker) && role->worker != kind) {
      r.Error(path, fmt::format("expected \"{}\" (the kind of its worker \"{}\"), got \"{}\"",
                                role->worker, role->worker, kind));
    }
  }
  if (!h.controller.empty()) {
    const RoleSpec* controller = find(h.controller);
    if (!controller) {
      r.Error("handoff.controller", fmt::format("expected the name of a role ({}), got \"{}\"",
                                                RoleNames(roles), h.controller));
    } else if (h.KindOf(*controller).empty()) {
      r.Error("handoff.controller",
              fmt::format("expected a role that takes part in the handoff (named in handoff.roles, "
                          "or with worker \"actor\", \"rollout\" or \"teacher\"), got \"{}\"",
                          h.controller));
    }
  }
  if (!col || r.error_count() != errors_before) return;
  for (const ColocationGroup& group : col->groups) {
    const RoleSpec& owner = roles[static_cast<size_t>(group.owner)];
    const RoleSpec* actor = nullptr;
    for (int member : group.members) {
      const RoleSpec& role = roles[static_cast<size_t>(member)];
      const std::string kind = h.KindOf(role);
      if (kind.empty()) continue;
      if (group.devices == 0) {
        r.Error(ParticipantPath(h, role),
                fmt::format("role \"{}\" takes part in the handoff as \"{}\" but its colocation "
                            "group (owner \"{}\") has no GPUs: a CPU-only group has no GPU memory "
                            "to hand off",
                            role.name, kind, owner.name));
        continue;
      }
      if (kind != "actor") continue;
      if (actor) {
        r.Error(ParticipantPath(h, role),
                fmt::format("a second actor-kind role in the colocation group of \"{}\" (\"{}\" is "
                            "its actor): a group has at most one actor",
                            owner.name, actor->name));
      } else {
        actor = &role;
      }
    }
  }
}

}  // namespace internal
}  // namespace tandem::spec
