// Issue #12 point 5: slow clients cannot exhaust a real tandemd. Clients that
// never read (log followers, event streams) leave its resident memory bounded;
// a flood of idle TCP connections leaves the unix socket answering, and one
// peer's flood leaves other TCP peers getting in; made-up
// HTTP methods leave /metrics small. Each case once grew the daemon without
// bound or made it answer 503.
#include <sys/resource.h>

#include "tests/daemon/daemon_process.h"
#include "tests/daemon/raw_http.h"

namespace tandem::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kMiB = 1 << 20;
constexpr int kSilentClients = 6;

class SlowClientsTest : public ::testing::Test {
 protected:
  void StartDaemon(std::vector<std::string> extra = {}) {
    // Under ASan, freed memory sits in a quarantine (256 MiB by default) that
    // RSS counts; keep it small so RSS shows what the daemon holds.
    const char* asan = std::getenv("ASAN_OPTIONS");
    ::setenv("ASAN_OPTIONS", (std::string(asan ? asan : "") + ":quarantine_size_mb=8").c_str(), 1);
    dir_ = MakeTempDir("tandem-slow");
    extra.insert(extra.end(), {"--gpus", "none", "--grace", "1"});
    d_ = std::make_unique<DaemonProcess>(dir_, extra);
    d_->Start();
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    d_.reset();
    std::error_code ec;
    for (const auto& d : extra_dirs_) fs::remove_all(d, ec);
    if (!HasFailure()) fs::remove_all(dir_, ec);
  }
  std::string Socket() const { return (dir_ / "tandemd.sock").string(); }

  // Opens `n` connections that send `request` and then never read.
  void OpenSilentClients(int n, const std::string& request) {
    for (int i = 0; i < n; ++i) {
      const int fd = ConnectUnix(Socket(), 4096);
      ASSERT_GE(fd, 0);
      ASSERT_TRUE(SendAll(fd, request));
      fds_.push_back(fd);
    }
  }

  // The daemon's RSS growth over `before` after the silent clients had time
  // to be served (the old daemon queued everything at once).
  size_t GrowthAfterSettling(size_t before) {
    size_t peak = 0;
    for (int i = 0; i < 30; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      peak = std::max(peak, RssBytes(d_->pid()));
    }
    return peak > before ? peak - before : 0;
  }

  fs::path dir_;
  std::unique_ptr<DaemonProcess> d_;
  std::vector<int> fds_;
  std::vector<fs::path> extra_dirs_;  // removed after the daemon stopped
};

TEST_F(SlowClientsTest, LogFollowersThatDoNotReadKeepTheDaemonSmall) {
  StartDaemon();
  constexpr size_t kLog = 48 * kMiB;
  const std::string id = d_->Submit(
      BashJob("big-log", "head -c " + std::to_string(kLog) + " /dev/zero | tr '\\0' x; sleep 60"));
  ASSERT_FALSE(id.empty());
  const fs::path out = fs::path(d_->Job(id).value("run_dir", "")) / "tasks" / "main.0.out";
  ASSERT_TRUE(WaitFor([&] {
    std::error_code ec;
    return fs::file_size(out, ec) >= kLog;
  }, std::chrono::seconds(60)));
  const size_t before = RssBytes(d_->pid());
  OpenSilentClients(kSilentClients, "GET /v1/jobs/" + id + "/logs?task=main.0&follow=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  const size_t growth = GrowthAfterSettling(before);
  // Old: each follower queued the whole log (6 x 48 MiB).
  EXPECT_LT(growth, 64 * kMiB) << "RSS before " << before / kMiB << " MiB, grew " << growth / kMiB << " MiB";
  // A follower that reads gets the whole log, in order.
  auto r = d_->client().Request("GET", "/v1/jobs/" + id + "/logs?task=main.0");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body.size(), kLog);
  EXPECT_EQ(d_->client(5).Request("GET", "/healthz")->status, 200);
  (void)d_->client().Request("POST", "/v1/jobs/" + id + "/cancel");
}

TEST_F(SlowClientsTest, EventClientsThatDoNotReadKeepTheDaemonSmall) {
  StartDaemon();
  const fs::path run = MakeTempDir("tandem-slow-run");
  constexpr size_t kHistory = 16 * kMiB;
  // A long history (a task can write its events.jsonl; a long job has one).
  const std::string line = R"({"type":"task_note","job":"x","seq":1,"note":"padding padding padding padding"})";
  const std::string id = d_->Submit([&] {
    json spec = BashJob("long-history", "yes '" + line + "' | head -c " + std::to_string(kHistory) + " >> " +
                                            (run / "events.jsonl").string() + "; sleep 60");
    spec["run_dir"] = run.string();
    return spec;
  }());
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor([&] {
    std::error_code ec;
    return fs::file_size(run / "events.jsonl", ec) >= kHistory;
  }, std::chrono::seconds(60)));
  const size_t before = RssBytes(d_->pid());
  OpenSilentClients(kSilentClients, "GET /v1/jobs/" + id + "/events HTTP/1.1\r\nHost: x\r\n\r\n");
  // The daemon keeps answering (old: it replayed each whole history before
  // anything else, then held it queued).
  const auto t0 = std::chrono::steady_clock::now();
  auto health = d_->client(120).Request("GET", "/healthz");
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(health.ok()) << health.status().ToString();
  EXPECT_LT(waited, std::chrono::seconds(10));
  const size_t growth = GrowthAfterSettling(before);
  // Old: each client queued the whole history as events (6 x ~24 MiB).
  EXPECT_LT(growth, 64 * kMiB) << "RSS before " << before / kMiB << " MiB, grew " << growth / kMiB << " MiB";
  (void)d_->client().Request("POST", "/v1/jobs/" + id + "/cancel");
  extra_dirs_.push_back(run);
}

TEST_F(SlowClientsTest, AFollowingEventClientThatFallsBehindIsDropped) {
  StartDaemon({"--http-stream-queue", "65536"});
  // A task that fails at once and is restarted at once: a stream of live events.
  const std::string id = d_->Submit(BashJob(
      "flapping", "exit 1", 1, {{"restart", {{"policy", "on-failure"}, {"max_restarts", 100000}, {"backoff_s", 0},
                                             {"backoff_max_s", 0}}}}));
  ASSERT_FALSE(id.empty());
  OpenSilentClients(1, "GET /v1/jobs/" + id + "/events HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(WaitFor([&] { return d_->log().find("dropped a client that does not read its stream") != std::string::npos; },
                      std::chrono::seconds(60)))
      << d_->log().substr(0, 4000);
  EXPECT_NE(d_->log().find("limit=65536"), std::string::npos);
  EXPECT_EQ(d_->client(5).Request("GET", "/healthz")->status, 200);
  (void)d_->client().Request("POST", "/v1/jobs/" + id + "/cancel");
}

TEST_F(SlowClientsTest, ATcpFloodLeavesTheUnixSocketAnswering) {
  // Enough descriptors for the flood in this process and the daemon (which inherits the limit).
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  const rlim_t want = std::min<rlim_t>(lim.rlim_max, 8192);
  if (want < 2500) GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << lim.rlim_max << " is too low for the flood";
  const rlimit old = lim;
  lim.rlim_cur = want;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lim), 0);
  const fs::path token_file = MakeTempDir("tandem-slow-token") / "token";
  std::ofstream(token_file) << "s3cret-s3cret-s3cret\n";
  fs::permissions(token_file, fs::perms::owner_read | fs::perms::owner_write);
  StartDaemon({"--listen", "127.0.0.1:0", "--token-file", token_file.string(), "--http-auth-timeout", "1"});
  ::setrlimit(RLIMIT_NOFILE, &old);  // the daemon has the raised limit; this process keeps its fds
  const std::string log = d_->log();
  const std::string key = "listening tcp=127.0.0.1:";
  const size_t at = log.find(key);
  ASSERT_NE(at, std::string::npos) << log;
  const int port = std::atoi(log.c_str() + at + key.size());
  ASSERT_GT(port, 0) << log;
  // 1,100 connections that never authenticate (never send a byte).
  for (int i = 0; i < 1100; ++i) {
    const int fd = ConnectTcp(port);
    if (fd >= 0) fds_.push_back(fd);
  }
  // The unix socket still answers (old: 503, all connections counted together).
  RawResponse h = RawRequest(Socket(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(h.status, 200) << h.head << h.body << "\n" << d_->log().substr(0, 4000);
  // An authenticated TCP client gets in once the idle ones are gone (they
  // had a second to send their request header).
  EXPECT_TRUE(WaitFor([&] {
    const int fd = ConnectTcp(port);
    if (fd < 0) return false;
    RawResponse r = SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret-s3cret-s3cret\r\n\r\n")
                        ? ReadResponse(fd, std::chrono::seconds(2))
                        : RawResponse{};
    ::close(fd);
    return r.status == 200;
  }, std::chrono::seconds(15)));
  for (int fd : fds_) ::close(fd);
  fds_.clear();
  extra_dirs_.push_back(token_file.parent_path());
}

// One peer's flood cannot lock other TCP peers out (docs/api.md "Limits"):
// 300 idle connections from 127.0.0.2 (old: they took all 64 unauthenticated
// slots and every other peer's connection was closed at once) leave a
// client from 127.0.0.1 getting in, and the flood is logged per peer.
TEST_F(SlowClientsTest, ATcpFloodFromOnePeerLeavesOtherPeersGettingIn) {
  const fs::path token_file = MakeTempDir("tandem-slow-token") / "token";
  extra_dirs_.push_back(token_file.parent_path());
  std::ofstream(token_file) << "s3cret-s3cret-s3cret\n";
  fs::permissions(token_file, fs::perms::owner_read | fs::perms::owner_write);
  // The flood's connections stay unauthenticated for the whole test.
  StartDaemon({"--listen", "127.0.0.1:0", "--token-file", token_file.string(), "--http-auth-timeout", "60"});
  const std::string log = d_->log();
  const std::string key = "listening tcp=127.0.0.1:";
  const size_t at = log.find(key);
  ASSERT_NE(at, std::string::npos) << log;
  const int port = std::atoi(log.c_str() + at + key.size());
  ASSERT_GT(port, 0) << log;
  for (int i = 0; i < 300; ++i) {
    const int fd = ConnectTcpFrom(port, "127.0.0.2");
    if (fd >= 0) fds_.push_back(fd);
  }
  ASSERT_GE(fds_.size(), 100u) << "cannot connect from 127.0.0.2";
  // Let the daemon accept (and close) the whole flood before the other peer comes.
  ASSERT_TRUE(WaitFor([&] {
    return d_->log().find("too many unauthenticated from one peer peer=127.0.0.2") != std::string::npos;
  })) << d_->log().substr(0, 4000);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (int i = 0; i < 3; ++i) {
    const int fd = ConnectTcp(port);
    ASSERT_GE(fd, 0);
    RawResponse r = SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret-s3cret-s3cret\r\n\r\n")
                        ? ReadResponse(fd, std::chrono::seconds(5))
                        : RawResponse{};
    ::close(fd);
    EXPECT_EQ(r.status, 200) << "a client of another peer was locked out by the flood\n" << d_->log().substr(0, 4000);
  }
  // The flooder holds its share: 8 connections are still open, the rest were closed.
  size_t still_open = 0;
  for (int fd : fds_) {
    pollfd p{fd, POLLIN, 0};
    still_open += ::poll(&p, 1, 0) == 0;  // a connection the daemon closed reads EOF
  }
  EXPECT_EQ(still_open, 8u);
}

TEST_F(SlowClientsTest, MadeUpMethodsLeaveMetricsSmall) {
  StartDaemon();
  const int fd = ConnectUnix(Socket());
  ASSERT_GE(fd, 0);
  fds_.push_back(fd);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(SendAll(fd, "M" + std::to_string(i) + "X /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
    RawResponse r = ReadResponse(fd);
    ASSERT_EQ(r.status, 405) << i << ": " << r.head;
  }
  auto r = d_->client().Request("GET", "/metrics");
  ASSERT_TRUE(r.ok());
  // Old: one series per made-up method (2,000 lines, ~100 KB).
  EXPECT_LT(r->body.size(), 16u * 1024) << r->body.substr(0, 2000);
  EXPECT_NE(r->body.find("tandem_http_requests_total{method=\"other\"} 2000"), std::string::npos)
      << r->body.substr(0, 4000);
}

}  // namespace
}  // namespace tandem::testing
