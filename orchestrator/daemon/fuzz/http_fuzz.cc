// libFuzzer target: the HTTP request path of tandemd, from raw bytes to what
// a handler would act on — Beast's parser under the server's limits, target
// and query decoding, and for a job submission, JSON and job-spec parsing.
// Nothing here may crash, leak or trip a sanitizer on any input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "orchestrator/daemon/http_server.h"
#include "orchestrator/spec/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  tandem::daemon::HttpLimits limits;
  limits.max_body_bytes = 64 * 1024;
  tandem::daemon::HttpRequest req;
  if (!tandem::daemon::ParseHttpRequest(bytes, limits, &req).ok()) return 0;
  if (req.method == "POST" && req.path == "/v1/jobs") {
    auto doc = nlohmann::json::parse(req.body, nullptr, false);
    if (!doc.is_discarded()) (void)tandem::spec::ParseJobSpec(doc);
  }
  return 0;
}
