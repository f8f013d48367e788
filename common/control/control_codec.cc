// The control protocol's line codec (control_codec.h).
#include "common/control/control_codec.h"

#include "common/bounded_json.h"

namespace tandem::control {

using nlohmann::json;

StatusOr<ParsedObject> ParseLine(std::string_view line, std::optional<int64_t>* id_out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.size() >= kDefaultMaxLineBytes) return InvalidArgument("malformed: line longer than the limit");
  if (!JsonDepthWithin(line, kMaxDepth))
    return InvalidArgument("malformed: nested deeper than " + std::to_string(kMaxDepth) + " levels");
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("malformed: expected a JSON object with a string \"type\"");
  ParsedObject out;
  if (auto id = j.find("id"); id != j.end() && id->is_number_integer()) {
    out.id = id->get<int64_t>();
    if (id_out) *id_out = out.id;
  }
  auto type = j.find("type");
  if (type == j.end() || !type->is_string())
    return InvalidArgument("malformed: expected a JSON object with a string \"type\"");
  out.type = type->get<std::string>();
  out.body = std::move(j);
  return out;
}

std::string_view ErrorCodeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    case StatusCode::kDataLoss: return "data_loss";
    case StatusCode::kPermissionDenied: return "unauthenticated";
    default: return "internal";
  }
}

json ErrorLine(std::optional<int64_t> id, std::string_view code, std::string_view message, std::string_view command) {
  json j = {{"type", "error"}, {"id", id ? json(*id) : json(nullptr)}, {"code", code}, {"message", message}};
  if (!command.empty()) j["command"] = command;
  return j;
}

std::string DumpLine(const json& line) { return line.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace tandem::control
