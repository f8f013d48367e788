// The job spec parser: schemas/jobspec.schema.json plus the checks a schema
// cannot make (see job_spec.h; docs/jobspec.md is the reference for people).
// Every violation is reported, each with its JSON path; the cross-role checks
// (colocation, device fit, the handoff section's roles and groups:
// handoff_parser.h) run once every role's replicas, gpus_per_replica and
// colocate_with are themselves valid, so they never report noise.
#include "orchestrator/spec/job_spec.h"

#include <set>
#include <string>

#include <fmt/format.h>

#include "common/native_workers.h"
#include "common/bounded_json.h"
#include "orchestrator/spec/colocation.h"
#include "orchestrator/spec/handoff_parser.h"
#include "orchestrator/spec/parse_options.h"
#include "orchestrator/spec/role_parser.h"
#include "orchestrator/spec/spec_reader.h"

namespace tandem::spec {
namespace {

using internal::Describe;
using internal::JoinIndex;
using internal::JoinKey;
using internal::Json;
using internal::Reader;

constexpr int64_t kMaxDevices = 4096;

struct ParsedDevices {
  std::vector<int> ids;
};

std::optional<ParsedDevices> ParseDevices(const Json& v, Reader& r) {
  const std::string path = "devices";
  if (!r.ExpectObject(v, path)) return std::nullopt;
  r.CheckKeys(v, path, {"count", "ids"});
  bool has_count = v.contains("count"), has_ids = v.contains("ids");
  if (has_count == has_ids) {
    r.Error(path, fmt::format("expected exactly one of \"count\" (a number of devices) or \"ids\" "
                              "(a list of logical ids), got {}",
                              has_count ? "both" : "neither"));
    return std::nullopt;
  }
  ParsedDevices out;
  if (has_count) {
    auto n = r.Integer(v["count"], "devices.count", 0, kMaxDevices);
    if (!n) return std::nullopt;
    for (int i = 0; i < *n; ++i) out.ids.push_back(i);
    return out;
  }
  const Json& ids = v["ids"];
  if (!ids.is_array()) {
    r.Error("devices.ids", "expected an array of distinct logical device ids, got " + Describe(ids));
    return std::nullopt;
  }
  if (ids.size() > static_cast<size_t>(kMaxDevices)) {
    r.Error("devices.ids", fmt::format("expected at most {} ids, got {}", kMaxDevices, ids.size()));
    return std::nullopt;
  }
  bool ok = true;
  std::set<int> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto id = r.Integer(ids[i], JoinIndex("devices.ids", i), 0, kMaxDevices - 1);
    if (!id) {
      ok = false;
    } else if (!seen.insert(static_cast<int>(*id)).second) {
      r.Error(JoinIndex("devices.ids", i), fmt::format("expected distinct ids, got {} twice", *id));
      ok = false;
    } else {
      out.ids.push_back(static_cast<int>(*id));
    }
  }
  if (!ok) return std::nullopt;
  return out;
}

// Checks that all colocation groups together fit the job's devices, and
// fills in the default devices (exactly what the roles need).
void CheckDeviceFit(const Colocation& col, const std::vector<RoleSpec>& roles,
                    const std::optional<ParsedDevices>& devices, bool devices_given, JobSpec& spec,
                    Reader& r) {
  if (!devices_given) {
    if (col.devices_needed > kMaxDevices) {
      r.Error("roles", fmt::format("the roles need {} devices, more than the maximum of {}",
                                   col.devices_needed, kMaxDevices));
      return;
    }
    for (int i = 0; i < col.devices_needed; ++i) spec.devices.push_back(i);
    return;
  }
  if (!devices) return;  // already reported
  spec.devices = devices->ids;
  if (col.devices_needed <= static_cast<int64_t>(spec.devices.size())) return;
  std::string parts;
  for (const ColocationGroup& g : col.groups) {
    if (g.devices == 0) continue;
    parts += fmt::format("{}group of \"{}\": {}", parts.empty() ? "" : ", ", roles[g.owner].name,
                         g.devices);
  }
  r.Error("devices", fmt::format("the roles need {} devices ({}) but the job has {}",
                                 col.devices_needed, parts, spec.devices.size()));
}

ParseResult ParseDocument(const Json& doc, const ParseOptions& options) {
  ParseResult result;
  Reader r(&result.errors);
  if (!doc.is_object()) {
    r.Error("", "expected a JSON object (the job spec), got " + Describe(doc));
    return result;
  }
  r.CheckKeys(doc, "", {"$schema", "name", "backend", "devices", "env", "run_dir", "roles", "handoff"});
  JobSpec spec;

  if (doc.contains("$schema") && !doc["$schema"].is_string()) {
    r.Error(JoinKey("", "$schema"), "expected a string, got " + Describe(doc["$schema"]));
  }
  if (!doc.contains("name")) {
    r.Error("name", "required key is missing");
  } else if (auto name = r.String(doc["name"], "name", internal::kJobNameRule)) {
    spec.name = *name;
  }
  if (doc.contains("backend")) spec.backend = internal::ParseBackend(doc["backend"], "backend", r);
  std::optional<ParsedDevices> devices;
  const bool devices_given = doc.contains("devices");
  if (devices_given) devices = ParseDevices(doc["devices"], r);
  if (doc.contains("env")) {
    if (auto env = r.Env(doc["env"], "env")) spec.env = std::move(*env);
  }
  if (doc.contains("run_dir")) {
    if (auto d = r.String(doc["run_dir"], "run_dir", internal::kText)) spec.run_dir = *d;
  }

  bool shapes_ok = false;
  if (!doc.contains("roles")) {
    r.Error("roles", "required key is missing");
  } else if (const Json& roles = doc["roles"]; !roles.is_object()) {
    r.Error("roles", "expected an object of roles (name to role), got " + Describe(roles));
  } else if (roles.empty()) {
    r.Error("roles", "expected at least one role, got an empty object");
  } else {
    shapes_ok = true;
    for (const auto& [name, value] : roles.items()) {
      std::string path = JoinKey("roles", name);
      if (!internal::IsRoleName(name)) {
        r.Error(path, std::string("expected ") + internal::kRoleNameRule.expected + " as the key");
        shapes_ok = false;
      }
      internal::ParsedRole role = internal::ParseRole(value, name, path, options.workers, r);
      shapes_ok = shapes_ok && role.shape_ok;
      spec.roles.push_back(std::move(role.role));
    }
  }

  const bool has_handoff = doc.contains("handoff");
  internal::ParsedHandoff handoff;
  if (has_handoff) handoff = internal::ParseHandoff(doc["handoff"], "handoff", r);

  if (shapes_ok) {
    size_t before = result.errors.size();
    Colocation col = ResolveColocation(spec.roles, &result.errors);
    const bool groups_ok = result.errors.size() == before;
    if (groups_ok) CheckDeviceFit(col, spec.roles, devices, devices_given, spec, r);
    // Roles taking part by their worker kind are checked too, with or
    // without a handoff section.
    internal::CheckHandoffRoles(handoff, spec.roles, groups_ok ? &col : nullptr, r);
  } else if (has_handoff && !spec.roles.empty()) {
    internal::CheckHandoffRoles(handoff, spec.roles, nullptr, r);
  }

  if (result.errors.empty()) {
    spec.handoff = std::move(handoff.handoff);
    spec.raw = doc;
    result.spec = std::move(spec);
  }
  return result;
}

}  // namespace

std::string_view BackendKindName(BackendKind k) {
  switch (k) {
    case BackendKind::kLocal: return "local";
    case BackendKind::kSlurm: return "slurm";
    case BackendKind::kRedis: return "redis";
  }
  return "unknown";
}

const RoleSpec* JobSpec::FindRole(std::string_view role_name) const {
  for (const RoleSpec& r : roles) {
    if (r.name == role_name) return &r;
  }
  return nullptr;
}

std::string SpecError::ToString() const {
  if (path.empty()) return message;
  return path + ": " + message;
}

Status ParseResult::ToStatus() const {
  if (errors.empty()) return Status::Ok();
  std::string text;
  for (const SpecError& e : errors) {
    if (!text.empty()) text += '\n';
    text += e.ToString();
  }
  return InvalidArgument(std::move(text));
}

std::vector<std::string> ParseOptions::DefaultWorkers() { return NativeWorkerNames(); }

std::vector<std::string> ParseOptions::AllWorkerKinds() {
  return {internal::kWorkerKinds.begin(), internal::kWorkerKinds.end()};
}

ParseResult ParseJobSpec(const nlohmann::ordered_json& doc, const ParseOptions& options) {
  return ParseDocument(doc, options);
}

ParseResult ParseJobSpec(const nlohmann::json& doc, const ParseOptions& options) {
  return ParseDocument(Json(doc), options);
}

ParseResult ParseJobSpec(const nlohmann::ordered_json& doc) { return ParseJobSpec(doc, ParseOptions{}); }

ParseResult ParseJobSpec(const nlohmann::json& doc) { return ParseJobSpec(doc, ParseOptions{}); }

ParseResult ParseJobSpecText(std::string_view text) { return ParseJobSpecText(text, ParseOptions{}); }

ParseResult ParseJobSpecText(std::string_view text, const ParseOptions& options) {
  if (!JsonDepthWithin(text)) {
    ParseResult result;
    result.errors.push_back({"", fmt::format("not a job spec: JSON nested deeper than {} levels (the limit)",
                                             kMaxJsonDepth)});
    return result;
  }
  Json doc;
  try {
    doc = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
    std::string what = e.what();
    if (size_t close = what.find("] "); close != std::string::npos) what = what.substr(close + 2);
    ParseResult result;
    result.errors.push_back({"", fmt::format("not valid JSON (byte {}): {}", e.byte, what)});
    return result;
  } catch (const Json::exception& e) {
    ParseResult result;
    result.errors.push_back({"", fmt::format("not valid JSON: {}", e.what())});
    return result;
  }
  return ParseDocument(doc, options);
}

}  // namespace tandem::spec
