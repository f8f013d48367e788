// Run dirs are the job's alone (issue #12, point 6; docs/jobspec.md
// "run_dir"), with a real tandemd: a live job's run dir cannot be taken by
// a second job however the path is spelled (symlink, "..", nested); an old
// job.json's id never moves files out of the run dir, nor does a history
// symlink; files holding the spec's environment are 0600 and the run dir is
// not world-writable even under umask 0; task limits refuse too-wide jobs
// naming the limit with their own error code, and a wide job launches in
// batches of the daemon's --launch-batch while the API answers.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/daemon/daemon_process.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

mode_t ModeOf(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

class RunDirs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("tandem-rundir");
    ASSERT_FALSE(root_.empty());
    old_umask_ = ::umask(0);  // the daemon inherits it: modes must not depend on it
    d_ = std::make_unique<DaemonProcess>(root_ / "state", std::vector<std::string>{
                                                              "--grace", "1", "--gpus", "none",
                                                              "--max-tasks-per-job", "300", "--max-tasks", "320",
                                                              "--launch-batch", "7"});
    d_->Start();
  }
  void TearDown() override {
    for (const auto& id : jobs_) (void)d_->client().Request("POST", "/v1/jobs/" + id + "/cancel", "");
    for (const auto& id : jobs_) d_->WaitJob(id, std::chrono::seconds(20));
    d_.reset();
    ::umask(old_umask_);
    fs::remove_all(root_);
  }

  json Sleeper(const std::string& name, const fs::path& run_dir, int replicas = 1) {
    json spec = BashJob(name, "sleep 60", replicas);
    if (!run_dir.empty()) spec["run_dir"] = run_dir.string();
    spec["env"] = {{"SECRET_TOKEN", "hunter2"}};
    return spec;
  }

  std::string SubmitOk(const json& spec) {
    const std::string id = d_->Submit(spec);
    if (!id.empty()) jobs_.push_back(id);
    return id;
  }

  // The HTTP status and error message of a submit expected to be refused
  // (and its error code in `code`).
  std::pair<int, std::string> SubmitRefused(const json& spec, std::string* code = nullptr) {
    auto r = d_->client().Request("POST", "/v1/jobs", spec.dump());
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return {0, ""};
    if (r->status == 201) jobs_.push_back(r->Json().value("id", ""));
    const json body = r->Json();
    if (code) *code = body.contains("error") ? body["error"].value("code", "") : "";
    return {r->status, body.contains("error") ? body["error"].value("message", "") : ""};
  }

  fs::path root_;
  mode_t old_umask_ = 022;
  std::unique_ptr<DaemonProcess> d_;
  std::vector<std::string> jobs_;
};

TEST_F(RunDirs, ALiveJobsRunDirCannotBeTakenHoweverItIsSpelled) {
  const fs::path run = root_ / "runs" / "a";
  const std::string a = SubmitOk(Sleeper("first", run));
  ASSERT_FALSE(a.empty());
  ASSERT_TRUE(WaitFor([&] { return d_->JobState(a) == "running"; }));
  fs::create_directory_symlink(run, root_ / "link");
  fs::create_directories(root_ / "runs" / "b");
  for (const fs::path& spelled : {root_ / "link", root_ / "runs" / "b" / ".." / "a", root_ / "runs" / "a" / "sub",
                                  root_ / "runs", root_ / "link" / ""}) {
    auto [status, message] = SubmitRefused(Sleeper("second", spelled));
    EXPECT_EQ(status, 409) << spelled << ": " << message;
    EXPECT_NE(message.find("in use by running job " + a), std::string::npos) << message;
  }
  EXPECT_TRUE(fs::exists(run / "job.json")) << "the live job's files must stay where they are";
  EXPECT_TRUE(fs::exists(run / "events.jsonl"));
  EXPECT_FALSE(fs::exists(run / "history"));
}

TEST_F(RunDirs, AnOldRunIsArchivedInsideTheRunDirOnly) {
  const fs::path run = root_ / "reused";
  fs::create_directories(run / "tasks");
  fs::permissions(run, fs::perms(0755));  // umask is 0 here
  fs::permissions(run / "tasks", fs::perms(0755));
  const fs::path outside = root_ / "escape";
  std::ofstream(run / "job.json") << json{{"id", "../../escape"}}.dump();
  std::ofstream(run / "events.jsonl") << "{}\n";
  const std::string a = SubmitOk(Sleeper("reuse", run));
  ASSERT_FALSE(a.empty());
  EXPECT_FALSE(fs::exists(outside)) << "an id from an old job.json moved files outside the run dir";
  EXPECT_FALSE(fs::exists(root_ / "events.jsonl"));
  EXPECT_TRUE(fs::exists(run / "history" / "previous" / "job.json"));
  EXPECT_TRUE(fs::exists(run / "history" / "previous" / "events.jsonl"));
  (void)d_->client().Request("POST", "/v1/jobs/" + a + "/cancel", "");
  ASSERT_EQ(d_->WaitJob(a, std::chrono::seconds(20)), "cancelled");

  // A task replaced history/ by a symlink to somewhere else: nothing goes there.
  const fs::path elsewhere = root_ / "elsewhere";
  fs::create_directories(elsewhere);
  fs::rename(run / "history", root_ / "old-history");
  fs::create_directory_symlink(elsewhere, run / "history");
  auto [status, message] = SubmitRefused(Sleeper("reuse-again", run));
  EXPECT_NE(status, 201) << "archiving through a history symlink must be refused";
  EXPECT_NE(message.find("history"), std::string::npos) << message;
  EXPECT_TRUE(fs::is_empty(elsewhere)) << "files were moved through the history symlink";
  EXPECT_TRUE(fs::exists(run / "job.json")) << "the previous run's files stay in place";
}

TEST_F(RunDirs, FilesHoldingTheEnvironmentArePrivateAndTheRunDirIsNotWorldWritable) {
  const fs::path run = root_ / "private";
  const std::string a = SubmitOk(Sleeper("private", run));
  ASSERT_FALSE(a.empty());
  ASSERT_TRUE(WaitFor([&] { return d_->JobState(a) == "running"; }));
  EXPECT_EQ(ModeOf(run / "job.json"), 0600u);
  EXPECT_EQ(ModeOf(run / "events.jsonl"), 0600u);
  EXPECT_EQ(ModeOf(run / "tasks" / "main.0.out"), 0600u);
  EXPECT_EQ(ModeOf(run / "tasks" / "main.0.err"), 0600u);
  EXPECT_EQ(ModeOf(run) & S_IWOTH, 0u) << std::oct << ModeOf(run);
  EXPECT_EQ(ModeOf(run / "tasks") & S_IWOTH, 0u) << std::oct << ModeOf(run / "tasks");

  // A world-writable existing dir is refused as a run dir.
  const fs::path open_dir = root_ / "open";
  fs::create_directories(open_dir);
  ::chmod(open_dir.c_str(), 0777);
  auto [status, message] = SubmitRefused(Sleeper("open", open_dir));
  EXPECT_EQ(status, 409) << message;
  EXPECT_NE(message.find("writable by every user"), std::string::npos) << message;
}

// Task limits have their own error code, `task_limit` (docs/api.md
// "Errors"): 409 for the per-job limit (no retry passes it), 429 for the
// daemon-wide one (it frees as jobs end); not `does_not_fit`, which says
// the devices can never hold the job.
TEST_F(RunDirs, TaskLimitsRefuseWideJobsNamingTheLimit) {
  std::string code;
  auto [status, message] = SubmitRefused(Sleeper("too-wide", "", 100000), &code);
  EXPECT_EQ(status, 409) << message;
  EXPECT_EQ(code, "task_limit") << message;
  EXPECT_NE(message.find("TANDEM_MAX_TASKS_PER_JOB"), std::string::npos) << message;
  EXPECT_NE(message.find("300"), std::string::npos) << message;

  const std::string a = SubmitOk(Sleeper("fits", "", 200));
  ASSERT_FALSE(a.empty());
  std::tie(status, message) = SubmitRefused(Sleeper("over-daemon-limit", "", 200), &code);
  EXPECT_EQ(status, 429) << message;
  EXPECT_EQ(code, "task_limit") << message;
  EXPECT_NE(message.find("TANDEM_MAX_TASKS)"), std::string::npos) << message;
  // A job the devices can never hold keeps its own code.
  json gpu = Sleeper("no-gpus", "");
  gpu["devices"] = {{"count", 1}};
  gpu["roles"]["main"]["gpus_per_replica"] = 1;
  std::tie(status, message) = SubmitRefused(gpu, &code);
  EXPECT_EQ(status, 409) << message;
  EXPECT_EQ(code, "does_not_fit") << message;
}

// The launch batch is a daemon setting (--launch-batch, TANDEM_LAUNCH_BATCH;
// 7 here): the submit's answer shows the first batch launched, no more.
TEST_F(RunDirs, TheLaunchBatchIsADaemonSetting) {
  auto r = d_->client().Request("POST", "/v1/jobs", Sleeper("batched", "", 20).dump());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->status, 201) << r->body;
  const json job = r->Json();
  jobs_.push_back(job.value("id", ""));
  EXPECT_EQ(job["task_states"].value("running", 0), 7) << job.dump();
  EXPECT_EQ(job["task_states"].value("pending", 0), 13) << job.dump();
  ASSERT_TRUE(WaitFor([&] { return d_->Job(jobs_.back())["task_states"].value("running", 0) == 20; }))
      << d_->Job(jobs_.back()).dump();
}

TEST_F(RunDirs, AWideJobLaunchesInBatchesWhileTheApiAnswers) {
  const std::string a = SubmitOk(Sleeper("wide", "", 200));
  ASSERT_FALSE(a.empty());
  bool seen_partial = false;
  int answered = 0;
  ASSERT_TRUE(WaitFor([&] {
    auto h = d_->client().Request("GET", "/healthz");
    if (h.ok() && h->status == 200) ++answered;
    const json job = d_->Job(a);
    if (!job.is_object()) return false;
    const json counts = job.value("task_states", json::object());
    const int running = counts.value("running", 0), pending = counts.value("pending", 0);
    if (running > 0 && pending > 0) seen_partial = true;
    return running == 200;
  }, std::chrono::seconds(60))) << d_->Job(a).dump();
  EXPECT_TRUE(seen_partial) << "the API was not answered while the job was being launched";
  EXPECT_GE(answered, 1);
}

}  // namespace
}  // namespace tandem::testing
