// The control server's transports and the control tokens (control_server.h,
// control_token.h; docs/control-protocol.md "Transport", "Authentication"):
// a real server on a unix socket and on TCP (ephemeral port), driven by
// plain sockets as a worker in any language would. Framing, malformed lines,
// the handshake timeout and refusals behave the same on both transports;
// tokens are bound to job, task and launch; the daemon secret persists.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <gtest/gtest.h>

#include "orchestrator/control/control_server.h"
#include "common/control/control_token.h"

namespace tandem::control {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Admits a hello whose token is the token of (job, task, launch 1) under a
// fixed key, as the handoff service does; echoes every later message.
class TokenDelegate : public ControlServer::Delegate {
 public:
  static constexpr const char* kKey = "test-key-0123456789abcdef";
  StatusOr<json> OnHello(const ControlServer::ConnectionPtr& c, const control::Hello& hello) override {
    transports.push_back(c->transport());
    const std::string& token = hello.token;
    if (token.empty() && c->transport() == Transport::kTcp) return PermissionDenied("no token");
    if (!token.empty() && !ConstantTimeEquals(token, ControlToken(kKey, hello.job_id, hello.task_id, 1)))
      return PermissionDenied("wrong token");
    return json{{"session", hello.task_id}};
  }
  void OnMessage(const ControlServer::ConnectionPtr& c, const ParsedObject& m) override {
    if (m.type == "throw") (void)m.body.at("missing").get<int>();  // a handler bug: must not take the server down
    c->Send({{"type", "echo"}, {"of", m.type}});
  }
  void OnClosed(const ControlServer::ConnectionPtr&) override {}
  std::vector<Transport> transports;
};

class ControlServerTest : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tandem-ctl-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(dir_);
    ControlServer::Options o;
    o.max_line_bytes = 4096;
    o.handshake_timeout = std::chrono::milliseconds(500);
    auto s = ControlServer::Listen(io_, dir_ / "control.sock", delegate_, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    ASSERT_TRUE(server_->ListenTcp("127.0.0.1:0").ok());
    thread_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    work_.reset();
    io_.stop();
    thread_.join();
    server_.reset();
    fs::remove_all(dir_);
  }

  // A connected socket of the transport under test (-1 on failure).
  int Connect(Transport t) {
    if (t == Transport::kUnix) {
      int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::snprintf(a.sun_path, sizeof a.sun_path, "%s", (dir_ / "control.sock").c_str());
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return ::close(fd), -1;
      return fd;
    }
    const std::string addr = server_->tcp_address();
    const int port = std::stoi(addr.substr(addr.rfind(':') + 1));
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return ::close(fd), -1;
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  }
  static void Write(int fd, const std::string& s) { ASSERT_EQ(::write(fd, s.data(), s.size()), static_cast<ssize_t>(s.size())); }
  // The next line from the server, parsed ("eof" / "timeout" as type when none).
  json ReadLine(int fd) {
    for (;;) {
      if (size_t nl = pending_[fd].find('\n'); nl != std::string::npos) {
        std::string line = pending_[fd].substr(0, nl);
        pending_[fd].erase(0, nl + 1);
        return json::parse(line);
      }
      char buf[4096];
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n == 0) return {{"type", "eof"}};
      if (n < 0) return {{"type", "timeout"}};
      pending_[fd].append(buf, static_cast<size_t>(n));
    }
  }
  static json Hello(const std::string& task, const std::string& token) {
    json h = {{"type", "hello"}, {"protocol", 1}, {"job_id", "j1"}, {"task_id", task}, {"role", "rollout"}, {"rank", 0}};
    if (!token.empty()) h["token"] = token;
    return h;
  }
  static std::string Good(const std::string& task) { return ControlToken(TokenDelegate::kKey, "j1", task, 1); }

  fs::path dir_;
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{io_.get_executor()};
  TokenDelegate delegate_;
  std::unique_ptr<ControlServer> server_;
  std::thread thread_;
  std::map<int, std::string> pending_;
};

TEST_P(ControlServerTest, FramingIsTheSameOnBothTransports) {
  const int fd = Connect(GetParam());
  ASSERT_GE(fd, 0);
  // The hello split over two writes, then two messages and a CRLF line in one write.
  const std::string hello = Hello("j1.rollout.0", Good("j1.rollout.0")).dump();
  Write(fd, hello.substr(0, 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Write(fd, hello.substr(10) + "\n");
  json w = ReadLine(fd);
  EXPECT_EQ(w["type"], "welcome") << w.dump();
  EXPECT_EQ(w["session"], "j1.rollout.0");
  Write(fd, "{\"type\":\"metrics\"}\n{\"type\":\"ack\",\"id\":3}\r\n\n");
  EXPECT_EQ(ReadLine(fd)["of"], "metrics");
  EXPECT_EQ(ReadLine(fd)["of"], "ack");
  // Malformed lines are answered and the connection stays usable.
  Write(fd, "not json\n[1,2]\n{\"id\":7}\n");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ReadLine(fd)["code"], "malformed");
  // An over-long line is dropped with line_too_long; the next line works.
  Write(fd, "{\"type\":\"metrics\",\"x\":\"" + std::string(8000, 'a') + "\"}\n{\"type\":\"metrics\"}\n");
  EXPECT_EQ(ReadLine(fd)["code"], "line_too_long");
  EXPECT_EQ(ReadLine(fd)["of"], "metrics");
  ::close(fd);
  ASSERT_FALSE(delegate_.transports.empty());
  EXPECT_EQ(delegate_.transports.back(), GetParam());
}

TEST_P(ControlServerTest, NoHelloWithinTheHandshakeTimeoutIsRefused) {
  const int fd = Connect(GetParam());
  ASSERT_GE(fd, 0);
  json e = ReadLine(fd);
  EXPECT_EQ(e["code"], "deadline_exceeded") << e.dump();
  EXPECT_EQ(ReadLine(fd)["type"], "eof");
  ::close(fd);
}

TEST_P(ControlServerTest, FirstLineMustBeAHello) {
  const int fd = Connect(GetParam());
  ASSERT_GE(fd, 0);
  Write(fd, "{\"type\":\"ack\",\"id\":1}\n");
  EXPECT_EQ(ReadLine(fd)["code"], "malformed");
  EXPECT_EQ(ReadLine(fd)["type"], "eof");
  ::close(fd);
}

TEST_P(ControlServerTest, WrongTokenIsUnauthenticatedAndCloses) {
  for (const std::string& token : {std::string("00"), Good("j1.rollout.1"), Good("j1.rollout.0").substr(1) + "0"}) {
    const int fd = Connect(GetParam());
    ASSERT_GE(fd, 0);
    Write(fd, Hello("j1.rollout.0", token).dump() + "\n");
    json e = ReadLine(fd);
    EXPECT_EQ(e["type"], "error") << e.dump();
    EXPECT_EQ(e["code"], "unauthenticated") << e.dump();
    EXPECT_EQ(ReadLine(fd)["type"], "eof");
    ::close(fd);
  }
}

// Hostile input (issue #12 point 1): a hello with mistyped fields is refused
// before the delegate sees it; deep nesting is malformed; a delegate that
// throws is answered with "internal" and the connection goes on.
TEST_P(ControlServerTest, HostileLinesAreRefusedAndNeverEscape) {
  for (const json& bad : {json{{"type", "hello"}, {"protocol", 1}, {"job_id", 7}, {"role", "r"}, {"rank", 0}},
                          json{{"type", "hello"}, {"protocol", 1}, {"role", "r"}, {"rank", "zero"}},
                          json{{"type", "hello"}, {"protocol", 1}, {"role", "r"}, {"rank", 0}, {"token", json::array()}},
                          json{{"type", "hello"}, {"protocol", 1}, {"role", "r"}, {"rank", 0},
                               {"residency", {{"device", {{"index", "x"}}}}}}}) {
    const size_t before = delegate_.transports.size();
    const int fd = Connect(GetParam());
    ASSERT_GE(fd, 0);
    Write(fd, bad.dump() + "\n");
    json e = ReadLine(fd);
    EXPECT_EQ(e["code"], "invalid_argument") << bad.dump() << " -> " << e.dump();
    EXPECT_EQ(ReadLine(fd)["type"], "eof");
    EXPECT_EQ(delegate_.transports.size(), before) << "the delegate saw " << bad.dump();
    ::close(fd);
  }
  const int fd = Connect(GetParam());
  ASSERT_GE(fd, 0);
  Write(fd, Hello("j1.rollout.0", Good("j1.rollout.0")).dump() + "\n");
  EXPECT_EQ(ReadLine(fd)["type"], "welcome");
  Write(fd, "{\"type\":\"metrics\",\"x\":" + std::string(1000, '[') + std::string(1000, ']') + "}\n");
  EXPECT_EQ(ReadLine(fd)["code"], "malformed");
  Write(fd, "{\"type\":\"throw\",\"id\":9}\n");
  json e = ReadLine(fd);
  EXPECT_EQ(e["code"], "internal") << e.dump();
  EXPECT_EQ(e["id"], 9);
  Write(fd, "{\"type\":\"metrics\"}\n");
  EXPECT_EQ(ReadLine(fd)["of"], "metrics");
  ::close(fd);
}

TEST_F(ControlServerTest, TcpHelloWithoutTokenIsRefusedUnixIsNot) {
  int fd = Connect(Transport::kTcp);
  ASSERT_GE(fd, 0);
  Write(fd, Hello("j1.rollout.0", "").dump() + "\n");
  EXPECT_EQ(ReadLine(fd)["code"], "unauthenticated");
  ::close(fd);
  fd = Connect(Transport::kUnix);
  ASSERT_GE(fd, 0);
  Write(fd, Hello("j1.rollout.0", "").dump() + "\n");
  EXPECT_EQ(ReadLine(fd)["type"], "welcome");
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(Transports, ControlServerTest, ::testing::Values(Transport::kUnix, Transport::kTcp),
                         [](const auto& p) { return p.param == Transport::kUnix ? "unix" : "tcp"; });

TEST(ControlTokenTest, BoundToKeyJobTaskAndLaunch) {
  const std::string t = ControlToken("k", "job", "job.a.0", 1);
  EXPECT_EQ(t.size(), 64u);
  EXPECT_EQ(t, ControlToken("k", "job", "job.a.0", 1));
  EXPECT_NE(t, ControlToken("k2", "job", "job.a.0", 1));
  EXPECT_NE(t, ControlToken("k", "job2", "job.a.0", 1));
  EXPECT_NE(t, ControlToken("k", "job", "job.a.1", 1));
  EXPECT_NE(t, ControlToken("k", "job", "job.a.0", 2));
  // Field boundaries are part of the MAC: ("a\nb", "c") is not ("a", "b\nc").
  EXPECT_NE(ControlToken("k", "a", "b", 1), ControlToken("k", "a\nb", "", 1));
  EXPECT_TRUE(ConstantTimeEquals(t, t));
  EXPECT_FALSE(ConstantTimeEquals(t, t.substr(0, 63)));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  ControlKeys keys("secret-of-the-daemon-0123456789");
  keys.SetBackendKey("redis", "cluster-key-0123456789");
  EXPECT_EQ(keys.TokenFor("redis", "j", "t", 1), ControlToken("cluster-key-0123456789", "j", "t", 1));
  EXPECT_EQ(keys.TokenFor("local", "j", "t", 1), ControlToken("secret-of-the-daemon-0123456789", "j", "t", 1));
  EXPECT_TRUE(keys.Verify("slurm", "j", "t", 3, keys.TokenFor("local", "j", "t", 3)));
  EXPECT_FALSE(keys.Verify("redis", "j", "t", 3, keys.TokenFor("local", "j", "t", 3)));
  EXPECT_FALSE(ControlKeys().Verify("local", "j", "t", 1, ControlToken("", "j", "t", 1)));
}

TEST(ControlTokenTest, DaemonSecretIsCreatedPrivateAndSurvives) {
  const fs::path dir = fs::temp_directory_path() / ("tandem-secret-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto a = LoadOrCreateSecret(dir / "control.key");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->size(), 64u);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "control.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto b = LoadOrCreateSecret(dir / "control.key");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b) << "a second daemon life must see the same secret";
  ::chmod((dir / "control.key").c_str(), 0644);
  EXPECT_EQ(LoadOrCreateSecret(dir / "control.key").status().code(), StatusCode::kPermissionDenied);
  fs::remove_all(dir);
}

TEST(ControlAddressTest, ParsesHostPort) {
  EXPECT_EQ(HostPort(*ParseHostPort("127.0.0.1:5")), "127.0.0.1:5");
  EXPECT_EQ(HostPort(*ParseHostPort("localhost:0")), "127.0.0.1:0");
  EXPECT_EQ(HostPort(*ParseHostPort("[::1]:80")), "[::1]:80");
  EXPECT_FALSE(ParseHostPort("127.0.0.1").ok());
  EXPECT_FALSE(ParseHostPort("127.0.0.1:99999").ok());
  EXPECT_FALSE(ParseHostPort("example.org:80").ok());
  EXPECT_FALSE(ParseHostPort("1.2.3.4:").ok());
}

}  // namespace
}  // namespace tandem::control
