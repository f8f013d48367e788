// DurableLog on a real full disk (durable_log.h, "Headroom"; issue #12
// point 3): a 1 MiB tmpfs is filled up, Headroom() says so at once, records
// still go into the reserve, a record that does not fit is refused (not
// sticky), and once space returns the log goes on without a reopen;
// recovery returns exactly the records answered Ok. Needs root (mount);
// skipped, saying so, where mount is not permitted.
#include <sys/mount.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include "orchestrator/store/durable_log.h"
#include "orchestrator/store/tests/temp_dir.h"

namespace tandem::store {
namespace {

using nlohmann::json;

class TmpfsDir : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, "size=1m,mode=0700") != 0) {
      const int err = errno;
      if (err == EPERM) GTEST_SKIP() << "mount -t tmpfs is not permitted here (EPERM): this test needs root";
      FAIL() << "mount tmpfs: " << std::strerror(err);
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }

  // Writes `file` until the file system is full.
  void FillUp(const std::filesystem::path& file) {
    std::ofstream out(file, std::ios::binary);
    const std::string chunk(4096, 'x');
    while (out.write(chunk.data(), static_cast<std::streamsize>(chunk.size())) && out.flush()) {
    }
    out.clear();
    while (out.put('x') && out.flush()) {
    }
  }

  testing::TempDir dir_;
  bool mounted_ = false;
};

// Runs `io` until `n` callbacks came or 10 s.
void RunFor(boost::asio::io_context& io, const int& got, int n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got < n && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(std::chrono::milliseconds(5));
  }
}

TEST_F(TmpfsDir, FullDiskRefusesNewWorkKeepsTheReserveAndRecoversWhenSpaceReturns) {
  boost::asio::io_context io;
  const auto dir = dir_.path() / "store";
  std::vector<int> ok_ids;
  int got = 0, refused = 0;
  {
    Recovered rec;
    auto opened = DurableLog::Open(io, dir, &rec);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    auto& log = *opened;
    ASSERT_TRUE(log->Headroom().ok());
    auto append = [&](int i, size_t pad) {
      log->Append({{"i", i}, {"pad", std::string(pad, 'p')}}, [&, i](Status st) {
        ++got;
        if (st.ok()) ok_ids.push_back(i);
        else ++refused;
      });
    };
    append(0, 100);
    ASSERT_TRUE(log->Flush().ok());

    FillUp(dir_.path() / "filler");
    append(1, 100);  // goes into the reserve
    Status headroom = log->Headroom();
    EXPECT_FALSE(headroom.ok()) << "a full disk must show in Headroom()";
    EXPECT_NE(headroom.message().find("no space left"), std::string::npos) << headroom.ToString();
    // What already happened still gets recorded: the reserve takes ~100 KiB.
    for (int i = 2; i < 102; ++i) append(i, 1000);
    RunFor(io, got, 102);
    EXPECT_EQ(refused, 0) << "records within the reserve must be accepted on a full disk";
    // Past the reserve: refused, one at a time, not sticky.
    for (int i = 102; i < 500; ++i) append(i, 1000);
    RunFor(io, got, 500);
    EXPECT_GT(refused, 0) << "the reserve is bounded";
    EXPECT_FALSE(log->Headroom().ok());

    std::filesystem::remove(dir_.path() / "filler");
    EXPECT_TRUE(log->Headroom().ok()) << "space returned: the log must say so without a reopen";
    append(1000, 100);
    RunFor(io, got, 501);
    EXPECT_TRUE(log->Flush().ok());
    EXPECT_EQ(ok_ids.back(), 1000);
  }
  Recovered rec;
  auto reopened = DurableLog::Open(io, dir, &rec);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  std::vector<int> ids;
  for (const auto& r : rec.records) ids.push_back(r.value("i", -1));
  EXPECT_EQ(ids, ok_ids) << "recovery returns exactly the records answered Ok";
  EXPECT_TRUE(rec.warnings.empty());
}

}  // namespace
}  // namespace tandem::store
