// Submit mode's run-dir records (submit_records.h) on real files: a write
// that fails is reported (crash safety depends on these records), leaves
// neither the record nor its .tmp behind, and a successful one reads back.
#include "backends/slurm/submit_records.h"

#include "common/task_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

namespace tandem::backends::submit {
namespace {

namespace fs = std::filesystem;

TEST(SubmitRecords, AFailedWriteIsReportedAndLeavesNothing) {
  std::string tmpl = (fs::temp_directory_path() / "tandem-records-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  const fs::path missing = dir / "gone" / "task.exit.step.json";
  Status st = WriteJson(missing, {{"job_id", "12"}});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("gone"), std::string::npos) << st.ToString();
  EXPECT_FALSE(fs::exists(missing));

  // The target is a non-empty directory: the rename fails, the .tmp is removed.
  const fs::path blocked = dir / "blocked";
  fs::create_directories(blocked / "inside");
  st = WriteJson(blocked, {{"x", 1}});
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(fs::exists(dir / "blocked.tmp"));

  const fs::path ok = dir / "slurm-batch.json";
  ASSERT_TRUE(WriteJson(ok, {{"job_id", "12"}, {"tandem_job", "j"}}).ok());
  auto back = ReadTaskJson(ok);
  ASSERT_TRUE(back);
  EXPECT_EQ((*back)["job_id"], "12");
  EXPECT_FALSE(fs::exists(dir / "slurm-batch.json.tmp"));
  EXPECT_TRUE(WriteJson({}, {{"x", 1}}).ok()) << "an empty path writes nothing";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::backends::submit
