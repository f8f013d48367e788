// The role host (role_host.h) against a real asio server on a unix socket
// (test_server.h): a handler's exception is an error answer and the loop
// goes on; shutdown ends the loop; a daemon that goes away is reconnected
// to with a fresh hello, or, without a reconnect window, ends it; Stop()
// ends it within its poll.
#include "workers/runtime/role_host.h"

#include <gtest/gtest.h>

#include <future>
#include <stdexcept>

#include "test_server.h"

namespace tandem::control {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::TestServer;

RoleHost::Options HostOptions(const TestServer& server, milliseconds reconnect_window) {
  RoleHost::Options o;
  o.client.endpoint = *ParseEndpoint(server.endpoint());
  o.client.hello.role = "rollout";
  o.client.hello.tags = {{"weights", 64, true}};
  o.client.residency = [] {
    Residency r;
    r.tags = {{"weights", 64}};
    return r;
  };
  o.client.connect_timeout = milliseconds(5000);
  o.reconnect_window = reconnect_window;
  o.poll = milliseconds(50);
  return o;
}

// Connects `host` (Start blocks on the handshake) while the server answers it.
void StartAgainst(RoleHost& host, TestServer& server) {
  auto started = std::async(std::launch::async, [&] { return host.Start(); });
  ASSERT_TRUE(server.Handshake());
  ASSERT_TRUE(started.get().ok());
}

TEST(RoleHost, AnExceptionInAHandlerIsAnInternalErrorAndTheLoopGoesOn) {
  TestServer server;
  RoleHost host(HostOptions(server, milliseconds(0)));
  host.On("release", [](const Command&) -> StatusOr<json> { throw std::runtime_error("CUDA error: out of memory"); });
  host.On("resume", [](const Command&) -> StatusOr<json> { return json{{"mapped_bytes", 64}}; });
  StartAgainst(host, server);

  auto a = server.Command("release", {{"tags", {"weights"}}});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["type"], "error");
  EXPECT_EQ((*a)["code"], "internal");
  EXPECT_NE((*a)["message"].get<std::string>().find("CUDA error: out of memory"), std::string::npos) << *a;
  EXPECT_EQ((*a)["residency"]["tags"]["weights"], 64);

  a = server.Command("resume", {{"tags", {"weights"}}});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["type"], "ack");
  EXPECT_EQ((*a)["detail"]["mapped_bytes"], 64);
  EXPECT_FALSE(host.done());

  a = server.Command("shutdown", {{"reason", "job done"}});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["type"], "ack");
  EXPECT_TRUE(host.Wait().ok());
  EXPECT_TRUE(host.done());
}

TEST(RoleHost, ReconnectsToADaemonThatCameBackAndEndsWithoutOne) {
  TestServer server;
  RoleHost host(HostOptions(server, milliseconds(5000)));
  host.On("continue", [](const Command&) -> StatusOr<json> { return json::object(); });
  StartAgainst(host, server);
  server.CloseConnection();
  // A fresh hello on a new connection, then commands are served again.
  auto hello = server.Handshake();
  ASSERT_TRUE(hello) << "the host did not reconnect";
  EXPECT_EQ((*hello)["role"], "rollout");
  auto a = server.Command("continue");
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["type"], "ack");

  TestServer other;
  RoleHost once(HostOptions(other, milliseconds(0)));
  StartAgainst(once, other);
  other.CloseConnection();
  const Status st = once.Wait();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
}

TEST(RoleHost, StopEndsTheLoopAndNobodyListeningFailsStart) {
  TestServer server;
  RoleHost host(HostOptions(server, milliseconds(5000)));
  StartAgainst(host, server);
  const auto t0 = std::chrono::steady_clock::now();
  host.Stop();
  EXPECT_TRUE(host.Wait().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));

  RoleHost::Options o = HostOptions(server, milliseconds(0));
  o.client.endpoint = *ParseEndpoint("unix:/nonexistent/tandem-role-host.sock");
  o.client.connect_timeout = milliseconds(200);
  RoleHost nobody(o);
  EXPECT_EQ(nobody.Start().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tandem::control
