// Crash safety of DurableLog with real processes (durable_log.h, issue #2
// "never loses a job"): a child process appends records in a loop (flushing
// now and then, compacting in one mode) and reports each record on a pipe
// once its on_durable callback ran. The parent kill -9s it at random moments,
// recovers the directory, and checks that every reported record is there, in
// order, once, and that nothing corrupt comes back; in half of the rounds it
// first cuts the journal at a random byte after the last reported record, as
// a power loss may. Then the next round's child continues on that directory.
//
// TANDEM_TEST_SEED=<n> replays a run (the seed is printed).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>

#include "orchestrator/store/durable_log.h"
#include "orchestrator/store/tests/temp_dir.h"

namespace tandem::store {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string PadFor(uint64_t id) { return std::string(id % 61, static_cast<char>('a' + id % 26)); }

json Record(uint64_t id) { return {{"i", id}, {"pad", PadFor(id)}}; }

void Say(int fd, const std::string& s) {
  std::string_view rest = s;
  while (!rest.empty()) {
    ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      ::_exit(7);
    }
    rest.remove_prefix(static_cast<size_t>(n));
  }
}

// The child: recover, then append forever. Reports "D <id>" when durable and
// "C" before each compaction. Never returns.
[[noreturn]] void ChildMain(const fs::path& dir, int out, int compact_every, size_t snapshot_pad) {
  boost::asio::io_context io;
  Recovered rec;
  auto opened = DurableLog::Open(io, dir, &rec);
  if (!opened.ok()) {
    Say(out, "E " + opened.status().ToString() + "\n");
    ::_exit(2);
  }
  std::unique_ptr<DurableLog> log = std::move(opened).value();
  uint64_t next = (rec.snapshot.is_null() ? 0 : rec.snapshot["count"].get<uint64_t>()) + rec.records.size();
  std::function<void()> step = [&] {
    for (int k = 0; k < 16; ++k) {
      const uint64_t id = next++;
      log->Append(Record(id), [id, out](Status st) {
        if (!st.ok()) ::_exit(3);
        Say(out, "D " + std::to_string(id) + "\n");
      });
      if (compact_every > 0 && next % compact_every == 0) {
        Say(out, "C\n");
        json snap = {{"count", next}, {"pad", std::string(snapshot_pad, 'p')}};
        if (!log->Compact(snap).ok()) ::_exit(4);
      }
    }
    if (next % 512 < 16 && !log->Flush().ok()) ::_exit(5);
    boost::asio::post(io, step);
  };
  boost::asio::post(io, step);
  io.run();
  ::_exit(6);
}

struct Round {
  int64_t last_reported = -1;  // highest id reported durable
  int compactions_seen = 0;
  std::string error;
};

// Reads the child's reports, checking that durable ids arrive in order.
class ReportReader {
 public:
  ReportReader(int fd, Round* round) : fd_(fd), round_(round) {}

  // Reads what is available within `timeout_ms`; false at EOF.
  bool Pump(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return true;
    char buf[4096];
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n <= 0) return false;
    pending_.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending_.find('\n')) != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (line == "C") {
        ++round_->compactions_seen;
      } else if (line.rfind("D ", 0) == 0) {
        int64_t id = std::stoll(line.substr(2));
        if (round_->last_reported >= 0 && id != round_->last_reported + 1 && round_->error.empty()) {
          round_->error = "durable callbacks out of order: " + std::to_string(id) + " after " +
                          std::to_string(round_->last_reported);
        }
        round_->last_reported = id;
      } else if (round_->error.empty()) {
        round_->error = "child: " + line;
      }
    }
    return true;
  }

 private:
  int fd_;
  Round* round_;
  std::string pending_;
};

struct Totals {
  uint64_t recovered = 0;  // records (incl. snapshot count) after the last recovery
  int torn_tails = 0;
  int superseded = 0;
  int tmp_files_at_kill = 0;
  int tails_cut = 0;
};

// Recovers `dir` in this process and checks it against what was reported.
void Verify(const fs::path& dir, int64_t last_reported, Totals* t, int round) {
  if (fs::exists(dir / "snapshot.json.tmp") || fs::exists(dir / "journal.log.tmp")) ++t->tmp_files_at_kill;
  boost::asio::io_context io;
  Recovered rec;
  auto log = DurableLog::Open(io, dir, &rec);
  ASSERT_TRUE(log.ok()) << "round " << round << ": " << log.status().ToString();
  uint64_t count = 0;
  if (!rec.snapshot.is_null()) {
    ASSERT_TRUE(rec.snapshot.contains("count"));
    count = rec.snapshot["count"].get<uint64_t>();
  }
  for (size_t k = 0; k < rec.records.size(); ++k) {
    ASSERT_EQ(rec.records[k], Record(count + k))
        << "round " << round << ": record " << k << " after a snapshot of " << count
        << " is not the next one (duplicate, gap or corrupt)";
  }
  uint64_t total = count + rec.records.size();
  EXPECT_GE(static_cast<int64_t>(total), last_reported + 1)
      << "round " << round << ": record " << last_reported << " was reported durable but lost";
  EXPECT_GE(total, t->recovered) << "round " << round << ": recovered fewer records than last time";
  t->recovered = total;
  for (const std::string& w : rec.warnings) {
    if (w.find("torn") != std::string::npos || w.find("corrupt last") != std::string::npos) ++t->torn_tails;
    if (w.find("superseded") != std::string::npos) ++t->superseded;
  }
}

// Simulates a power loss on top of the kill: everything after the last record
// known durable (`last_durable`) may never have been fsync'd, so the file may
// end anywhere after it. Cuts the journal at a random byte there.
// Returns whether it cut something.
bool CutUnsyncedTail(const fs::path& dir, int64_t last_durable, std::mt19937_64& rng) {
  const fs::path journal = dir / "journal.log";
  std::error_code ec;
  const uint64_t size = fs::file_size(journal, ec);
  if (ec) return false;
  std::string text(size, '\0');
  {
    FILE* f = std::fopen(journal.c_str(), "rb");
    if (!f) return false;
    size_t n = std::fread(text.data(), 1, size, f);
    std::fclose(f);
    if (n != size) return false;
  }
  size_t keep;
  if (last_durable < 0) {
    keep = text.find('\n');  // the header is written by rename: always whole
  } else {
    size_t at = text.find(" {\"i\":" + std::to_string(last_durable) + ",");
    if (at == std::string::npos) return false;  // already in the snapshot
    keep = text.find('\n', at);
  }
  if (keep == std::string::npos || keep + 1 >= size) return false;
  const uint64_t cut_to = keep + 1 + rng() % (size - keep - 1);
  fs::resize_file(journal, cut_to, ec);
  return !ec;
}

uint64_t Seed() {
  if (const char* s = std::getenv("TANDEM_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

// Without kill_in_compaction: kill at a random time; otherwise right after
// the child announces that many compactions, with a random delay of 0-40 ms
// (a compaction here takes a few fsyncs, so the kill lands in every step).
// A kill -9 cannot tear a single write(2); torn tails come from the
// simulated power loss (CutUnsyncedTail) and from durable_log_test.cc.
// In half of the rounds the unsynced tail is also cut (CutUnsyncedTail).
void RunKillRounds(int rounds, int compact_every, size_t snapshot_pad, bool kill_in_compaction) {
  const uint64_t seed = Seed();
  std::printf("[ seed ] TANDEM_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  testing::TempDir dir;
  Totals totals;
  int64_t last_reported = -1;
  for (int round = 0; round < rounds; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    std::fflush(nullptr);  // the child must not inherit unflushed output
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      ChildMain(dir.path(), fds[1], compact_every, snapshot_pad);
    }
    ::close(fds[1]);
    Round r;
    ReportReader reader(fds[0], &r);
    const int want_compactions = 1 + static_cast<int>(rng() % 3);
    const auto run_for = std::chrono::milliseconds(20 + rng() % 150);
    const auto start = Clock::now();
    bool alive = true;
    while (alive) {
      alive = reader.Pump(1);
      if (!r.error.empty()) break;
      if (kill_in_compaction ? r.compactions_seen >= want_compactions
                             : (r.last_reported >= 0 && Clock::now() - start >= run_for)) {
        break;
      }
      ASSERT_LT(Clock::now() - start, std::chrono::seconds(60)) << "child made no progress";
    }
    if (kill_in_compaction) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    while (reader.Pump(1000)) {
    }  // reports written before the kill still count
    ::close(fds[0]);
    ASSERT_TRUE(r.error.empty()) << "round " << round << ": " << r.error;
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "round " << round << ": child exited on its own, status " << status;
    if (r.last_reported >= 0) {
      ASSERT_GT(r.last_reported, last_reported) << "round " << round << ": reported ids went backwards";
      last_reported = r.last_reported;
    }
    // Durable: what was reported, and what the last recovery returned (Open fsyncs it).
    const int64_t durable = std::max<int64_t>(last_reported, static_cast<int64_t>(totals.recovered) - 1);
    if (rng() % 2 && CutUnsyncedTail(dir.path(), durable, rng)) ++totals.tails_cut;
    Verify(dir.path(), last_reported, &totals, round);
    if (::testing::Test::HasFatalFailure()) return;
  }
  std::printf("[ crash ] %d kill -9 rounds: %llu records recovered, last reported durable %lld, "
              "unsynced tails cut %d, torn tails skipped %d, interrupted compactions recovered %d, "
              "tmp files at kill %d\n",
              rounds, static_cast<unsigned long long>(totals.recovered), static_cast<long long>(last_reported),
              totals.tails_cut, totals.torn_tails, totals.superseded, totals.tmp_files_at_kill);
}

TEST(DurableLogCrash, KillDuringAppendsLosesNothingReported) { RunKillRounds(8, 0, 0, false); }

TEST(DurableLogCrash, KillDuringCompactionLosesNothingReported) { RunKillRounds(12, 48, 64 * 1024, true); }

}  // namespace
}  // namespace tandem::store
