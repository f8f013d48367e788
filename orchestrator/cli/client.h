// A synchronous client of tandemd's HTTP API, over the unix socket or TCP
// with a bearer token. Used by the CLI and the integration tests.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::cli {

struct Endpoint {
  std::string unix_path;   // used when non-empty
  std::string host;        // else TCP
  int port = 0;
  std::string token;       // sent as "Authorization: Bearer <token>" when non-empty
};

struct Response {
  int status = 0;
  std::string body;
  nlohmann::json Json() const;  // discarded json on parse failure
};

class Client {
 public:
  explicit Client(Endpoint ep, int timeout_s = 30) : ep_(std::move(ep)), timeout_s_(timeout_s) {}
  // One request, whole response. kUnavailable when the daemon cannot be reached.
  StatusOr<Response> Request(const std::string& method, const std::string& target,
                             const std::string& body = "");
  // A streaming GET: `on_status` (when given) gets the status code once the
  // headers are in; `on_data` gets body bytes as soon as each read returns
  // them (a line the server sent is handed over without waiting for more);
  // returns the status code when the server ends the response (or the error).
  StatusOr<int> Stream(const std::string& target, const std::function<void(std::string_view)>& on_data,
                       const std::function<void(int)>& on_status = nullptr);

 private:
  Endpoint ep_;
  int timeout_s_;
};

// A job API error body -> "message" (+ one line per detail), else the raw body.
std::string ErrorText(const Response& r);

}  // namespace tandem::cli
