// The rollout worker's HTTP API against hostile and careless clients, over
// real sockets (issue #14 item 1; docs/inference.md "Limits"): bodies and
// headers over the limits (413/431), malformed requests, a request that never
// completes (read timeout), the connection cap, a client that goes away
// mid-stream or before its answer (its requests are aborted), a stream
// reader that stops reading (dropped, its request aborted, the server's
// queue bounded), concurrent clients each getting their own tokens, and a
// server stopped with requests in flight.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "workers/inference/http_api.h"
#include "workers/inference/tests/http_test_client.h"
#include "workers/inference/tests/scripted_engine.h"

namespace tandem::inference::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

template <typename F>
bool WaitFor(F&& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

class HostileClientsTest : public ::testing::Test {
 protected:
  void Start(ScriptedEngine::Options eo = {}, const std::function<void(HttpApiOptions&)>& tweak = {}) {
    engine_ = std::make_unique<ScriptedEngine>(eo);
    HttpApiOptions o;
    o.codec = std::make_shared<LetterCodec>();
    if (tweak) tweak(o);
    server_ = std::make_unique<HttpApiServer>(*engine_, o);
    const Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    port_ = server_->port();
  }
  void TearDown() override {
    for (const int fd : fds_) ::close(fd);
    server_.reset();
    engine_.reset();
  }
  int Connect(int rcvbuf = 0) {
    const int fd = ConnectTcp(port_, rcvbuf);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }
  void Close(int fd) {
    ::close(fd);
    fds_.erase(std::find(fds_.begin(), fds_.end(), fd));
  }

  std::unique_ptr<ScriptedEngine> engine_;
  std::unique_ptr<HttpApiServer> server_;
  int port_ = 0;
  std::vector<int> fds_;
};

TEST_F(HostileClientsTest, ABodyOverTheLimitIs413) {
  Start({}, [](HttpApiOptions& o) { o.http.max_body_bytes = 1024; });
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"));
  const auto r = ParseReply(ReadUntilClosed(fd, 5s));
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "payload_too_large");
  EXPECT_EQ(engine_->LastId(), 0u);
}

TEST_F(HostileClientsTest, HeadersOverTheLimitAre431) {
  Start({}, [](HttpApiOptions& o) { o.http.max_header_bytes = 1024; });
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd, "GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(2000, 'p') + "\r\n\r\n"));
  const auto r = ParseReply(ReadUntilClosed(fd, 5s));
  EXPECT_EQ(r.status, 431);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "headers_too_large");
}

TEST_F(HostileClientsTest, AMalformedRequestIs400AndTheServerGoesOn) {
  Start();
  for (const std::string& bytes : {std::string("GARBAGE\r\n\r\n"),
                                  std::string("POST /generate HTTP/1.1\r\nContent-Length: -4\r\n\r\n"),
                                  std::string("GET health HTTP/1.1\r\nHost: x\r\n\r\n"),
                                  std::string("\x00\x01\x02\r\n\r\n", 7)}) {
    const int fd = Connect();
    ASSERT_TRUE(SendAll(fd, bytes));
    const auto r = ParseReply(ReadUntilClosed(fd, 5s));
    EXPECT_EQ(r.status, 400) << bytes;
    EXPECT_EQ(json::parse(r.body, nullptr, false)["error"]["code"], "bad_request") << bytes;
    Close(fd);
  }
  EXPECT_EQ(Request(port_, "GET", "/health").status, 200);
}

TEST_F(HostileClientsTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  Start();
  const int fd = Connect();
  for (int i = 0; i < 4; ++i) {
    const std::string body = R"({"input_ids": [)" + std::to_string(i + 1) + R"(], "sampling_params": {"max_new_tokens": 2}})";
    ASSERT_TRUE(SendAll(fd, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
                                "\r\n\r\n" + body));
    const auto r = ReadResponse(fd, 5s);
    ASSERT_EQ(r.status, 200) << "request " << i;
    EXPECT_EQ(json::parse(r.body)["output_ids"], json({i + 2, i + 3})) << "request " << i;
  }
  EXPECT_EQ(engine_->AbortCalls(), 0u);  // the peer watch took none of them for a disconnect
}

TEST_F(HostileClientsTest, AClientThatExpects100ContinueGetsIt) {
  Start();
  const int fd = Connect();
  const std::string body = R"({"input_ids": [1], "sampling_params": {"max_new_tokens": 2}})";
  ASSERT_TRUE(SendAll(fd, "POST /generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\nExpect: 100-continue\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n"));
  EXPECT_EQ(ReadUntil(fd, "\r\n\r\n", 5s), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(SendAll(fd, body));
  const auto r = ParseReply(ReadUntilClosed(fd, 5s));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body, nullptr, false)["output_ids"], json({2, 3}));
}

TEST_F(HostileClientsTest, ARequestThatNeverCompletesIsClosedAfterTheReadTimeout) {
  Start({}, [](HttpApiOptions& o) { o.http.read_timeout_s = 1; });
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{"));
  const auto t0 = std::chrono::steady_clock::now();
  bool eof = false;
  EXPECT_EQ(ReadUntilClosed(fd, 5s, &eof), "");
  EXPECT_TRUE(eof);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 800ms);
  EXPECT_LT(waited, 4s);
  EXPECT_EQ(engine_->LastId(), 0u);
}

TEST_F(HostileClientsTest, ConnectionsBeyondTheCapAreClosedAtOnce) {
  Start({}, [](HttpApiOptions& o) { o.http.max_connections = 3; });
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(Connect());
  ASSERT_TRUE(WaitFor([&] { return server_->http_counters().open_connections.load() == 3; }, 5s));
  const int extra = Connect();
  ASSERT_GE(extra, 0);
  bool eof = false;
  EXPECT_EQ(ReadUntilClosed(extra, 5s, &eof), "");
  EXPECT_TRUE(eof);
  EXPECT_GE(server_->http_counters().refused_connections.load(), 1u);
  Close(idle[0]);
  EXPECT_TRUE(WaitFor([&] { return Request(port_, "GET", "/health").status == 200; }, 5s));
}

TEST_F(HostileClientsTest, AClientThatGoesAwayMidStreamHasItsRequestAborted) {
  Start({.step = std::chrono::milliseconds(2)});
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd, RequestText("POST", "/generate", R"({"input_ids": [1], "sampling_params": {"max_new_tokens": 250}, "stream": true})")));
  ASSERT_NE(ReadUntil(fd, "data: ", 5s).find("data: "), std::string::npos);
  const RequestId id = engine_->LastId();
  ASSERT_NE(id, 0u);
  Close(fd);
  EXPECT_TRUE(WaitFor([&] { return engine_->AbortCalled(id); }, 5s));
  EXPECT_TRUE(WaitFor([&] { return engine_->Running() == 0; }, 5s));  // well before its 250 tokens (500 ms)
  EXPECT_EQ(server_->open_generate_calls(), 0);
}

TEST_F(HostileClientsTest, AClientThatGoesAwayBeforeItsAnswerHasItsRequestsAborted) {
  Start({.step = std::chrono::milliseconds(2)});
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd, RequestText("POST", "/generate", R"({"input_ids": [[1], [2]], "sampling_params": {"max_new_tokens": 250}})")));
  ASSERT_TRUE(WaitFor([&] { return engine_->Running() == 2; }, 5s));
  const RequestId last = engine_->LastId();
  Close(fd);
  EXPECT_TRUE(WaitFor([&] { return engine_->AbortCalled(last) && engine_->AbortCalled(last - 1); }, 5s));
  EXPECT_TRUE(WaitFor([&] { return server_->open_generate_calls() == 0; }, 5s));
}

TEST_F(HostileClientsTest, AStreamReaderThatStopsReadingIsDroppedAndTheQueueStaysBounded) {
  constexpr size_t kQueue = 32 * 1024;
  Start({.context = 8192, .step = std::chrono::microseconds(0)},
        [&](HttpApiOptions& o) { o.http.max_stream_queue_bytes = kQueue; });
  const int fd = Connect(/*rcvbuf=*/4096);
  ASSERT_TRUE(SendAll(fd, RequestText("POST", "/generate", R"({"input_ids": [1], "sampling_params": {"max_new_tokens": 8000}, "stream": true})")));
  // Cumulative chunks of a long sample: ~250 MB in all if it ran to the end.
  ASSERT_TRUE(WaitFor([&] { return server_->http_counters().dropped_slow_clients.load() >= 1; }, 30s));
  const RequestId id = engine_->LastId();
  EXPECT_TRUE(WaitFor([&] { return engine_->AbortCalled(id); }, 5s));
  EXPECT_TRUE(WaitFor([&] { return engine_->Running() == 0; }, 5s));
  EXPECT_LE(server_->http_counters().peak_stream_queue_bytes.load(), kQueue);
  EXPECT_EQ(server_->open_generate_calls(), 0);
  EXPECT_EQ(Request(port_, "GET", "/health").status, 200);
  // The metric says so too.
  EXPECT_NE(Request(port_, "GET", "/metrics").body.find("tandem_inference_http_dropped_slow_clients_total 1\n"),
            std::string::npos);
}

TEST_F(HostileClientsTest, ConcurrentClientsEachGetTheirOwnTokens) {
  Start();
  constexpr int kClients = 8, kEach = 6;
  std::atomic<int> ok{0};
  std::vector<std::string> failures(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; i < kEach; ++i) {
        const int32_t last = 10 * c + i;
        const bool stream = (i % 2) == 1;
        const json body = {{"input_ids", {3, last}}, {"stream", stream}, {"sampling_params", {{"max_new_tokens", 5 + i}}}};
        const auto r = Request(port_, "POST", "/generate", body.dump());
        std::vector<int32_t> want;
        for (int64_t k = 0; k < 5 + i; ++k) want.push_back(ScriptedEngine::Token(last, 0, k, 1000));
        json got = nullptr;
        if (r.status == 200 && !stream) got = json::parse(r.body, nullptr, false);
        if (r.status == 200 && stream) {
          const auto events = SseData(r.body);
          if (events.size() >= 2 && events.back() == "[DONE]") got = json::parse(events[events.size() - 2], nullptr, false);
        }
        if (got.is_object() && got["output_ids"] == json(want)) ++ok;
        else failures[static_cast<size_t>(c)] += "status " + std::to_string(r.status) + ": " + r.body.substr(0, 200) + "\n";
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kClients * kEach);
  for (const auto& f : failures) EXPECT_EQ(f, "");
}

TEST_F(HostileClientsTest, StoppingTheServerAbortsWhatIsInFlight) {
  Start({.step = std::chrono::milliseconds(2)});
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd, RequestText("POST", "/generate", R"({"input_ids": [1], "sampling_params": {"max_new_tokens": 250}})")));
  ASSERT_TRUE(WaitFor([&] { return engine_->Running() == 1; }, 5s));
  const RequestId id = engine_->LastId();
  server_->Stop();
  EXPECT_TRUE(engine_->AbortCalled(id));
  bool eof = false;
  ReadUntilClosed(fd, 5s, &eof);
  EXPECT_TRUE(eof);
  server_->Stop();  // idempotent
}

}  // namespace
}  // namespace tandem::inference::testing
