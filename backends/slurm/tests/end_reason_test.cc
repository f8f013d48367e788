// Slurm's end-of-step banners (end_reason.h), from real slurmstepd/srun text.
#include "backends/slurm/end_reason.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace tandem::backends::slurm {
namespace {

TEST(EndReason, FindsTheTimeLimitBanner) {
  const std::string err =
      "working\n"
      "slurmstepd: error: *** STEP 12.3 ON vm CANCELLED AT 2026-11-30T11:00:00 DUE TO TIME LIMIT ***\n"
      "srun: error: vm: task 0: Terminated\n";
  EXPECT_EQ(BannerIn(err), "STEP 12.3 ON vm CANCELLED AT 2026-11-30T11:00:00 DUE TO TIME LIMIT");
}

TEST(EndReason, FindsJobBannersAndTakesTheLast) {
  const std::string err =
      "slurmstepd: error: *** STEP 4.0 ON vm CANCELLED AT 2026-11-30T10:00:00 ***\n"
      "slurmstepd: error: *** JOB 4 ON vm CANCELLED AT 2026-11-30T10:00:01 DUE TO PREEMPTION ***\n";
  EXPECT_EQ(BannerIn(err), "JOB 4 ON vm CANCELLED AT 2026-11-30T10:00:01 DUE TO PREEMPTION");
}

TEST(EndReason, IgnoresOrdinaryOutput) {
  EXPECT_EQ(BannerIn(""), "");
  EXPECT_EQ(BannerIn("*** warning *** nothing to see\n*** bold ***\n"), "");
}

TEST(EndReason, ReadsTheFirstFileWithABanner) {
  auto dir = std::filesystem::temp_directory_path() / ("end_reason_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a") << "plain\n";
  std::ofstream(dir / "b") << std::string(100000, 'x') << "\n"
                           << "slurmstepd: error: *** STEP 1.0 ON n1 CANCELLED AT X DUE TO NODE FAILURE ***\n";
  // The step's stderr is the task's: a FIFO or a symlink there is skipped, not waited on or followed.
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  std::filesystem::create_symlink("/dev/zero", dir / "zero");
  EXPECT_EQ(BannerInFiles({dir / "missing", dir / "fifo", dir / "zero", dir / "a", dir / "b"}),
            "STEP 1.0 ON n1 CANCELLED AT X DUE TO NODE FAILURE");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::backends::slurm
