// The OpenAI error body (docs/agents.md "Errors"): every error the proxy
// answers is {"error": {"message", "type", "param", "code"}}, as OpenAI's
// API and its clients expect. Torch-free; no I/O.
//
// Parsers here return Status values whose message starts with the path of
// the field at fault ("messages[1].content: expected a string or a list of
// parts, got number"); ApiErrorFrom turns one into the HTTP status and the
// body: the path becomes "param", the status code "code".
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::agents {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";  // OpenAI's: invalid_request_error, server_error, ...
  std::string param;                           // the field's path, "" when none
  std::string code;                            // "" is sent as null
};

// InvalidArgument -> 400 invalid_request_error, code "invalid_value";
// FailedPrecondition -> 400, code "unsupported_value" (a valid OpenAI field
// the proxy cannot honour); NotFound -> 404; ResourceExhausted -> 429
// "too_many_sessions"; Unavailable -> 503 server_error; DeadlineExceeded ->
// 504 "timeout"; anything else -> 500 server_error. `param` is the
// message's prefix before ": " when that prefix reads as a field path.
ApiError ApiErrorFrom(const Status& status);

nlohmann::json ApiErrorJson(const ApiError& error);

}  // namespace tandem::agents
