// One POST to a rollout replica, asynchronous on the proxy's io_context
// (docs/agents.md "Balancing", "Timeouts"). Torch-free.
//
// Connect, write and read share one deadline: a replica that never answers
// ends as kTimeout at the deadline, never a hang. The answer is read with a
// bound on its size. Outcomes, as the proxy acts on them:
//   kOk            HTTP 200, the body;
//   kReplicaDown   refused, reset, closed before a whole answer, or HTTP 503:
//                  the replica cannot serve now, another may (retried);
//   kRefused       another HTTP status (400: the rollout refused the request;
//                  not retried, the body's message relayed);
//   kTimeout       the deadline passed;
//   kCancelled     Cancel() (the client went away, or the proxy stops).
// With `on_body`, a 200 answer's chunked body is handed to it as it arrives
// (on the io thread, in order; a streamed /generate), not kept: the result's
// body is then empty, and the size bound applies to what the caller keeps.
// The callback runs exactly once, on the io thread. Cancel() is idempotent
// and must be called on the io thread; closing the connection makes the
// rollout abort the request (docs/inference.md "Disconnects").
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>

namespace tandem::agents {

struct UpstreamResult {
  enum class Outcome { kOk, kReplicaDown, kRefused, kTimeout, kCancelled };
  Outcome outcome = Outcome::kOk;
  int http_status = 0;
  std::string body;
  std::string error;  // what went wrong, for logs and messages
};

class UpstreamCall {
 public:
  virtual ~UpstreamCall() = default;
  virtual void Cancel() = 0;
};

std::shared_ptr<UpstreamCall> PostAsync(boost::asio::io_context& io, const std::string& host, int port,
                                        const std::string& target, std::string body,
                                        std::chrono::steady_clock::time_point deadline, size_t max_bytes,
                                        std::function<void(UpstreamResult)> done,
                                        std::function<void(std::string_view)> on_body = nullptr);

}  // namespace tandem::agents
