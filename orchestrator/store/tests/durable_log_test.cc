// DurableLog on real files in a temp dir with a real io_context
// (durable_log.h): round trip, group commit and callback order, Append not
// waiting for fsync, torn and corrupt journals, compaction (also interrupted),
// failures refused and recovered from (fsync via the test hook, write via
// RLIMIT_FSIZE in a child process), and a printed appends/s figure. The full
// disk itself (a real tmpfs) is in full_disk_test.cc.
#include "orchestrator/store/durable_log.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>

#include "orchestrator/store/tests/temp_dir.h"

namespace tandem::store {
namespace {

using nlohmann::json;
using testing::TempDir;
using Clock = std::chrono::steady_clock;

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteAllText(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

// Runs the io_context until `done` or 10 s.
template <typename Pred>
bool RunUntil(boost::asio::io_context& io, Pred done) {
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!done() && Clock::now() < deadline) {
    io.restart();
    io.run_for(std::chrono::milliseconds(5));
  }
  return done();
}

std::unique_ptr<DurableLog> OpenOk(boost::asio::io_context& io, const std::filesystem::path& dir,
                                   Recovered* rec, const DurableLogOptions& opts = {}) {
  auto log = DurableLog::Open(io, dir, rec, opts);
  EXPECT_TRUE(log.ok()) << log.status().ToString();
  return log.ok() ? std::move(log).value() : nullptr;
}

std::vector<int> Ids(const std::vector<json>& records) {
  std::vector<int> out;
  for (const json& r : records) out.push_back(r.value("i", -1));
  return out;
}

std::vector<int> Range(int from, int to) {
  std::vector<int> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return v;
}

TEST(DurableLog, RoundTripAcrossReopen) {
  TempDir dir;
  boost::asio::io_context io;
  const std::vector<json> written = {
      {{"i", 0}, {"job", "démo"}, {"argv", {"bash", "-c", "echo \"hi\"\n"}}},
      {{"i", 1}, {"n", 1.5}, {"null", nullptr}},
      {{"i", 2}, {"deep", {{"a", {{"b", {1, 2, 3}}}}}}},
  };
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    ASSERT_TRUE(log);
    EXPECT_TRUE(rec.snapshot.is_null());
    EXPECT_TRUE(rec.records.empty());
    EXPECT_TRUE(rec.warnings.empty());
    std::vector<int> done;
    for (const json& r : written) {
      log->Append(r, [&done, i = r["i"].get<int>()](Status st) {
        EXPECT_TRUE(st.ok()) << st.ToString();
        done.push_back(i);
      });
    }
    ASSERT_TRUE(RunUntil(io, [&] { return done.size() == 3; }));
    EXPECT_EQ(done, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(log->records_since_compaction(), 3u);
  }
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  ASSERT_TRUE(log);
  EXPECT_EQ(rec.records, written);
  EXPECT_TRUE(rec.warnings.empty());
  EXPECT_EQ(log->records_since_compaction(), 3u);
  // The journal is the documented text format, one line per record.
  std::string text = ReadAll(dir / "journal.log");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);  // header + 3
}

TEST(DurableLog, GroupCommitKeepsCallbackOrderWithFewerSyncs) {
  TempDir dir;
  boost::asio::io_context io;
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  ASSERT_TRUE(log);
  constexpr int kN = 2000;
  std::vector<int> order;
  for (int i = 0; i < kN; ++i) {
    log->Append({{"i", i}}, [&order, i](Status st) {
      EXPECT_TRUE(st.ok());
      order.push_back(i);
    });
  }
  ASSERT_TRUE(RunUntil(io, [&] { return order.size() == kN; }));
  EXPECT_EQ(order, Range(0, kN));
  DurableLogStats st = log->stats();
  EXPECT_EQ(st.appends, static_cast<uint64_t>(kN));
  EXPECT_GE(st.syncs, 1u);
  EXPECT_LT(st.syncs, st.appends) << "group commit should fold appends into fewer fsyncs";
  std::printf("[ perf ] %d appends took %llu fsyncs\n", kN, static_cast<unsigned long long>(st.syncs));
}

// A gate the sync thread waits at before each fsync, released by the test.
struct SyncGate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  bool timed_out = false;
  std::atomic<int> calls{0};

  Status Wait() {
    ++calls;
    std::unique_lock lk(mu);
    if (!cv.wait_for(lk, std::chrono::seconds(10), [&] { return open; })) timed_out = true;
    return Status::Ok();
  }
  void Open() {
    std::lock_guard lk(mu);
    open = true;
    cv.notify_all();
  }
};

TEST(DurableLog, AppendNeverWaitsForTheFsync) {
  TempDir dir;
  boost::asio::io_context io;
  SyncGate gate;
  DurableLogOptions opts;
  opts.before_sync = [&gate] { return gate.Wait(); };
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec, opts);
  ASSERT_TRUE(log);
  int durable = 0;
  auto t0 = Clock::now();
  for (int i = 0; i < 500; ++i) log->Append({{"i", i}}, [&](Status st) { durable += st.ok(); });
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  // Every Append returned while the fsync was held: none can be durable yet.
  io.restart();
  io.poll();
  EXPECT_EQ(durable, 0);
  EXPECT_GE(gate.calls.load(), 0);
  gate.Open();
  ASSERT_TRUE(log->Flush().ok());
  ASSERT_TRUE(RunUntil(io, [&] { return durable == 500; }));
  EXPECT_FALSE(gate.timed_out) << "Append blocked until the sync gate timed out";
  EXPECT_LE(log->stats().syncs, 2u) << "appends made while one fsync was held share the next one";
  std::printf("[ perf ] 500 appends with the fsync held took %.2f ms\n", ms);
}

TEST(DurableLog, TornTailIsSkippedAndLaterAppendsRecover) {
  TempDir dir;
  boost::asio::io_context io;
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    for (int i = 0; i < 10; ++i) log->Append({{"i", i}});
    ASSERT_TRUE(log->Flush().ok());
  }
  std::filesystem::resize_file(dir / "journal.log", std::filesystem::file_size(dir / "journal.log") - 5);
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    ASSERT_TRUE(log);
    EXPECT_EQ(Ids(rec.records), Range(0, 9));
    ASSERT_EQ(rec.warnings.size(), 1u);
    EXPECT_NE(rec.warnings[0].find("journal.log:11: torn last record skipped"), std::string::npos)
        << rec.warnings[0];
    for (int i = 9; i < 12; ++i) log->Append({{"i", i}});
    ASSERT_TRUE(log->Flush().ok());
  }
  // Now garbage without a newline after the last record.
  {
    std::ofstream f(dir / "journal.log", std::ios::binary | std::ios::app);
    f << "1234abcd {\"i\":12, \"half";
  }
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    ASSERT_TRUE(log);
    EXPECT_EQ(Ids(rec.records), Range(0, 12));
    ASSERT_EQ(rec.warnings.size(), 1u);
    EXPECT_NE(rec.warnings[0].find("journal.log:14: torn last record"), std::string::npos) << rec.warnings[0];
    log->Append({{"i", 12}});
    ASSERT_TRUE(log->Flush().ok());
  }
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  ASSERT_TRUE(log);
  EXPECT_EQ(Ids(rec.records), Range(0, 13));
  EXPECT_TRUE(rec.warnings.empty()) << rec.warnings[0];
}

TEST(DurableLog, CorruptLastLineWithNewlineIsSkipped) {
  TempDir dir;
  boost::asio::io_context io;
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    for (int i = 0; i < 3; ++i) log->Append({{"i", i}});
    ASSERT_TRUE(log->Flush().ok());
  }
  std::string text = ReadAll(dir / "journal.log");
  text[text.size() - 3] ^= 0x01;  // inside the last record's JSON
  WriteAllText(dir / "journal.log", text);
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  ASSERT_TRUE(log);
  EXPECT_EQ(Ids(rec.records), Range(0, 2));
  ASSERT_EQ(rec.warnings.size(), 1u);
  EXPECT_NE(rec.warnings[0].find("corrupt last record skipped (checksum mismatch"), std::string::npos);
}

TEST(DurableLog, CorruptMiddleRecordIsDataLossNamingFileAndLine) {
  TempDir dir;
  boost::asio::io_context io;
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    for (int i = 0; i < 5; ++i) log->Append({{"i", i}, {"payload", "abcdefgh"}});
    ASSERT_TRUE(log->Flush().ok());
  }
  std::string text = ReadAll(dir / "journal.log");
  size_t third = text.find("\"i\":1");  // record 1 is on line 3
  ASSERT_NE(third, std::string::npos);
  text[third + 4] = '7';
  WriteAllText(dir / "journal.log", text);
  Recovered rec;
  auto log = DurableLog::Open(io, dir.path(), &rec);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(log.status().message().find("journal.log:3: corrupt record"), std::string::npos)
      << log.status().message();
  EXPECT_NE(log.status().message().find(dir.path().string()), std::string::npos);
}

TEST(DurableLog, CompactionThenAppendsRecoverSnapshotAndNewerRecordsOnly) {
  TempDir dir;
  boost::asio::io_context io;
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    int ok = 0;
    for (int i = 0; i < 10; ++i) log->Append({{"i", i}}, [&](Status st) { ok += st.ok(); });
    ASSERT_TRUE(log->Compact({{"count", 10}}).ok());
    EXPECT_EQ(log->records_since_compaction(), 0u);
    for (int i = 10; i < 15; ++i) log->Append({{"i", i}}, [&](Status st) { ok += st.ok(); });
    ASSERT_TRUE(RunUntil(io, [&] { return ok == 15; }));
    EXPECT_EQ(log->stats().generation, 1u);
    EXPECT_EQ(log->stats().compactions, 1u);
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "snapshot.json.tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir / "journal.log.tmp"));
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  ASSERT_TRUE(log);
  EXPECT_EQ(rec.snapshot, (json{{"count", 10}}));
  EXPECT_EQ(Ids(rec.records), Range(10, 15));
  EXPECT_TRUE(rec.warnings.empty());
  EXPECT_EQ(log->records_since_compaction(), 5u);
  // A second compaction and reopen.
  ASSERT_TRUE(log->Compact({{"count", 15}}).ok());
  log.reset();
  log = OpenOk(io, dir.path(), &rec);
  EXPECT_EQ(rec.snapshot, (json{{"count", 15}}));
  EXPECT_TRUE(rec.records.empty());
}

TEST(DurableLog, CrashBetweenSnapshotAndJournalRestartAppliesNothingTwice) {
  TempDir dir;
  boost::asio::io_context io;
  std::string old_journal;
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    for (int i = 0; i < 10; ++i) log->Append({{"i", i}});
    ASSERT_TRUE(log->Flush().ok());
    old_journal = ReadAll(dir / "journal.log");
    ASSERT_TRUE(log->Compact({{"count", 10}}).ok());
  }
  // What a crash after the snapshot rename but before the journal's leaves.
  WriteAllText(dir / "journal.log", old_journal);
  WriteAllText(dir / "journal.log.tmp", "partial");
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    ASSERT_TRUE(log);
    EXPECT_EQ(rec.snapshot, (json{{"count", 10}}));
    EXPECT_TRUE(rec.records.empty());
    ASSERT_EQ(rec.warnings.size(), 1u);
    EXPECT_NE(rec.warnings[0].find("superseded"), std::string::npos) << rec.warnings[0];
    EXPECT_FALSE(std::filesystem::exists(dir / "journal.log.tmp"));
    log->Append({{"i", 10}});
    ASSERT_TRUE(log->Flush().ok());
  }
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  EXPECT_EQ(Ids(rec.records), Range(10, 11));
  EXPECT_TRUE(rec.warnings.empty());
}

TEST(DurableLog, CompactionFailingBeforeTheSnapshotIsInPlaceLeavesTheLogUsable) {
  TempDir dir;
  boost::asio::io_context io;
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    log->Append({{"i", 0}});
    std::filesystem::create_directory(dir / "snapshot.json.tmp");  // the tmp file cannot be created
    Status st = log->Compact({{"count", 1}});
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("compact: write snapshot"), std::string::npos) << st.ToString();
    EXPECT_EQ(log->Compact(json{{"bad", std::string("\xff")}}).code(), StatusCode::kInvalidArgument);
    log->Append({{"i", 1}});
    EXPECT_TRUE(log->Flush().ok());
  }
  std::filesystem::remove(dir / "snapshot.json.tmp");
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  EXPECT_TRUE(rec.snapshot.is_null());
  EXPECT_EQ(Ids(rec.records), Range(0, 2));
}

TEST(DurableLog, CompactionFailingAfterTheSnapshotRefusesAppendsUntilTheJournalRestarts) {
  TempDir dir;
  boost::asio::io_context io;
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    for (int i = 0; i < 4; ++i) log->Append({{"i", i}});
    std::filesystem::create_directory(dir / "journal.log.tmp");  // the new journal cannot be created
    Status st = log->Compact({{"count", 4}});
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("restart journal"), std::string::npos) << st.ToString();
    Status appended;
    log->Append({{"i", 4}}, [&](Status s) { appended = s; });
    ASSERT_TRUE(RunUntil(io, [&] { return !appended.ok(); })) << "a record after the commit point must be refused";
    // Once the journal can be restarted, the log goes on by itself.
    std::filesystem::remove(dir / "journal.log.tmp");
    bool done = false;
    log->Append({{"i", 5}}, [&](Status s) { appended = s; done = true; });
    ASSERT_TRUE(RunUntil(io, [&] { return done; }));
    EXPECT_TRUE(appended.ok()) << appended.ToString();
  }
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  EXPECT_EQ(rec.snapshot, (json{{"count", 4}}));
  EXPECT_EQ(Ids(rec.records), Range(5, 6)) << "journal generation 0 is superseded, not applied twice";
}

TEST(DurableLog, JournalNewerThanSnapshotIsDataLoss) {
  TempDir dir;
  boost::asio::io_context io;
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    ASSERT_TRUE(log->Compact({{"count", 0}}).ok());
    log->Append({{"i", 0}});
    ASSERT_TRUE(log->Flush().ok());
  }
  std::filesystem::remove(dir / "snapshot.json");
  Recovered rec;
  auto log = DurableLog::Open(io, dir.path(), &rec);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(log.status().message().find("generation 1"), std::string::npos) << log.status().message();
}

TEST(DurableLog, CorruptSnapshotIsDataLoss) {
  TempDir dir;
  boost::asio::io_context io;
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec);
    ASSERT_TRUE(log->Compact({{"jobs", {"a", "b"}}}).ok());
  }
  std::string snap = ReadAll(dir / "snapshot.json");
  snap[snap.find("\"a\"") + 1] = 'x';
  WriteAllText(dir / "snapshot.json", snap);
  Recovered rec;
  auto log = DurableLog::Open(io, dir.path(), &rec);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(log.status().message().find("snapshot.json: checksum mismatch"), std::string::npos);
}

TEST(DurableLog, SecondOpenOfTheSameDirectoryIsRefused) {
  TempDir dir;
  boost::asio::io_context io;
  Recovered rec;
  auto first = OpenOk(io, dir.path(), &rec);
  ASSERT_TRUE(first);
  auto second = DurableLog::Open(io, dir.path(), &rec);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  first.reset();
  EXPECT_TRUE(DurableLog::Open(io, dir.path(), &rec).ok());
}

TEST(DurableLog, InvalidRecordsAreRefusedWithoutPoisoning) {
  TempDir dir;
  boost::asio::io_context io;
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  std::vector<StatusCode> codes;
  auto note = [&](Status st) { codes.push_back(st.code()); };
  log->Append({{"i", 0}}, note);
  log->Append(json::array({1, 2}), note);
  log->Append({{"bad", std::string("\xff\xfe")}}, note);  // not UTF-8: cannot be written as JSON
  log->Append({{"i", 1}}, note);
  ASSERT_TRUE(RunUntil(io, [&] { return codes.size() == 4; }));
  EXPECT_EQ(codes, (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kInvalidArgument,
                                            StatusCode::kInvalidArgument, StatusCode::kOk}));
  log.reset();
  log = OpenOk(io, dir.path(), &rec);
  EXPECT_EQ(Ids(rec.records), Range(0, 2));
}

TEST(DurableLog, FsyncFailureRefusesWhatWasNotDurableThenRecovers) {
  TempDir dir;
  boost::asio::io_context io;
  std::atomic<int> syncs{0};
  DurableLogOptions opts;
  opts.before_sync = [&]() -> Status {
    return ++syncs == 2 ? Status(StatusCode::kInternal, "injected EIO") : Status::Ok();
  };
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec, opts);
    std::vector<std::pair<int, Status>> results;
    auto note = [&](int i) { return [&results, i](Status st) { results.emplace_back(i, st); }; };
    log->Append({{"i", 0}}, note(0));
    ASSERT_TRUE(log->Flush().ok());
    log->Append({{"i", 1}}, note(1));
    Status flush = log->Flush();
    EXPECT_FALSE(flush.ok());
    EXPECT_NE(flush.message().find("injected EIO"), std::string::npos) << flush.ToString();
    // The next append takes record 1 back (truncate + fsync) and goes on.
    log->Append({{"i", 2}}, note(2));
    EXPECT_TRUE(log->Flush().ok());
    ASSERT_TRUE(RunUntil(io, [&] { return results.size() == 3; }));
    EXPECT_EQ(results[0].first, 0);
    EXPECT_TRUE(results[0].second.ok());
    EXPECT_EQ(results[1].first, 1);
    EXPECT_FALSE(results[1].second.ok());
    EXPECT_EQ(results[2].first, 2);
    EXPECT_TRUE(results[2].second.ok()) << results[2].second.ToString();
    EXPECT_TRUE(log->Compact({{"count", 2}}).ok());
    log->Append({{"i", 3}}, note(3));
    EXPECT_TRUE(log->Flush().ok());
  }
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  EXPECT_EQ(rec.snapshot, (json{{"count", 2}}));
  EXPECT_EQ(Ids(rec.records), Range(3, 4)) << "record 1 was refused, so it must not come back";
}

TEST(DurableLog, RefusedRecordNeverComesBackAfterReopen) {
  TempDir dir;
  boost::asio::io_context io;
  std::atomic<int> syncs{0};
  DurableLogOptions opts;
  opts.before_sync = [&]() -> Status {
    return ++syncs == 2 ? Status(StatusCode::kInternal, "injected EIO") : Status::Ok();
  };
  {
    Recovered rec;
    auto log = OpenOk(io, dir.path(), &rec, opts);
    log->Append({{"i", 0}});
    ASSERT_TRUE(log->Flush().ok());
    log->Append({{"i", 1}});
    EXPECT_FALSE(log->Flush().ok());
    EXPECT_TRUE(log->Headroom().ok()) << "Headroom repairs the log too";
  }
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  EXPECT_EQ(Ids(rec.records), Range(0, 1));
}

// A real write error: the journal hits RLIMIT_FSIZE in a child process. The
// refused record is taken back; the log goes on once the limit is lifted.
TEST(DurableLog, WriteFailureRefusesOneRecordAndRecoveryStaysConsistent) {
  TempDir dir;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);
    boost::asio::io_context io;
    Recovered rec;
    auto log = DurableLog::Open(io, dir.path(), &rec);
    if (!log.ok()) ::_exit(10);
    rlimit lim{};
    ::getrlimit(RLIMIT_FSIZE, &lim);
    const rlimit unlimited = lim;
    lim.rlim_cur = static_cast<rlim_t>(std::filesystem::file_size(dir / "journal.log") + 1000);
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(11);
    int ok = 0, failed = 0, written = 0;
    for (int i = 0; i < 40; ++i) {
      (*log)->Append({{"i", i}, {"pad", std::string(80, 'x')}}, [&](Status st) { st.ok() ? ++ok : ++failed; });
      if ((*log)->stats().appends == static_cast<uint64_t>(written)) break;  // this append failed to write
      written = static_cast<int>((*log)->stats().appends);
      if (i % 3 == 2 && !(*log)->Flush().ok()) ::_exit(12);
    }
    if (!(*log)->Flush().ok()) ::_exit(13);  // what was written is durable; the refusal is not sticky
    (*log)->Append({{"i", 99}, {"pad", std::string(80, 'x')}}, [&](Status st) { st.ok() ? ++ok : ++failed; });  // still over
    if (::setrlimit(RLIMIT_FSIZE, &unlimited) != 0) ::_exit(15);
    (*log)->Append({{"i", 100}}, [&](Status st) { st.ok() ? ++ok : ++failed; });
    if (!RunUntil(io, [&] { return ok + failed == written + 3; })) ::_exit(14);
    std::string msg = std::to_string(written) + " " + std::to_string(ok) + " " + std::to_string(failed) + "\n";
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  char buf[64] = {};
  ssize_t n = ::read(fds[0], buf, sizeof buf - 1);
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "child failed at check " << WEXITSTATUS(status);
  ASSERT_GT(n, 0);
  int written = 0, ok = 0, failed = 0;
  ASSERT_EQ(std::sscanf(buf, "%d %d %d", &written, &ok, &failed), 3);
  EXPECT_GT(written, 0);
  EXPECT_LT(written, 40);
  EXPECT_EQ(failed, 2) << "the append that hit the limit and the one after it";
  EXPECT_EQ(ok, written + 1) << "every written record and the one after the limit was lifted";

  boost::asio::io_context io;
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  ASSERT_TRUE(log);
  std::vector<int> want = Range(0, written);
  want.push_back(100);
  EXPECT_EQ(Ids(rec.records), want) << "exactly the records that were answered Ok, nothing torn";
}

TEST(DurableLog, GroupCommitThroughput) {
  TempDir dir;
  boost::asio::io_context io;
  Recovered rec;
  auto log = OpenOk(io, dir.path(), &rec);
  const json rec_tmpl = {{"type", "task_state"}, {"job", "j-000123"}, {"task", "actor-0"},
                         {"state", "running"}, {"pid", 12345}, {"t", 1712345678.25}};
  // Baseline: wait for every record (one fsync each).
  constexpr int kSerial = 200;
  auto t0 = Clock::now();
  for (int i = 0; i < kSerial; ++i) {
    log->Append(rec_tmpl);
    ASSERT_TRUE(log->Flush().ok());
  }
  double serial_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // Group commit: append freely, callbacks as fsyncs complete.
  constexpr int kGroup = 20000;
  uint64_t syncs0 = log->stats().syncs;
  int done = 0;
  t0 = Clock::now();
  for (int i = 0; i < kGroup; ++i) log->Append(rec_tmpl, [&done](Status) { ++done; });
  double append_s = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(RunUntil(io, [&] { return done == kGroup; }));
  double group_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("[ perf ] one fsync per record: %.0f records/s\n", kSerial / serial_s);
  std::printf("[ perf ] group commit: %.0f durable records/s (%llu fsyncs for %d records; Append alone %.0f/s)\n",
              kGroup / group_s, static_cast<unsigned long long>(log->stats().syncs - syncs0), kGroup,
              kGroup / append_s);
}

}  // namespace
}  // namespace tandem::store
