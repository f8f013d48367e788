// Checkpoint glue (workers/model/checkpoint.h): save -> load is bit-exact
// (single file and sharded, dense and MoE, tied and untied) and gives the
// same forward; saving in bf16 rounds once; a missing, misshapen, extra or
// integer tensor and a bad or missing config.json are errors naming the
// file and the tensor or key.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "workers/model/checkpoint.h"
#include "workers/model/tests/model_test_util.h"

namespace tandem::model::testing {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("model_checkpoint_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `tensors` (name -> CPU tensor) as a checkpoint and `config` as config.json.
  void WriteRaw(const std::vector<std::pair<std::string, at::Tensor>>& tensors, const nlohmann::json& config) {
    std::vector<at::Tensor> keep;
    std::vector<TensorToWrite> w;
    for (const auto& [name, t] : tensors) {
      keep.push_back(t.contiguous());
      const DType d = t.scalar_type() == at::kFloat ? DType::kF32 : t.scalar_type() == at::kInt ? DType::kI32 : DType::kBF16;
      w.push_back({name, d, keep.back().sizes().vec(), keep.back().data_ptr(), static_cast<size_t>(keep.back().nbytes())});
    }
    ASSERT_TRUE(WriteSafetensorsCheckpoint(dir_.string(), w, {}).ok());
    std::ofstream(dir_ / "config.json") << config.dump();
  }

  // The parameters of `m` as (name, contiguous CPU fp32 copy).
  static std::vector<std::pair<std::string, at::Tensor>> Tensors(const Transformer& m) {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& n : m.parameters().named()) out.emplace_back(n.name, n.view.contiguous().clone());
    return out;
  }

  fs::path dir_;
};

TEST_F(CheckpointTest, SaveLoadRoundTripIsBitExact) {
  struct Case {
    bool moe, tied;
    uint64_t shard;
  };
  for (const Case k : {Case{true, false, 64 << 10}, Case{false, true, 5ull << 30}, Case{true, true, 5ull << 30}}) {
    SCOPED_TRACE(std::string(k.moe ? "moe" : "dense") + (k.tied ? " tied" : "") + " shard " + std::to_string(k.shard));
    const ModelConfig c = TinyConfig(k.moe, 3, k.tied);
    auto model = MakeModel(c);
    ASSERT_TRUE(model);
    RandomizeParameters(*model, kernels::testing::FreshSeed());
    SaveOptions opts;
    opts.max_shard_bytes = k.shard;
    const Status saved = SavePretrained(*model, dir_.string(), opts);
    ASSERT_TRUE(saved.ok()) << saved.ToString();
    EXPECT_EQ(fs::exists(dir_ / "model.safetensors.index.json"), k.shard < (1u << 20));
    auto loaded = LoadPretrained(dir_.string(), at::Device(at::kCPU), at::kFloat);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(ToHfJson((*loaded)->config()), ToHfJson(c));
    for (const auto& n : model->parameters().named()) {
      const at::Tensor* back = (*loaded)->parameters().Find(n.name);
      ASSERT_NE(back, nullptr) << n.name;
      EXPECT_TRUE(back->equal(n.view)) << n.name;
    }
    auto batch = BuildForestBatch({{1, 2, 3, 4}, {1, 2, 7}}, {}, c.vocab_size, at::Device(at::kCPU));
    ASSERT_TRUE(batch.ok());
    at::NoGradGuard no_grad;
    EXPECT_TRUE(model->Forward(*batch).logprob.equal((*loaded)->Forward(*batch).logprob));
    auto ckpt = SafetensorsCheckpoint::Open(dir_.string());
    ASSERT_TRUE(ckpt.ok());
    EXPECT_EQ(ckpt->names().size(), model->parameters().size());
    EXPECT_EQ(ckpt->Contains("lm_head.weight"), !k.tied);
    fs::remove_all(dir_);
  }
}

TEST_F(CheckpointTest, SavingInBf16RoundsOnceAndLoadsAsFloat) {
  const ModelConfig c = TinyConfig(true, 2);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  model->InitRandom(3);
  SaveOptions opts;
  opts.dtype = ConfigDtype::kBFloat16;
  ASSERT_TRUE(SavePretrained(*model, dir_.string(), opts).ok());
  auto cfg = LoadModelConfig((dir_ / "config.json").string());
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->dtype, ConfigDtype::kBFloat16);
  auto ckpt = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ(ckpt->Get("model.norm.weight")->dtype, DType::kBF16);
  auto loaded = LoadPretrained(dir_.string(), at::Device(at::kCPU), at::kFloat);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  for (const auto& n : model->parameters().named())
    EXPECT_TRUE((*loaded)->parameters().Find(n.name)->equal(n.view.to(at::kBFloat16).to(at::kFloat))) << n.name;
}

TEST_F(CheckpointTest, BadCheckpointsAreNamedErrors) {
  const ModelConfig c = TinyConfig(true, 2);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  model->InitRandom(5);
  const nlohmann::json cj = ToHfJson(c);
  auto load = [&] { return LoadPretrained(dir_.string(), at::Device(at::kCPU), at::kFloat).status(); };
  auto has = [](const Status& s, const std::string& part) { return s.ToString().find(part) != std::string::npos; };

  auto tensors = Tensors(*model);
  const std::string gone = "model.layers.1.mlp.experts.5.down_proj.weight";
  std::erase_if(tensors, [&](const auto& p) { return p.first == gone; });
  WriteRaw(tensors, cj);
  Status s = load();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(has(s, dir_.string()) && has(s, "missing tensor \"" + gone + "\"") && has(s, "[64, 32]")) << s.ToString();

  tensors = Tensors(*model);
  for (auto& [name, t] : tensors)
    if (name == "model.layers.0.self_attn.k_proj.weight") t = at::zeros({64, 32});
  WriteRaw(tensors, cj);
  s = load();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(has(s, "model.safetensors: tensor \"model.layers.0.self_attn.k_proj.weight\": shape [64, 32], expected [32, 64]"))
      << s.ToString();

  tensors = Tensors(*model);
  tensors.emplace_back("model.layers.0.mlp.experts.gate_up_proj", at::zeros({2, 2}));
  WriteRaw(tensors, cj);
  s = load();
  EXPECT_TRUE(has(s, "unexpected tensor \"model.layers.0.mlp.experts.gate_up_proj\"") && has(s, "model.safetensors"))
      << s.ToString();

  tensors = Tensors(*model);
  for (auto& [name, t] : tensors)
    if (name == "model.norm.weight") t = at::zeros({64}, at::TensorOptions().dtype(at::kInt));
  WriteRaw(tensors, cj);
  s = load();
  EXPECT_TRUE(has(s, "\"model.norm.weight\": dtype I32, expected a float type")) << s.ToString();

  nlohmann::json yarn = cj;
  yarn["rope_parameters"]["rope_type"] = "yarn";
  WriteRaw(Tensors(*model), yarn);
  s = load();
  EXPECT_TRUE(has(s, (dir_ / "config.json").string()) && has(s, "rope_parameters.rope_type")) << s.ToString();

  fs::remove(dir_ / "config.json");
  s = load();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(has(s, "config.json")) << s.ToString();

  std::ofstream(dir_ / "config.json") << cj.dump();
  fs::remove(dir_ / "model.safetensors");
  s = load();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(has(s, dir_.string())) << s.ToString();
}

}  // namespace
}  // namespace tandem::model::testing
