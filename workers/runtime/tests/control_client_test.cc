// The control client (control_client.h) against a real asio server on a unix
// socket (test_server.h): handshake, each command, retries, malformed and
// over-long lines, a server that never answers, a server that goes away.
#include "workers/runtime/control_client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <future>
#include <thread>

#include "test_server.h"

namespace tandem::control {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::TestServer;

// A worker on its own thread: handlers record what they saw; residency is a
// fixed table the handlers change, so answers can be checked.
struct FakeWorker {
  std::map<std::string, uint64_t> tags = {{"weights", 1000}, {"kv_cache", 2000}};
  std::vector<std::string> seen;
  std::mutex mu;

  ControlClient::Options Options(const std::string& endpoint) {
    ControlClient::Options o;
    o.endpoint = *ParseEndpoint(endpoint);
    o.hello.role = "rollout";
    o.hello.rank = 3;
    o.hello.devices = {0, 1};
    o.hello.tags = {{"weights", 1000, true}, {"kv_cache", 2000, false}};
    o.residency = [this] {
      std::lock_guard<std::mutex> l(mu);
      Residency r;
      r.tags = tags;
      r.device = {0, tags["weights"] + tags["kv_cache"], 1 << 20, "pool"};
      return r;
    };
    o.connect_timeout = milliseconds(5000);
    o.handshake_timeout = milliseconds(5000);
    return o;
  }
  void Register(ControlClient& c) {
    auto record = [this](const Command& cmd) {
      std::lock_guard<std::mutex> l(mu);
      seen.push_back(cmd.type);
    };
    c.On("pause", [=](const Command& cmd) -> StatusOr<json> {
      record(cmd);
      TANDEM_ASSIGN_OR_RETURN(auto mode, cmd.Mode());
      return json{{"mode", mode}};
    });
    c.On("release", [=, this](const Command& cmd) -> StatusOr<json> {
      record(cmd);
      TANDEM_ASSIGN_OR_RETURN(auto ts, cmd.Tags());
      std::lock_guard<std::mutex> l(mu);
      for (const auto& t : ts) {
        if (!tags.count(t)) return NotFound("tag " + t);
        tags[t] = 0;
      }
      return json::object();
    });
    c.On("resume", [=, this](const Command& cmd) -> StatusOr<json> {
      record(cmd);
      std::lock_guard<std::mutex> l(mu);
      tags = {{"weights", 1000}, {"kv_cache", 2000}};
      return json::object();
    });
    c.On("publish_weights", [=](const Command& cmd) -> StatusOr<json> {
      record(cmd);
      TANDEM_ASSIGN_OR_RETURN(auto v, cmd.Version());
      return json{{"version", v}};
    });
    c.On("load_weights", [=](const Command& cmd) -> StatusOr<json> {
      record(cmd);
      TANDEM_ASSIGN_OR_RETURN(auto v, cmd.Version());
      TANDEM_ASSIGN_OR_RETURN(auto s, cmd.Source());
      return json{{"version", v}, {"source", s}};
    });
    c.On("continue", [=](const Command& cmd) -> StatusOr<json> {
      record(cmd);
      return json::object();
    });
  }
};

TEST(ControlClient, HandshakeCarriesRoleTagsAndResidency) {
  TestServer server;
  FakeWorker w;
  ControlClient client(w.Options(server.endpoint()));
  w.Register(client);
  auto connected = std::async(std::launch::async, [&] { return client.Connect(); });
  auto hello = server.Handshake();
  ASSERT_TRUE(hello);
  EXPECT_TRUE(connected.get().ok());
  EXPECT_EQ((*hello)["protocol"], 1);
  EXPECT_EQ((*hello)["role"], "rollout");
  EXPECT_EQ((*hello)["rank"], 3);
  EXPECT_EQ((*hello)["devices"], json::array({0, 1}));
  EXPECT_EQ((*hello)["tags"][0]["name"], "weights");
  EXPECT_EQ((*hello)["tags"][0]["bytes"], 1000);
  EXPECT_EQ((*hello)["tags"][0]["backup"], true);
  EXPECT_EQ((*hello)["residency"]["tags"]["kv_cache"], 2000);
  // Capabilities list the registered handlers and what the worker sends.
  auto caps = (*hello)["capabilities"].get<std::vector<std::string>>();
  for (const char* c : {"pause", "release", "resume", "publish_weights", "load_weights", "continue", "shutdown",
                        "request_phase", "metrics"})
    EXPECT_NE(std::find(caps.begin(), caps.end(), c), caps.end()) << c;
}

TEST(ControlClient, AnswersEveryCommandWithResidency) {
  TestServer server;
  FakeWorker w;
  ControlClient client(w.Options(server.endpoint()));
  w.Register(client);
  std::thread worker([&] {
    if (client.Connect().ok()) (void)client.Serve();
  });
  ASSERT_TRUE(server.Handshake());

  auto a = server.Command("pause", {{"mode", "retract"}});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["type"], "ack");
  EXPECT_EQ((*a)["command"], "pause");
  EXPECT_EQ((*a)["detail"]["mode"], "retract");

  a = server.Command("release", {{"tags", {"kv_cache"}}});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["type"], "ack");
  EXPECT_EQ((*a)["residency"]["tags"]["kv_cache"], 0);
  EXPECT_EQ((*a)["residency"]["tags"]["weights"], 1000);
  EXPECT_EQ((*a)["residency"]["device"]["used"], 1000);
  EXPECT_EQ((*a)["residency"]["device"]["total"], 1 << 20);
  EXPECT_EQ((*a)["residency"]["device"]["source"], "pool");

  a = server.Command("resume", {{"tags", {"kv_cache"}}});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["residency"]["tags"]["kv_cache"], 2000);

  a = server.Command("publish_weights", {{"version", 7}});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["detail"]["version"], 7);
  a = server.Command("load_weights", {{"version", 7}, {"source", "shm:/dev/shm/w7"}});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["detail"]["source"], "shm:/dev/shm/w7");
  a = server.Command("continue");
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["type"], "ack");

  // A handler's error becomes an error line with the protocol's code.
  a = server.Command("release", {{"tags", {"nope"}}});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["type"], "error");
  EXPECT_EQ((*a)["code"], "not_found");
  EXPECT_TRUE((*a).contains("residency"));
  a = server.Command("pause", {{"mode", "sideways"}});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["code"], "invalid_argument");
  a = server.Command("load_weights", {{"version", -1}, {"source", "x"}});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["code"], "invalid_argument");

  a = server.Command("shutdown");
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["type"], "ack");
  worker.join();
  EXPECT_TRUE(client.shutdown_requested());
}

TEST(ControlClient, RepeatedIdIsAnsweredAgainWithoutRerunningTheHandler) {
  TestServer server;
  FakeWorker w;
  ControlClient client(w.Options(server.endpoint()));
  w.Register(client);
  std::thread worker([&] {
    if (client.Connect().ok()) (void)client.Serve();
  });
  ASSERT_TRUE(server.Handshake());
  server.Send({{"type", "release"}, {"id", 42}, {"tags", {"weights"}}});
  auto first = server.Read();
  server.Send({{"type", "release"}, {"id", 42}, {"tags", {"weights"}}});
  auto second = server.Read();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(*first, *second);
  ASSERT_TRUE(server.Command("shutdown"));
  worker.join();
  std::lock_guard<std::mutex> l(w.mu);
  EXPECT_EQ(std::count(w.seen.begin(), w.seen.end(), "release"), 1);
}

TEST(ControlClient, MalformedUnknownAndOverlongLinesGetErrorsNotCrashes) {
  TestServer server;
  FakeWorker w;
  auto opts = w.Options(server.endpoint());
  opts.max_line_bytes = 4096;
  ControlClient client(opts);
  w.Register(client);
  std::thread worker([&] {
    if (client.Connect().ok()) (void)client.Serve();
  });
  ASSERT_TRUE(server.Handshake());

  server.SendLine("{not json");
  auto e = server.Read();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["type"], "error");
  EXPECT_EQ((*e)["code"], "malformed");
  EXPECT_TRUE((*e)["id"].is_null());

  server.SendLine("[1,2,3]");
  e = server.Read();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["code"], "malformed");

  server.SendLine(R"({"type":"release"})");  // no id
  e = server.Read();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["code"], "malformed");

  server.SendLine(R"({"type":"release","id":5,"tags":"weights"})");  // tags not an array
  e = server.Read();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["id"], 5);
  EXPECT_EQ((*e)["code"], "invalid_argument");

  e = server.Command("frobnicate");
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["code"], "unknown_command");
  EXPECT_EQ((*e)["command"], "frobnicate");

  server.SendLine(std::string(10000, 'x'));  // over max_line_bytes, in pieces
  e = server.Read();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["code"], "line_too_long");
  server.SendLine(R"({"type":"release","id":6,"tags":[)" + std::string(5000, ' ') + "]}");
  e = server.Read();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["code"], "line_too_long");

  // Still serving normally afterwards.
  auto a = server.Command("continue");
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["type"], "ack");
  ASSERT_TRUE(server.Command("shutdown"));
  worker.join();
}

TEST(ControlClient, ServerThatNeverWelcomesTimesOut) {
  TestServer server;
  FakeWorker w;
  auto opts = w.Options(server.endpoint());
  opts.handshake_timeout = milliseconds(300);
  ControlClient client(opts);
  auto connected = std::async(std::launch::async, [&] { return client.Connect(); });
  ASSERT_TRUE(server.Accept());
  auto start = std::chrono::steady_clock::now();
  Status st = connected.get();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_FALSE(client.connected());
}

TEST(ControlClient, NobodyListeningIsUnavailableAfterTheConnectTimeout) {
  FakeWorker w;
  auto opts = w.Options("unix:/tmp/tandem-no-such-dir/control.sock");
  opts.connect_timeout = milliseconds(200);
  ControlClient client(opts);
  Status st = client.Connect();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
}

TEST(ControlClient, RefusedVersionIsAFailedPrecondition) {
  TestServer server;
  FakeWorker w;
  ControlClient client(w.Options(server.endpoint()));
  auto connected = std::async(std::launch::async, [&] { return client.Connect(); });
  ASSERT_TRUE(server.Accept());
  ASSERT_TRUE(server.Read());
  server.Send({{"type", "welcome"}, {"protocol", 99}});
  EXPECT_EQ(connected.get().code(), StatusCode::kFailedPrecondition);
}

TEST(ControlClient, ServerGoneMidSessionIsUnavailableAndReconnectSaysHelloAgain) {
  TestServer server;
  FakeWorker w;
  ControlClient client(w.Options(server.endpoint()));
  w.Register(client);
  std::promise<Status> served;
  std::thread worker([&] {
    Status st = client.Connect();
    if (st.ok()) st = client.Serve();
    served.set_value(st);
  });
  ASSERT_TRUE(server.Handshake());
  server.CloseConnection();
  Status st = served.get_future().get();
  worker.join();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();

  // The worker comes back with its residency in a fresh hello.
  {
    std::lock_guard<std::mutex> l(w.mu);
    w.tags["kv_cache"] = 0;
  }
  auto again = std::async(std::launch::async, [&] { return client.Connect(); });
  auto hello = server.Handshake();
  ASSERT_TRUE(hello);
  EXPECT_TRUE(again.get().ok());
  EXPECT_EQ((*hello)["residency"]["tags"]["kv_cache"], 0);
}

TEST(ControlClient, RequestPhaseServesCommandsUntilPhaseDone) {
  TestServer server;
  FakeWorker w;
  ControlClient client(w.Options(server.endpoint()));
  w.Register(client);
  std::promise<Status> done;
  std::thread worker([&] {
    Status st = client.Connect();
    if (st.ok()) st = client.RequestPhase("train", std::nullopt, milliseconds(10'000));
    if (st.ok()) st = client.RequestPhase("bogus", std::nullopt, milliseconds(10'000));
    done.set_value(st);
  });
  ASSERT_TRUE(server.Handshake());
  auto req = server.Read();
  ASSERT_TRUE(req);
  EXPECT_EQ((*req)["type"], "request_phase");
  EXPECT_EQ((*req)["phase"], "train");
  // While the phase runs the controller answers its own commands.
  auto a = server.Command("release", {{"tags", {"kv_cache"}}});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["type"], "ack");
  server.Send({{"type", "phase_done"}, {"id", (*req)["id"]}, {"phase", "train"}});
  req = server.Read();
  ASSERT_TRUE(req);
  EXPECT_EQ((*req)["phase"], "bogus");
  server.Send({{"type", "error"}, {"id", (*req)["id"]}, {"code", "invalid_argument"}, {"message", "no phase bogus"}});
  Status st = done.get_future().get();
  worker.join();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("no phase bogus"), std::string::npos) << st.message();
}

// A busy group's refusal (`unavailable`) is kUnavailable with the
// connection kept, so that the controller asks again on it.
TEST(ControlClient, RequestPhaseRefusedAsUnavailableKeepsTheConnection) {
  TestServer server;
  FakeWorker w;
  ControlClient client(w.Options(server.endpoint()));
  w.Register(client);
  std::promise<Status> done;
  std::thread worker([&] {
    Status st = client.Connect();
    if (st.ok()) st = client.RequestPhase("train", std::nullopt, milliseconds(10'000));
    done.set_value(st);
  });
  ASSERT_TRUE(server.Handshake());
  auto req = server.Read();
  ASSERT_TRUE(req);
  server.Send({{"type", "error"}, {"id", (*req)["id"]}, {"code", "unavailable"},
               {"message", "busy: the group is recovering entering ROLLOUT"}});
  Status st = done.get_future().get();
  worker.join();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("busy: the group is recovering"), std::string::npos) << st.message();
  EXPECT_TRUE(client.connected());
}

TEST(ControlClient, MetricsLineIsSent) {
  TestServer server;
  FakeWorker w;
  ControlClient client(w.Options(server.endpoint()));
  auto connected = std::async(std::launch::async, [&] { return client.Connect(); });
  ASSERT_TRUE(server.Handshake());
  ASSERT_TRUE(connected.get().ok());
  ASSERT_TRUE(client.SendMetrics({{"loss", 0.5}}, 3).ok());
  auto m = server.Read();
  ASSERT_TRUE(m);
  EXPECT_EQ((*m)["type"], "metrics");
  EXPECT_EQ((*m)["step"], 3);
  EXPECT_EQ((*m)["values"]["loss"], 0.5);
}

TEST(ControlEndpoint, ParsesUnixAndTcpAndRejectsTheRest) {
  auto u = ParseEndpoint("unix:/run/t.sock");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->path, "/run/t.sock");
  auto t = ParseEndpoint("tcp:127.0.0.1:7000");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "127.0.0.1");
  EXPECT_EQ(t->port, 7000);
  EXPECT_FALSE(ParseEndpoint("tcp:host").ok());
  EXPECT_FALSE(ParseEndpoint("tcp:host:99999").ok());
  EXPECT_FALSE(ParseEndpoint("http://x").ok());
  EXPECT_FALSE(ParseEndpoint("unix:").ok());
}

}  // namespace
}  // namespace tandem::control
