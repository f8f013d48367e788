// Exact resume of sft from its checkpoints (sft_checkpoint.h; issue #15
// item 2): a run stopped at step k and resumed computes the same losses,
// gradient norms and learning rates, step for step, and ends with the same
// parameters, optimizer state and generators, byte for byte, as the run that
// never stopped; so does a run killed with SIGKILL at a random point and
// resumed. A corrupt newest checkpoint is skipped with its reason, and a
// checkpoint of another run is refused naming what differs. Label `learning`.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "workers/model/checkpoint.h"
#include "workers/roles/sft_role.h"

extern char** environ;

namespace tandem::roles {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<nlohmann::json> ReadLog(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream f(p);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// step -> the step line's loss, grad_norm and lr (what must repeat exactly).
std::map<int64_t, nlohmann::json> StepLines(const std::vector<nlohmann::json>& log) {
  std::map<int64_t, nlohmann::json> out;
  for (const nlohmann::json& j : log)
    if (j["event"] == "step")
      out[j["step"].get<int64_t>()] = {{"loss", j["loss"]}, {"grad_norm", j["grad_norm"]}, {"lr", j["lr"]}};
  return out;
}

class SftResume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tandem_sft_resume_" + std::to_string(getpid()) + "_" +
                                        std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A tiny run of 6 steps, one log line per step, one thread (so the
  // arithmetic repeats exactly), its files under dir_/name.
  SftOptions Options(const std::string& name) const {
    SftOptions o;
    o.dataset = "synthetic-arith";
    o.dataset_options = {{"seed", 7}, {"level", 1}, {"style", "plain"}};
    o.preset = "tiny";
    o.max_steps = 6;
    o.batch_size = 4;
    o.lr = 1e-2;
    o.warmup_steps = 2;
    o.log_every = 1;
    o.eval_problems = 2;
    o.eval_max_new_tokens = 4;
    o.seed = 3;
    o.threads = 1;
    o.out_dir = (dir_ / name / "model").string();
    o.log_path = (dir_ / name / "log.jsonl").string();
    o.checkpoint_dir = (dir_ / name / "ckpt").string();
    o.checkpoint_every = 2;
    fs::create_directories(dir_ / name);
    return o;
  }

  // The reference: 6 steps, never stopped.
  void RunReference() {
    const SftOptions a = Options("a");
    StatusOr<SftResult> r = RunSft(a);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->steps, 6);
    ASSERT_EQ(r->resumed_from, -1);
    reference_ = *r;
    reference_steps_ = StepLines(ReadLog(a.log_path));
    ASSERT_EQ(reference_steps_.size(), 6u);
  }

  // What must equal the reference, byte for byte, after a resumed run `name`.
  void ExpectSameEnd(const std::string& name) {
    EXPECT_EQ(ReadFile(dir_ / name / "model" / "model.safetensors"), ReadFile(dir_ / "a" / "model" / "model.safetensors"))
        << name << ": final parameters differ";
    for (const char* f : {"trainer.safetensors", "model/model.safetensors"})
      EXPECT_EQ(ReadFile(dir_ / name / "ckpt" / "step-00000006" / f), ReadFile(dir_ / "a" / "ckpt" / "step-00000006" / f))
          << name << ": the step-6 checkpoint's " << f << " differs";
  }

  fs::path dir_;
  SftResult reference_;
  std::map<int64_t, nlohmann::json> reference_steps_;
};

TEST_F(SftResume, AStoppedAndResumedRunIsTheUninterruptedRunStepForStep) {
  ASSERT_NO_FATAL_FAILURE(RunReference());

  SftOptions b = Options("b");
  b.stop_at_step = 3;
  StatusOr<SftResult> first = RunSft(b);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->stopped);
  EXPECT_EQ(first->steps, 3);
  EXPECT_FALSE(fs::exists(b.out_dir)) << "a stopped run writes no --out";
  EXPECT_TRUE(fs::exists(fs::path(b.checkpoint_dir) / "step-00000002" / "manifest.json"));
  EXPECT_TRUE(fs::exists(fs::path(b.checkpoint_dir) / "step-00000003" / "manifest.json"));
  // The checkpoint's model is an HF directory of its own.
  StatusOr<std::unique_ptr<model::Transformer>> m =
      model::LoadPretrained((fs::path(b.checkpoint_dir) / "step-00000003" / "model").string(), at::kCPU, at::kFloat);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  fs::copy(dir_ / "b", dir_ / "c", fs::copy_options::recursive);  // the same stopped run, for the corrupt case

  b.stop_at_step = 0;
  b.resume = true;
  StatusOr<SftResult> second = RunSft(b);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->resumed_from, 3);
  EXPECT_EQ(second->steps, 6);
  EXPECT_EQ(StepLines(ReadLog(b.log_path)), reference_steps_);
  EXPECT_EQ(second->accuracy_before, reference_.accuracy_before);
  EXPECT_EQ(second->accuracy_after, reference_.accuracy_after);
  EXPECT_EQ(second->final_responses, reference_.final_responses);
  EXPECT_EQ(second->last_loss, reference_.last_loss);
  ExpectSameEnd("b");

  // Resuming a finished run does no step and writes the same model again.
  StatusOr<SftResult> again = RunSft(b);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->resumed_from, 6);
  ExpectSameEnd("b");

  // The newest checkpoint corrupted: skipped with its reason, the run
  // resumes from step 2 and still ends where the reference does.
  SftOptions c = Options("c");
  c.resume = true;
  {
    std::fstream f(fs::path(c.checkpoint_dir) / "step-00000003" / "trainer.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x5a');
  }
  StatusOr<SftResult> from_two = RunSft(c);
  ASSERT_TRUE(from_two.ok()) << from_two.status().ToString();
  EXPECT_EQ(from_two->resumed_from, 2);
  nlohmann::json resumed;
  for (const nlohmann::json& j : ReadLog(c.log_path))
    if (j["event"] == "resumed") resumed = j;
  ASSERT_EQ(resumed["step"], 2) << resumed.dump();
  ASSERT_EQ(resumed["skipped"].size(), 1u) << resumed.dump();
  EXPECT_NE(resumed["skipped"][0]["why"].get<std::string>().find("digest mismatch of file \"trainer.safetensors\""),
            std::string::npos)
      << "the resumed line names the skipped checkpoint and why: " << resumed.dump();
  EXPECT_EQ(StepLines(ReadLog(c.log_path)), reference_steps_);
  ExpectSameEnd("c");
}

TEST_F(SftResume, RefusesAnotherRunsCheckpointsAndOnesThatAreAllBroken) {
  SftOptions o = Options("r");
  o.stop_at_step = 2;
  ASSERT_TRUE(RunSft(o).ok());

  SftOptions other = o;
  other.resume = true;
  other.batch_size = 5;
  other.seed = 4;
  StatusOr<SftResult> r = RunSft(other);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("written by another run: batch_size 4 (this run: 5), seed 3 (this run: 4)"),
            std::string::npos)
      << r.status().message();

  // Every checkpoint broken: an error, not a silent fresh start.
  fs::remove(fs::path(o.checkpoint_dir) / "step-00000002" / "manifest.json");
  SftOptions again = o;
  again.resume = true;
  r = RunSft(again);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("missing manifest.json"), std::string::npos) << r.status().message();

  // Options that need a checkpoint directory.
  SftOptions bare = Options("s");
  bare.checkpoint_dir.clear();
  bare.checkpoint_every = 0;
  bare.resume = true;
  r = RunSft(bare);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("need --checkpoint-dir"), std::string::npos) << r.status().message();
}

// `tandem-worker sft` killed with SIGKILL at a random point after its first
// checkpoint, then started again with --resume, ends where the reference does.
TEST_F(SftResume, AKilledWorkerResumesToTheSameParameters) {
  ASSERT_NO_FATAL_FAILURE(RunReference());
  const SftOptions k = Options("k");
  std::vector<std::string> args = {std::string(std::getenv("TANDEM_BIN_DIR") ? std::getenv("TANDEM_BIN_DIR") : "bin") +
                                       "/tandem-worker",
                                   "sft",
                                   "--dataset-options", k.dataset_options.dump(),
                                   "--preset", "tiny",
                                   "--max-steps", "6",
                                   "--batch-size", "4",
                                   "--lr", "0.01",
                                   "--warmup-steps", "2",
                                   "--log-every", "1",
                                   "--eval-problems", "2",
                                   "--eval-max-new-tokens", "4",
                                   "--seed", "3",
                                   "--threads", "1",
                                   "--out", k.out_dir,
                                   "--log", k.log_path,
                                   "--checkpoint-dir", k.checkpoint_dir,
                                   "--checkpoint-every", "1",
                                   "--resume"};
  auto spawn = [&args](pid_t* pid) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    return posix_spawn(pid, argv[0], nullptr, nullptr, argv.data(), environ);
  };
  std::mt19937 rng(std::random_device{}());
  const int kill_after = 1 + static_cast<int>(rng() % 3);  // checkpoints seen before the kill
  const auto delay = std::chrono::milliseconds(rng() % 40);
  pid_t pid = -1;
  ASSERT_EQ(spawn(&pid), 0) << args[0];
  bool exited = false;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);;) {
    int seen = 0;
    for (const nlohmann::json& j : ReadLog(k.log_path)) seen += j["event"] == "checkpoint";
    if (seen >= kill_after) break;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no checkpoint within 120 s";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_FALSE(exited) << "the worker exited before the kill";
  std::this_thread::sleep_for(delay);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0));
  const bool finished = WIFEXITED(status);

  ASSERT_EQ(spawn(&pid), 0);
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the resumed worker failed; log " << k.log_path;
  int resumes = 0;
  for (const nlohmann::json& j : ReadLog(k.log_path)) resumes += j["event"] == "resumed";
  EXPECT_GE(resumes, finished ? 0 : 1) << "killed after " << kill_after << " checkpoints + " << delay.count() << " ms";
  // Steps after the resumed one were logged twice (once before the kill);
  // every line of a step says the same.
  for (const nlohmann::json& j : ReadLog(k.log_path)) {
    if (j["event"] != "step") continue;
    const nlohmann::json line = {{"loss", j["loss"]}, {"grad_norm", j["grad_norm"]}, {"lr", j["lr"]}};
    EXPECT_EQ(line, reference_steps_[j["step"].get<int64_t>()]) << "step " << j["step"];
  }
  ExpectSameEnd("k");
}

}  // namespace
}  // namespace tandem::roles
