// libFuzzer target: the HTTP request path of tandemd, from raw bytes to what
// a handler would act on — Beast's parser under the server's limits, target
// and query decoding, the JSON error answer that embeds the decoded path
// (invalid UTF-8 must not throw), and for a body, depth-bounded JSON parsing
// and job-spec parsing. Nothing here may crash, leak or trip a sanitizer on
// any input. Seeds: tests/fuzz/http/ (invalid UTF-8 paths, deep JSON).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "orchestrator/daemon/http_server.h"
#include "orchestrator/spec/job_spec.h"

namespace {

// Answers into a string, as a session would put them on the wire.
class CapturingExchange : public tandem::daemon::Exchange {
 public:
  void Respond(int, const std::string&, std::string body) override { out += body; }
  void BeginStream(const std::string&) override {}
  void Write(std::string data) override { out += data; }
  void End() override {}
  bool closed() const override { return false; }
  void OnClose(std::function<void()>) override {}
  bool backlogged() const override { return false; }
  void OnDrain(std::function<void()>) override {}
  std::string out;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  tandem::daemon::HttpLimits limits;
  limits.max_body_bytes = 64 * 1024;
  tandem::daemon::HttpRequest req;
  if (!tandem::daemon::ParseHttpRequest(bytes, limits, &req).ok()) return 0;
  // What the API answers for an unknown route or method: the path, in JSON.
  CapturingExchange ex;
  ex.RespondError(404, "not_found", "no route " + req.path, nlohmann::json{{"method", req.method}});
  if (!req.body.empty()) {
    auto doc = tandem::ParseJsonBounded<nlohmann::ordered_json>(req.body);
    if (doc.ok() && req.method == "POST" && req.path == "/v1/jobs") (void)tandem::spec::ParseJobSpec(*doc);
  }
  return 0;
}
