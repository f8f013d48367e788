// The actor's checkpoints (actor_checkpoint.h): a saved checkpoint restores
// the model, AdamW's state and metrics.jsonl as they were (the lines
// written after it are dropped); its progress is read back whole; hostile
// progress is refused naming the key; a checkpoint of another run is
// refused naming what differs, before anything is written into the run; a
// root without checkpoints is a first start. The job-level faults (kill -9
// of the actor and a rollout mid-run) are tests/actor_restart_test.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "workers/model/tests/model_test_util.h"
#include "workers/model/transformer.h"
#include "workers/roles/actor_checkpoint.h"
#include "workers/train/adamw.h"
#include "workers/train/tests/lone_rank.h"

namespace tandem::roles {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void WriteFile(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

class ActorCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem_actor_ckpt_" + std::to_string(getpid()) + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_ / "base");
    WriteFile(dir_ / "base" / "tokenizer.json", "{}");
    at::manual_seed(3);
    auto net = model::Transformer::Create(model::testing::TinyConfig(/*moe=*/false, 1), at::kCPU, at::kFloat);
    ASSERT_TRUE(net.ok()) << net.status().ToString();
    net_ = std::move(*net);
    net_->InitRandom(3, 0.2);  // Create leaves zeros: a zero model gets zero gradients below
    auto opt = train::AdamW::Create(net_->parameters(), {});
    ASSERT_TRUE(opt.ok()) << opt.status().ToString();
    opt_ = std::move(*opt);
    options_.model_dir = (dir_ / "base").string();
    options_.steps = 8;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // One AdamW update on a made-up loss.
  void Train() {
    at::Tensor loss = at::zeros({}, at::kFloat);
    for (const model::ParameterSet::Slot& slot : net_->parameters().slots()) loss = loss + (slot.leaf * slot.leaf).sum();
    loss.backward();
    ASSERT_TRUE(opt_->Step(1e-2).ok());
  }

  ActorProgress Progress(int64_t step) {
    ActorProgress p;
    p.step = step;
    p.optimizer_steps = step - 1;  // one step made no update
    p.version = step + 3;          // a restart moved the versions on
    p.accuracy_before = 0.25;
    p.reward_first = 0.5;
    p.reward_last = 0.75;
    p.cursors.resize(2);
    p.cursors[0].seed = 9;
    p.cursors[0].position = 17;
    p.cursors[1].seed = 10;
    p.cursors[1].position = 3;
    return p;
  }

  fs::path dir_;
  std::unique_ptr<model::Transformer> net_;
  std::unique_ptr<train::AdamW> opt_;
  ActorOptions options_;
};

TEST_F(ActorCheckpoint, RestoresModelOptimizerProgressAndCutsMetricsBack) {
  const fs::path metrics = dir_ / "metrics.jsonl";
  Train();
  Train();
  WriteFile(metrics, "{\"step\":0}\n{\"step\":1}\n{\"step\":2}\n");
  auto writer = checkpoint::CheckpointWriter::Open((dir_ / "ckpt").string(), {2, true});
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  const nlohmann::json fingerprint = ActorRunFingerprint(options_);
  auto saved = SaveActorCheckpoint(*writer, {net_.get(), opt_.get(), Progress(3), fingerprint, options_.model_dir,
                                             metrics.string()});
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_TRUE(fs::exists(fs::path(saved->path) / "model" / "tokenizer.json"));
  const at::Tensor want = net_->parameters().buffers()[0].clone();
  std::map<std::string, at::Tensor> want_opt;  // State() aliases the optimizer's
  for (const auto& [name, t] : opt_->State().tensors) want_opt[name] = t.clone();

  // The run goes on past the checkpoint, then is restored.
  Train();
  WriteFile(metrics, ReadFile(metrics) + "{\"step\":3}\n");
  ASSERT_FALSE(at::equal(net_->parameters().buffers()[0], want));
  auto restored = RestoreActorCheckpoint((dir_ / "ckpt").string(), fingerprint, *net_, *opt_, at::Device(at::kCPU),
                                         metrics.string());
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  ASSERT_TRUE(restored->has_value());
  const ActorProgress& p = (*restored)->progress;
  EXPECT_EQ(p.step, 3);
  EXPECT_EQ(p.optimizer_steps, 2);
  EXPECT_EQ(p.version, 6);
  EXPECT_EQ(p.accuracy_before, 0.25);
  EXPECT_EQ(p.reward_last, 0.75);
  EXPECT_EQ(p.cursors, Progress(3).cursors);
  EXPECT_TRUE(at::equal(net_->parameters().buffers()[0], want));
  EXPECT_EQ(opt_->steps(), 2);
  ASSERT_FALSE(want_opt.empty());
  for (const auto& [name, t] : want_opt) EXPECT_TRUE(at::equal(opt_->State().tensors.at(name), t)) << name;
  EXPECT_EQ(ReadFile(metrics), "{\"step\":0}\n{\"step\":1}\n{\"step\":2}\n");
}

// A sharded AdamW (ZeRO-1) holds a rank's share of the state: a checkpoint
// needs the whole state gathered for its step (GatherState, collective).
// Without it the save is refused naming that, and no checkpoint is
// committed; after it, rank 0 writes the whole state.
TEST_F(ActorCheckpoint, AShardedStateThatWasNotGatheredIsRefused) {
  train::testing::LoneRank group(0, 2);
  train::AdamWOptions o;
  o.shard = &group;
  auto sharded = train::AdamW::Create(net_->parameters(), o);
  ASSERT_TRUE(sharded.ok()) << sharded.status().ToString();
  opt_ = std::move(*sharded);
  Train();
  const fs::path metrics = dir_ / "metrics.jsonl";
  WriteFile(metrics, "{\"step\":0}\n");
  auto writer = checkpoint::CheckpointWriter::Open((dir_ / "ckpt").string(), {2, true});
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  const ActorCheckpointInput in{net_.get(), opt_.get(), Progress(2), ActorRunFingerprint(options_),
                                options_.model_dir, metrics.string()};
  auto refused = SaveActorCheckpoint(*writer, in);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("sharded state was not gathered"), std::string::npos)
      << refused.status().ToString();
  for (const fs::directory_entry& e : fs::directory_iterator(dir_ / "ckpt"))
    EXPECT_EQ(e.path().filename().string().find("step-"), std::string::npos) << e.path();

  ASSERT_TRUE(opt_->GatherState().ok());
  auto saved = SaveActorCheckpoint(*writer, in);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_TRUE(fs::exists(fs::path(saved->path) / "model"));
}

TEST_F(ActorCheckpoint, ACheckpointOfAnotherRunIsRefusedBeforeAnythingIsWritten) {
  const fs::path metrics = dir_ / "metrics.jsonl";
  WriteFile(metrics, "{\"step\":0}\n");
  Train();
  auto writer = checkpoint::CheckpointWriter::Open((dir_ / "ckpt").string(), {2, true});
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(SaveActorCheckpoint(*writer, {net_.get(), opt_.get(), Progress(1), ActorRunFingerprint(options_),
                                            options_.model_dir, metrics.string()})
                  .ok());
  Train();
  const at::Tensor now = net_->parameters().buffers()[0].clone();
  WriteFile(metrics, "{\"step\":0}\n{\"step\":1}\n{\"step\":2}\n");
  ActorOptions other = options_;
  other.group_size = 16;
  other.seed = 2;
  auto r = RestoreActorCheckpoint((dir_ / "ckpt").string(), ActorRunFingerprint(other), *net_, *opt_,
                                  at::Device(at::kCPU), metrics.string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("group_size 8 (this run: 16)"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("seed 0 (this run: 2)"), std::string::npos) << r.status().ToString();
  EXPECT_TRUE(at::equal(net_->parameters().buffers()[0], now));
  EXPECT_EQ(ReadFile(metrics), "{\"step\":0}\n{\"step\":1}\n{\"step\":2}\n");
}

TEST_F(ActorCheckpoint, NoCheckpointIsAFirstStart) {
  auto r = RestoreActorCheckpoint((dir_ / "none").string(), ActorRunFingerprint(options_), *net_, *opt_,
                                  at::Device(at::kCPU), (dir_ / "metrics.jsonl").string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->has_value());
}

TEST_F(ActorCheckpoint, HostileProgressIsRefusedNamingTheKey) {
  const nlohmann::json good = ActorProgressToJson(Progress(4));
  ASSERT_TRUE(ActorProgressFromJson(good).ok());
  struct Case {
    const char* key;
    nlohmann::json value;  // null: the key removed
  };
  for (const Case& c : {Case{"step", -1}, Case{"step", "4"}, Case{"optimizer_steps", nullptr}, Case{"version", 1.5},
                        Case{"accuracy_before", "NaN"}, Case{"reward_last", -0.5}, Case{"sampler_cursors", 7},
                        Case{"sampler_cursors", nullptr}, Case{"sampler_cursors", nlohmann::json::array()}}) {
    nlohmann::json bad = good;
    if (c.value.is_null()) {
      bad.erase(c.key);
    } else {
      bad[c.key] = c.value;
    }
    auto r = ActorProgressFromJson(bad);
    ASSERT_FALSE(r.ok()) << c.key << " " << c.value.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.key), std::string::npos) << r.status().ToString();
  }
  EXPECT_FALSE(ActorProgressFromJson(nlohmann::json::array()).ok());
}

}  // namespace
}  // namespace tandem::roles
