// Handoff events as journal JSON, and phase names (event_codec.h).
#include "orchestrator/handoff/event_codec.h"

#include <charconv>

#include <fmt/format.h>

namespace tandem::handoff {
namespace {

using json = nlohmann::json;

json Who(const WorkerId& w) { return {{"role", w.role}, {"rank", w.rank}}; }

std::optional<int64_t> Number(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

json DevicesToJson(const std::vector<DeviceMemory>& ds) {
  json out = json::array();
  for (const DeviceMemory& d : ds) {
    out.push_back({{"gpu", d.gpu}, {"used", d.used}, {"total", d.total}, {"device_wide", d.device_wide}});
  }
  return out;
}

std::vector<DeviceMemory> DevicesFromJson(const json& j) {
  std::vector<DeviceMemory> out;
  if (!j.is_array()) return out;
  for (const json& d : j) {
    if (!d.is_object()) continue;
    out.push_back({d.value("gpu", 0), d.value("used", uint64_t{0}), d.value("total", uint64_t{0}),
                   d.value("device_wide", true)});
  }
  return out;
}

json TagBytesToJson(const std::map<Tag, uint64_t>& bytes) {
  json out = json::object();
  for (const auto& [t, b] : bytes) out[std::string(TagName(t))] = b;
  return out;
}

std::map<Tag, uint64_t> TagBytesFromJson(const json& j) {
  std::map<Tag, uint64_t> out;
  if (!j.is_object()) return out;
  for (const auto& [k, v] : j.items()) {
    auto t = ParseTag(k);
    if (t && v.is_number_unsigned()) out[*t] = v.get<uint64_t>();
  }
  return out;
}

json EventToJson(const Event& event) {
  return std::visit(
      [](const auto& e) -> json {
        using T = std::decay_t<decltype(e)>;
        json j;
        if constexpr (std::is_same_v<T, RequestPhase>) {
          j = {{"e", "request"}, {"phase", PhaseName(e.phase)}};
        } else if constexpr (std::is_same_v<T, Hello>) {
          j = Who(e.worker);
          j["e"] = "hello";
          j["sizes"] = TagBytesToJson(e.tag_sizes);
          j["resident"] = TagBytesToJson(e.resident);
          j["devices"] = DevicesToJson(e.devices);
        } else if constexpr (std::is_same_v<T, Ack> || std::is_same_v<T, WorkerError>) {
          j = Who(e.worker);
          j["e"] = std::is_same_v<T, Ack> ? "ack" : "error";
          j["id"] = e.command_id;
          j["resident"] = TagBytesToJson(e.resident);
          j["devices"] = DevicesToJson(e.devices);
          if constexpr (std::is_same_v<T, WorkerError>) j["message"] = e.message;
        } else if constexpr (std::is_same_v<T, Timeout>) {
          j = Who(e.worker);
          j["e"] = "timeout";
          j["id"] = e.command_id;
        } else {
          j = Who(e.worker);
          j["e"] = "died";
          j["cause"] = e.cause;
        }
        j["at"] = e.at;
        return j;
      },
      event);
}

StatusOr<Event> EventFromJson(const json& j) {
  if (!j.is_object() || !j.contains("e") || !j["e"].is_string()) return InvalidArgument("not a handoff event");
  const std::string e = j["e"].get<std::string>();
  const double at = j.value("at", 0.0);
  const WorkerId w{j.value("role", ""), j.value("rank", 0)};
  const uint64_t id = j.value("id", uint64_t{0});
  if (e == "request") {
    TANDEM_ASSIGN_OR_RETURN(Phase p, ParsePhaseName(j.value("phase", "")));
    return Event{RequestPhase{p, at}};
  }
  if (e == "hello") {
    return Event{Hello{w, TagBytesFromJson(j.value("sizes", json::object())),
                       TagBytesFromJson(j.value("resident", json::object())),
                       DevicesFromJson(j.value("devices", json::array())), at}};
  }
  if (e == "ack") {
    return Event{Ack{w, id, TagBytesFromJson(j.value("resident", json::object())),
                     DevicesFromJson(j.value("devices", json::array())), at}};
  }
  if (e == "error") {
    return Event{WorkerError{w, id, j.value("message", ""), TagBytesFromJson(j.value("resident", json::object())),
                             DevicesFromJson(j.value("devices", json::array())), at}};
  }
  if (e == "timeout") return Event{Timeout{w, id, at}};
  if (e == "died") return Event{WorkerDied{w, j.value("cause", ""), at}};
  return InvalidArgument("unknown handoff event \"" + e + "\"");
}

StatusOr<Phase> ParsePhaseName(std::string_view name) {
  if (name == "INIT") return Phase{};
  if (name == "ROLLOUT") return Phase{PhaseKind::kRollout};
  if (name == "TRAIN") return Phase{PhaseKind::kTrain};
  auto inner = [&](std::string_view prefix) -> std::optional<int64_t> {
    if (name.size() < prefix.size() + 2 || name.substr(0, prefix.size()) != prefix || name.back() != ')') {
      return std::nullopt;
    }
    return Number(name.substr(prefix.size(), name.size() - prefix.size() - 1));
  };
  if (auto t = inner("TEACHER(")) return Phase{PhaseKind::kTeacher, static_cast<int>(*t)};
  if (auto v = inner("SYNC(")) return Phase{PhaseKind::kSync, 0, *v};
  return InvalidArgument(fmt::format("unknown phase \"{}\"", name));
}

StatusOr<Phase> ParsePhaseRequest(std::string_view text, int64_t version, const GroupConfig& group) {
  if (text == "rollout") return Phase{PhaseKind::kRollout};
  if (text == "train") return Phase{PhaseKind::kTrain};
  if (text == "sync") {
    if (version < 1) return InvalidArgument("phase sync needs a weights version >= 1");
    return Phase{PhaseKind::kSync, 0, version};
  }
  if (text == "teacher") return Phase{PhaseKind::kTeacher, 0};
  if (text.substr(0, 8) == "teacher:") {
    const std::string_view name = text.substr(8);
    for (int i = 0; i < group.TeacherCount(); ++i) {
      if (group.TeacherName(i) == name) return Phase{PhaseKind::kTeacher, i};
    }
    return InvalidArgument(fmt::format("no teacher role \"{}\" in the group", name));
  }
  auto canonical = ParsePhaseName(text);
  if (canonical.ok()) return canonical;
  return InvalidArgument(fmt::format(
      "unknown phase \"{}\": expected rollout, train, sync (with a version), teacher or teacher:<role>", text));
}

}  // namespace tandem::handoff
