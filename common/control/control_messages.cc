// Control protocol messages, version 1: encoders, the environment's hello
// and the worker's reading of daemon lines (control_messages.h;
// schemas/control.schema.json). Decoders of worker lines: control_decode.cc.
#include "common/control/control_messages.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>

namespace tandem::control {

using nlohmann::json;

std::string Endpoint::ToString() const {
  if (kind == Kind::kUnix) return "unix:" + path;
  return "tcp:" + host + ":" + std::to_string(port);
}

StatusOr<Endpoint> ParseEndpoint(std::string_view text) {
  Endpoint ep;
  if (text.starts_with("unix:")) {
    ep.kind = Endpoint::Kind::kUnix;
    ep.path = std::string(text.substr(5));
    if (ep.path.empty()) return InvalidArgument("control endpoint '" + std::string(text) + "': empty socket path");
    if (ep.path.size() >= 108) return InvalidArgument("control endpoint '" + std::string(text) + "': socket path longer than 107 bytes");
    return ep;
  }
  if (text.starts_with("tcp:")) {
    std::string_view rest = text.substr(4);
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0)
      return InvalidArgument("control endpoint '" + std::string(text) + "': expected tcp:HOST:PORT");
    ep.kind = Endpoint::Kind::kTcp;
    ep.host = std::string(rest.substr(0, colon));
    std::string_view port = rest.substr(colon + 1);
    unsigned value = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || p != port.data() + port.size() || value == 0 || value > 65535)
      return InvalidArgument("control endpoint '" + std::string(text) + "': bad port '" + std::string(port) + "'");
    ep.port = static_cast<uint16_t>(value);
    return ep;
  }
  return InvalidArgument("control endpoint '" + std::string(text) + "': expected unix:PATH or tcp:HOST:PORT");
}

json ToJson(const Residency& r) {
  json tags = json::object();
  for (const auto& [name, bytes] : r.tags) tags[name] = bytes;
  return {{"tags", tags},
          {"device", {{"index", r.device.index}, {"used", r.device.used},
                      {"total", r.device.total}, {"source", r.device.source}}}};
}

json ToJson(const Hello& h, const Residency& r) {
  json tags = json::array();
  for (const auto& t : h.tags) tags.push_back({{"name", t.name}, {"bytes", t.bytes}, {"backup", t.backup}});
  json j = {{"type", "hello"},          {"protocol", kProtocolVersion}, {"role", h.role},
            {"rank", h.rank},           {"world_size", h.world_size},   {"pid", static_cast<int>(getpid())},
            {"devices", h.devices},     {"capabilities", h.capabilities},
            {"tags", tags},             {"residency", ToJson(r)}};
  if (!h.job_id.empty()) j["job_id"] = h.job_id;
  if (!h.task_id.empty()) j["task_id"] = h.task_id;
  if (!h.token.empty()) j["token"] = h.token;
  return j;
}

namespace {
std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}
int EnvInt(const char* name, int fallback) {
  std::string v = Env(name);
  int out = fallback;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size()) return fallback;
  return out;
}
}  // namespace

Hello HelloFromEnvironment() {
  Hello h;
  h.job_id = Env("TANDEM_JOB_ID");
  h.task_id = Env("TANDEM_TASK_ID");
  h.token = Env("TANDEM_CONTROL_TOKEN");
  h.role = Env("TANDEM_ROLE");
  h.rank = EnvInt("TANDEM_RANK", 0);
  h.world_size = EnvInt("TANDEM_WORLD_SIZE", 1);
  std::string visible = Env("CUDA_VISIBLE_DEVICES");
  int n = 0;
  for (size_t start = 0; !visible.empty() && start <= visible.size();) {
    size_t comma = visible.find(',', start);
    if (comma == std::string::npos) comma = visible.size();
    if (comma > start) h.devices.push_back(n++);
    start = comma + 1;
  }
  return h;
}

StatusOr<std::vector<std::string>> Command::Tags() const {
  std::vector<std::string> out;
  auto it = body.find("tags");
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_array()) return InvalidArgument(type + ".tags: expected an array of strings");
  for (const auto& t : *it) {
    if (!t.is_string()) return InvalidArgument(type + ".tags: expected an array of strings");
    out.push_back(t.get<std::string>());
  }
  return out;
}

StatusOr<std::string> Command::Mode() const {
  auto it = body.find("mode");
  const std::string expected = type + ".mode: expected \"abort\", \"retract\" or \"in_place\"";
  if (it == body.end() || !it->is_string()) return InvalidArgument(expected);
  std::string m = it->get<std::string>();
  if (m != "abort" && m != "retract" && m != "in_place") return InvalidArgument(expected + ", got \"" + m + "\"");
  return m;
}

StatusOr<int64_t> Command::Version() const {
  auto it = body.find("version");
  if (it == body.end() || !it->is_number_integer() || it->get<int64_t>() < 0)
    return InvalidArgument(type + ".version: expected a non-negative integer");
  return it->get<int64_t>();
}

StatusOr<std::string> Command::Source() const {
  auto it = body.find("source");
  if (it == body.end() || !it->is_string()) return InvalidArgument(type + ".source: expected a string");
  return it->get<std::string>();
}

ParsedLine ParseDaemonLine(std::string_view line) {
  ParsedLine out;
  auto parsed = ParseLine(line, &out.id);
  if (!parsed.ok()) {
    out.status = parsed.status();
    return out;
  }
  Command c;
  c.type = parsed->type;
  // welcome and error carry no command id requirement of their own.
  const bool needs_id = c.type != "welcome" && c.type != "error";
  if (needs_id && !out.id) {
    out.status = InvalidArgument("malformed: " + c.type + " without an integer \"id\"");
    return out;
  }
  c.id = out.id.value_or(-1);
  c.body = std::move(parsed->body);
  out.command = std::move(c);
  return out;
}

json MakeAck(const Command& c, const Residency& r, int64_t duration_us, const json& detail) {
  json j = {{"type", "ack"}, {"id", c.id}, {"command", c.type},
            {"duration_us", duration_us}, {"residency", ToJson(r)}};
  if (detail.is_object() && !detail.empty()) j["detail"] = detail;
  return j;
}

json MakeError(std::optional<int64_t> id, std::string_view command, std::string_view code,
               std::string_view message, const std::optional<Residency>& r) {
  json j = ErrorLine(id, code, message, command);
  if (r) j["residency"] = ToJson(*r);
  return j;
}

json MakePhaseDone(int64_t id, std::string_view phase, int64_t duration_us) {
  return {{"type", "phase_done"}, {"id", id}, {"phase", phase}, {"duration_us", duration_us}};
}

std::string Command::StringField(const char* name) const {
  auto it = body.find(name);
  return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace tandem::control
