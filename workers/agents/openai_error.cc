// The OpenAI error body (openai_error.h).
#include "workers/agents/openai_error.h"

#include <cctype>

namespace tandem::agents {
namespace {

// "messages[1].content" and the like: letters, digits, _ . [ ].
bool LooksLikePath(std::string_view s) {
  if (s.empty() || s.size() > 200) return false;
  for (const char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' || c == ']')) return false;
  return true;
}

}  // namespace

ApiError ApiErrorFrom(const Status& status) {
  ApiError e;
  e.message = status.message();
  switch (status.code()) {
    case StatusCode::kInvalidArgument: e.code = "invalid_value"; break;
    case StatusCode::kFailedPrecondition: e.code = "unsupported_value"; break;
    case StatusCode::kNotFound:
      e.http_status = 404;
      e.code = "not_found";
      break;
    case StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.code = "too_many_sessions";
      break;
    case StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_error";
      e.code = "unavailable";
      break;
    case StatusCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "server_error";
      e.code = "timeout";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      e.code = "internal";
      break;
  }
  if (e.http_status == 400) {
    const size_t colon = e.message.find(": ");
    if (colon != std::string::npos && LooksLikePath(std::string_view(e.message).substr(0, colon)))
      e.param = e.message.substr(0, colon);
  }
  return e;
}

nlohmann::json ApiErrorJson(const ApiError& error) {
  nlohmann::json e = {{"message", error.message}, {"type", error.type}};
  e["param"] = error.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param);
  e["code"] = error.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.code);
  return {{"error", e}};
}

}  // namespace tandem::agents
