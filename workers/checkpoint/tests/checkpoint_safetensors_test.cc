// The model's safetensors writer (workers/model/safetensors_writer.h, the
// files model::SavePretrained writes, torch-free) writing a sharded model
// directory into a checkpoint through AddDirectory, and the model's reader
// opening it from the committed checkpoint: the store and the model's file
// format fit together, and damage to a shard is caught by the store first.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "workers/checkpoint/checkpoint_reader.h"
#include "workers/checkpoint/checkpoint_writer.h"
#include "workers/checkpoint/tests/checkpoint_test_util.h"
#include "workers/model/safetensors_checkpoint.h"
#include "workers/model/safetensors_writer.h"

namespace tandem::checkpoint {
namespace {

using testing::ReadAll;
using testing::ScratchDir;
using testing::WriteAllTo;

TEST(CheckpointSafetensors, ShardedModelDirectoryRoundTrip) {
  ScratchDir root;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-1, 1);
  // Six 32x64 f32 matrices (8 KiB each), in shards of at most 20 KiB.
  std::vector<std::vector<float>> data(6, std::vector<float>(32 * 64));
  std::vector<model::TensorToWrite> tensors;
  for (size_t i = 0; i < data.size(); ++i) {
    for (float& x : data[i]) x = u(rng);
    tensors.push_back({"model.layers." + std::to_string(i) + ".mlp.weight", model::DType::kF32, {32, 64},
                       data[i].data(), data[i].size() * sizeof(float)});
  }
  auto w = CheckpointWriter::Open(root.path());
  ASSERT_TRUE(w.ok());
  auto p = w->Begin(3, 3);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->AddDirectory("model", [&](const std::string& dir) {
                  WriteAllTo(dir + "/config.json", R"({"model_type": "qwen3"})");
                  return model::WriteSafetensorsCheckpoint(dir, tensors, {.max_shard_bytes = 20u << 10});
                }).ok());
  ASSERT_TRUE(p->AddFile("optimizer/adamw.bin", std::string(1000, 'o')).ok());
  auto c = p->Commit({{"data_cursor", 12}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();

  auto latest = FindLatestCheckpoint(root.path(), Verify::kDigests);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  size_t shards = 0;
  bool index = false;
  for (const auto& f : latest->manifest.files) {
    shards += f.path.ends_with(".safetensors");
    index = index || f.path == "model/model.safetensors.index.json";
  }
  EXPECT_EQ(shards, 3u);
  EXPECT_TRUE(index);
  auto st = model::SafetensorsCheckpoint::Open(latest->path + "/model");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_TRUE(st->sharded());
  for (size_t i = 0; i < data.size(); ++i) {
    auto t = st->Get(tensors[i].name);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_EQ(t->nbytes, tensors[i].nbytes);
    EXPECT_EQ(std::memcmp(t->data, data[i].data(), t->nbytes), 0) << tensors[i].name;
  }

  // A flipped byte in a shard: the store refuses the checkpoint before any loader sees it.
  const std::string shard = latest->path + "/model/model-00002-of-00003.safetensors";
  std::string bytes = ReadAll(shard);
  ASSERT_FALSE(bytes.empty());
  bytes[bytes.size() - 5] ^= 0x40;
  WriteAllTo(shard, bytes);
  auto again = FindLatestCheckpoint(root.path(), Verify::kDigests);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("digest mismatch of file \"model/model-00002-of-00003.safetensors\""),
            std::string::npos)
      << again.status().message();
}

}  // namespace
}  // namespace tandem::checkpoint
