// One blocking HTTP/1.1 POST of a JSON body, the controller's way of
// calling a rollout (/generate) or a teacher (/score). Torch-free.
//
// Connect, write and read share one deadline (`timeout`): a server that
// never answers is a DeadlineExceeded, never a hang. A refused connection
// or a closed one is Unavailable; so is a status other than 200, whose
// message carries the body's first 300 bytes. An answer over `max_bytes`
// is refused. Every error starts with `where`. `headers` are added to the
// request as given (an Authorization header, a session id).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tandem::roles {

inline constexpr size_t kMaxResponseBytes = 256u << 20;

StatusOr<std::string> PostJson(const std::string& host, int port, const std::string& target, std::string body,
                               std::chrono::milliseconds timeout, const std::string& where,
                               size_t max_bytes = kMaxResponseBytes,
                               const std::vector<std::pair<std::string, std::string>>& headers = {});

}  // namespace tandem::roles
