// The proxy tests' client: one POST to the proxy on loopback, with the
// session in X-Session-Id when given (agents_proxy_test, agents_rollout_test).
#pragma once

#include <unistd.h>

#include <chrono>
#include <string>

#include "workers/inference/tests/http_test_client.h"

namespace tandem::agents::testing {

inline inference::testing::HttpReply PostToProxy(int port, const std::string& path, const std::string& body,
                                   const std::string& session, std::chrono::milliseconds timeout) {
  const int fd = inference::testing::ConnectTcp(port);
  if (fd < 0) return {};
  inference::testing::HttpReply r;
  const std::string headers = session.empty() ? "" : "X-Session-Id: " + session + "\r\n";
  if (inference::testing::SendAll(fd, inference::testing::RequestText("POST", path, body, headers)))
    r = inference::testing::ParseReply(inference::testing::ReadUntilClosed(fd, timeout));
  ::close(fd);
  return r;
}

}  // namespace tandem::agents::testing
