// Unit tests of run-dir handling (orchestrator/daemon/job_run_dir.h) on real
// files: overlap of resolved paths (symlinks, "..", nesting), archive names
// from hostile job.json files, and archiving confined to the run dir.
#include "orchestrator/daemon/job_run_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include <gtest/gtest.h>

namespace tandem::daemon {
namespace {

namespace fs = std::filesystem;

class RunDirFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "tandem-rundir-unit-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST(DirsOverlap, Table) {
  struct Row {
    const char* a;
    const char* b;
    bool overlap;
  };
  const Row rows[] = {
      {"/r/a", "/r/a", true},     {"/r/a", "/r/a/sub", true}, {"/r/a/sub", "/r/a", true},
      {"/r/a", "/r/ab", false},   {"/r/a", "/r/b", false},    {"/r", "/r/a/b/c", true},
  };
  for (const Row& r : rows) EXPECT_EQ(DirsOverlap(r.a, r.b), r.overlap) << r.a << " vs " << r.b;
}

TEST_F(RunDirFiles, ResolvedDirSeesThroughSymlinksDotDotAndTrailingSlashes) {
  fs::create_directories(root_ / "runs" / "a");
  fs::create_directories(root_ / "runs" / "b");
  fs::create_directory_symlink(root_ / "runs" / "a", root_ / "link");
  const fs::path a = ResolvedDir((root_ / "runs" / "a").string());
  EXPECT_EQ(ResolvedDir((root_ / "link").string()), a);
  EXPECT_EQ(ResolvedDir((root_ / "link").string() + "/"), a);
  EXPECT_EQ(ResolvedDir((root_ / "runs" / "b" / ".." / "a").string()), a);
  EXPECT_TRUE(DirsOverlap(ResolvedDir((root_ / "link" / "not-yet").string()), a));
}

TEST_F(RunDirFiles, ArchiveNameTakesOnlyWhatAJobIdCanHold) {
  struct Row {
    std::string content;
    std::string want;
  };
  const std::vector<Row> rows = {
      {R"({"id": "train-01ab2c"})", "train-01ab2c"},
      {R"({"id": "../../escape"})", "previous"},
      {R"({"id": ".."})", "previous"},
      {R"({"id": "a/b"})", "previous"},
      {R"({"id": ""})", "previous"},
      {R"({"id": 7})", "previous"},
      {R"(["id"])", "previous"},
      {"not json", "previous"},
      {R"({"id": ")" + std::string(200, 'x') + R"("})", "previous"},
  };
  for (const Row& r : rows) {
    std::ofstream(root_ / "job.json", std::ios::trunc) << r.content;
    EXPECT_EQ(ArchiveName(root_ / "job.json"), r.want) << r.content;
  }
  EXPECT_EQ(ArchiveName(root_ / "missing.json"), "previous");
}

TEST_F(RunDirFiles, ArchiveStaysInsideTheRunDirAndNeverOverwrites) {
  const fs::path run = root_ / "run";
  fs::create_directories(run / "tasks");
  std::ofstream(run / "job.json") << R"({"id": "old-1"})";
  ASSERT_TRUE(ArchivePreviousRun(run).ok());
  EXPECT_TRUE(fs::exists(run / "history" / "old-1" / "job.json"));
  EXPECT_TRUE(fs::exists(run / "history" / "old-1" / "tasks"));
  std::ofstream(run / "job.json") << R"({"id": "old-1"})";  // the same id again
  ASSERT_TRUE(ArchivePreviousRun(run).ok());
  EXPECT_TRUE(fs::exists(run / "history" / "old-1-2" / "job.json"));

  const fs::path elsewhere = root_ / "elsewhere";
  fs::create_directories(elsewhere);
  fs::remove_all(run / "history");
  fs::create_directory_symlink(elsewhere, run / "history");
  std::ofstream(run / "job.json") << R"({"id": "old-2"})";
  Status st = ArchivePreviousRun(run);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("history"), std::string::npos) << st.ToString();
  EXPECT_TRUE(fs::is_empty(elsewhere));
  EXPECT_TRUE(fs::exists(run / "job.json"));
}

TEST_F(RunDirFiles, PrepareDirModesDoNotDependOnTheUmask) {
  const mode_t old = ::umask(0);
  const fs::path dir = root_ / "x" / "y";
  Status st = PrepareDir(dir, true);
  ::umask(old);
  ASSERT_TRUE(st.ok()) << st.ToString();
  struct stat s {};
  ASSERT_EQ(::stat(dir.c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat((root_ / "x").c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 07777, 0755u);
  ::chmod(dir.c_str(), 0777);
  EXPECT_EQ(PrepareDir(dir, true).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(WritePrivateFile(root_ / "job.json", "{}").ok());
  ASSERT_EQ(::stat((root_ / "job.json").c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 07777, 0600u);
}

}  // namespace
}  // namespace tandem::daemon
