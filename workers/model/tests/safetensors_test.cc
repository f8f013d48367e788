// Safetensors I/O on real files in a temporary directory: the round trip of
// every dtype (0-d and empty tensors included), a file built by hand from the
// format (so compliance does not rest on our own writer), the writer's bytes
// against the official library's documented outputs, the data layout and
// alignment, sharded checkpoints and their index exactly as transformers
// writes it, and rewriting a checkpoint in another layout.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "workers/model/safetensors.h"
#include "workers/model/tests/safetensors_test_files.h"

namespace tandem::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::AsBytes;
using testing::HandBuiltFile;
using testing::RandomBytes;
using testing::ReadBytes;
using testing::TempDir;
using testing::U64Le;
using testing::WriteBytes;

struct OwnedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
  TensorToWrite ToWrite() const { return {name, dtype, shape, bytes.data(), bytes.size()}; }
};

OwnedTensor RandomTensor(std::string name, DType dtype, std::vector<int64_t> shape) {
  size_t n = DTypeSize(dtype);
  for (const int64_t d : shape) n *= static_cast<size_t>(d);
  return {std::move(name), dtype, std::move(shape), RandomBytes(n)};
}

std::vector<TensorToWrite> ToWrite(const std::vector<OwnedTensor>& ts) {
  std::vector<TensorToWrite> out;
  for (const auto& t : ts) out.push_back(t.ToWrite());
  return out;
}

void ExpectSame(const TensorView& v, const OwnedTensor& t) {
  EXPECT_EQ(v.name, t.name);
  EXPECT_EQ(v.dtype, t.dtype) << t.name;
  EXPECT_EQ(v.shape, t.shape) << t.name;
  ASSERT_EQ(v.nbytes, t.bytes.size()) << t.name;
  if (v.nbytes > 0) {
    EXPECT_EQ(std::memcmp(v.data, t.bytes.data(), v.nbytes), 0) << t.name;
  }
}

TEST(DType, NamesAndSizesAreTheFormats) {
  const std::map<std::string, size_t> expected = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                                  {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  std::map<std::string, size_t> got;
  for (const DType t : kAllDTypes) {
    got[std::string(DTypeName(t))] = DTypeSize(t);
    EXPECT_EQ(ParseDType(DTypeName(t)), t);
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(ParseDType("f32"), std::nullopt);
  EXPECT_EQ(ParseDType("U16"), std::nullopt);
  EXPECT_EQ(ParseDType("F8_E4M3"), std::nullopt);
}

TEST(Safetensors, RoundTripsEveryDTypeAndShape) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {3}, {2, 3}, {4, 0, 5}, {1, 2, 3, 2}};
  std::vector<OwnedTensor> ts;
  for (const DType t : kAllDTypes)
    for (size_t s = 0; s < shapes.size(); ++s)
      ts.push_back(RandomTensor("layer." + std::string(DTypeName(t)) + "." + std::to_string(s), t, shapes[s]));
  TempDir dir;
  const std::string path = dir.File("all.safetensors");
  const auto w = ToWrite(ts);
  ASSERT_TRUE(WriteSafetensors(path, w, {{"format", "pt"}, {"note", "é ünïcode"}}).ok());

  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->names().size(), ts.size());
  EXPECT_EQ(f->metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "é ünïcode"}}));
  for (const auto& t : ts) {
    auto v = f->Get(t.name);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    ExpectSame(*v, t);
    EXPECT_EQ(v->file, path);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % DTypeSize(t.dtype), 0u) << t.name << " is misaligned";
  }
  // A copy shares the mapping, and a moved-from file's views stay valid.
  SafetensorsFile copy = *f;
  const TensorView before = *copy.Get("layer.F32.3");
  SafetensorsFile moved = std::move(copy);
  EXPECT_EQ(moved.Get("layer.F32.3")->data, before.data);
}

TEST(Safetensors, ReadsAFileBuiltByHandFromTheFormat) {
  // Tensors deliberately not in header order, header not padded (other
  // writers need not pad), so I64 data is not 8-aligned in the file.
  const std::string header =
      R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},"__metadata__":{"format":"pt"},)"
      R"("a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"z":{"dtype":"BOOL","shape":[],"data_offsets":[12,13]},)"
      R"("e":{"dtype":"F32","shape":[0,7],"data_offsets":[13,13]}})";
  const std::string data = std::string("\xFE\xFF\xFF\xFF\xFF\xFF\xFF\xFF", 8)  // a: int64 -2
                           + std::string("\x80\x3F\x00\xC0", 4)                // b: bf16 1.0, -2.0
                           + std::string("\x01", 1);                           // z: true
  TempDir dir;
  const std::string path = dir.File("hand.safetensors");
  WriteBytes(path, HandBuiltFile(header, data));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_THAT(f->names(), ElementsAre("a", "b", "z", "e"));  // data order
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->header().data_offset, 8 + header.size());

  auto a = f->Get("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->dtype, DType::kI64);
  EXPECT_EQ(a->shape, std::vector<int64_t>{1});
  int64_t av;
  std::memcpy(&av, a->data, 8);
  EXPECT_EQ(av, -2);

  auto b = f->Get("b");
  ASSERT_TRUE(b.ok());
  uint16_t bv[2];
  std::memcpy(bv, b->data, 4);
  EXPECT_EQ(bv[0], 0x3F80);
  EXPECT_EQ(bv[1], 0xC000);

  auto z = f->Get("z");
  ASSERT_TRUE(z.ok());
  EXPECT_TRUE(z->shape.empty());
  EXPECT_EQ(z->numel(), 1);
  EXPECT_EQ(z->nbytes, 1u);
  EXPECT_EQ(static_cast<int>(z->data[0]), 1);

  auto e = f->Get("e");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->numel(), 0);
  EXPECT_EQ(e->nbytes, 0u);
}

// The official library's documented outputs (its tensor.rs tests): the same
// inputs must give the same bytes.
TEST(Safetensors, WriterBytesEqualTheOfficialWriters) {
  std::vector<float> six = {0, 1, 2, 3, 4, 5};
  std::string six_bytes(reinterpret_cast<const char*>(six.data()), 24);
  std::vector<size_t> order;

  const TensorToWrite attn{"attn.0", DType::kF32, {1, 2, 3}, six.data(), 24};
  auto h = SafetensorsHeaderBytes(std::span(&attn, 1), {}, &order);
  ASSERT_TRUE(h.ok());
  const std::string attn_header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(attn_header.size(), 64u);
  EXPECT_EQ(*h, U64Le(64) + attn_header);

  TempDir dir;
  ASSERT_TRUE(WriteSafetensors(dir.File("a.safetensors"), std::span(&attn, 1), {}).ok());
  EXPECT_EQ(ReadBytes(dir.File("a.safetensors")), U64Le(64) + attn_header + six_bytes);

  const TensorToWrite attn0{"attn0", DType::kF32, {1, 1, 2, 3}, six.data(), 24};
  h = SafetensorsHeaderBytes(std::span(&attn0, 1), {}, &order);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, U64Le(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" + "       ");

  h = SafetensorsHeaderBytes({}, {}, &order);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, U64Le(8) + "{}      ");

  h = SafetensorsHeaderBytes({}, {{"framework", "pt"}}, &order);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, U64Le(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST(Safetensors, LaysOutWidestDTypeFirstThenByName) {
  std::vector<OwnedTensor> ts = {
      RandomTensor("a", DType::kBool, {3}), RandomTensor("b", DType::kBF16, {3}), RandomTensor("c", DType::kF16, {1}),
      RandomTensor("d", DType::kI32, {1}),  RandomTensor("e", DType::kF64, {1}),  RandomTensor("m", DType::kF32, {1}),
      RandomTensor("z", DType::kI64, {1}),  RandomTensor("y", DType::kI64, {2}),  RandomTensor("g", DType::kU8, {5}),
      RandomTensor("h", DType::kI8, {1}),   RandomTensor("i", DType::kI16, {1}),
  };
  TempDir dir;
  const auto w = ToWrite(ts);
  ASSERT_TRUE(WriteSafetensors(dir.File("x.safetensors"), w, {}).ok());
  auto f = SafetensorsFile::Open(dir.File("x.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_THAT(f->names(), ElementsAre("y", "z", "e", "m", "d", "b", "c", "i", "h", "g", "a"));
  EXPECT_EQ(f->header().data_offset % 8, 0u);
  for (const auto& t : ts) ExpectSame(*f->Get(t.name), t);
}

std::vector<OwnedTensor> ShardedTensors() {
  std::vector<OwnedTensor> ts;
  ts.push_back(RandomTensor("model.layers.0.mlp.down_proj.weight", DType::kF32, {10}));
  ts.push_back(RandomTensor("model.layers.0.mlp.up_proj.weight", DType::kF32, {10}));
  ts.push_back(RandomTensor("model.embed_tokens.weight", DType::kBF16, {100}));  // 200 bytes: alone
  ts.push_back(RandomTensor("model.layers.1.mlp.down_proj.weight", DType::kF32, {10}));
  ts.push_back(RandomTensor("model.layers.1.mlp.up_proj.weight", DType::kI64, {5}));
  ts.push_back(RandomTensor("model.norm.weight", DType::kF16, {20}));
  ts.push_back(RandomTensor("lm_head.bias", DType::kF32, {0}));
  return ts;
}

TEST(SafetensorsCheckpoint, ShardsAsHuggingFaceAndReadsBack) {
  const auto ts = ShardedTensors();
  TempDir dir;
  const auto w = ToWrite(ts);
  WriteOptions opt;
  opt.max_shard_bytes = 100;
  const Status st = WriteSafetensorsCheckpoint(dir.path(), w, opt);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_THAT(dir.List(), ElementsAre("model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                      "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
                                      "model.safetensors.index.json"));
  // huggingface_hub: the 200-byte tensor gets shard 1 at once; the others
  // fill shards greedily in the given order.
  const std::string expected_index = R"({
  "metadata": {
    "total_size": 400
  },
  "weight_map": {
    "lm_head.bias": "model-00004-of-00004.safetensors",
    "model.embed_tokens.weight": "model-00001-of-00004.safetensors",
    "model.layers.0.mlp.down_proj.weight": "model-00002-of-00004.safetensors",
    "model.layers.0.mlp.up_proj.weight": "model-00002-of-00004.safetensors",
    "model.layers.1.mlp.down_proj.weight": "model-00003-of-00004.safetensors",
    "model.layers.1.mlp.up_proj.weight": "model-00003-of-00004.safetensors",
    "model.norm.weight": "model-00004-of-00004.safetensors"
  }
}
)";
  EXPECT_EQ(ReadBytes(dir.File("model.safetensors.index.json")), expected_index);

  auto ck = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_TRUE(ck->sharded());
  EXPECT_EQ(ck->files().size(), 4u);
  EXPECT_EQ(ck->names().size(), ts.size());
  for (const auto& t : ts) {
    auto v = ck->Get(t.name);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    ExpectSame(*v, t);
  }
  EXPECT_EQ(ck->Get("model.embed_tokens.weight")->file, dir.path() + "/model-00001-of-00004.safetensors");
  for (const auto& f : ck->files()) EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(ck->Get("nope").status().code(), StatusCode::kNotFound);
}

TEST(SafetensorsCheckpoint, RewritingSwitchesLayoutAndRemovesStaleFiles) {
  const auto ts = ShardedTensors();
  const auto w = ToWrite(ts);
  TempDir dir;
  WriteBytes(dir.File("config.json"), "{}");
  WriteOptions sharded;
  sharded.max_shard_bytes = 100;
  ASSERT_TRUE(WriteSafetensorsCheckpoint(dir.path(), w, sharded).ok());

  WriteOptions single;
  single.metadata = {{"format", "pt"}, {"step", "7"}};
  ASSERT_TRUE(WriteSafetensorsCheckpoint(dir.path(), w, single).ok());
  EXPECT_THAT(dir.List(), ElementsAre("config.json", "model.safetensors"));
  auto ck = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_FALSE(ck->sharded());
  EXPECT_EQ(ck->files()[0].metadata().at("step"), "7");
  for (const auto& t : ts) ExpectSame(*ck->Get(t.name), t);

  sharded.max_shard_bytes = 300;  // two shards now
  ASSERT_TRUE(WriteSafetensorsCheckpoint(dir.path(), w, sharded).ok());
  EXPECT_THAT(dir.List(), ElementsAre("config.json", "model-00001-of-00002.safetensors",
                                      "model-00002-of-00002.safetensors", "model.safetensors.index.json"));
  ck = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  for (const auto& t : ts) ExpectSame(*ck->Get(t.name), t);
}

// The states a crash can leave while a checkpoint is rewritten in another
// layout (the writer's order: see safetensors_writer.h) read as the old
// checkpoint, the new one, or an error.
TEST(SafetensorsCheckpoint, StatesOfAnInterruptedRewriteReadAsOldNewOrError) {
  auto ts = ShardedTensors();
  const auto w = ToWrite(ts);
  TempDir old_single, new_sharded;
  ASSERT_TRUE(WriteSafetensorsCheckpoint(old_single.path(), w, {}).ok());
  WriteOptions sharded;
  sharded.max_shard_bytes = 100;
  ASSERT_TRUE(WriteSafetensorsCheckpoint(new_sharded.path(), w, sharded).ok());

  // single -> sharded, crashed after the new index, before model.safetensors went: the old one.
  TempDir dir;
  for (const auto& name : new_sharded.List()) WriteBytes(dir.File(name), ReadBytes(new_sharded.File(name)));
  WriteBytes(dir.File("model.safetensors"), ReadBytes(old_single.File("model.safetensors")));
  auto ck = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_FALSE(ck->sharded());

  // sharded -> sharded, crashed after the old index went, before the new one: an error.
  ::unlink(dir.File("model.safetensors").c_str());
  ::unlink(dir.File("model.safetensors.index.json").c_str());
  EXPECT_EQ(SafetensorsCheckpoint::Open(dir.path()).status().code(), StatusCode::kNotFound);

  // A write refused for bad input leaves the old checkpoint as it was.
  const std::string before = ReadBytes(old_single.File("model.safetensors"));
  std::vector<TensorToWrite> bad = w;
  bad.back().nbytes += 1;
  EXPECT_FALSE(WriteSafetensorsCheckpoint(old_single.path(), bad, sharded).ok());
  EXPECT_THAT(old_single.List(), ElementsAre("model.safetensors"));
  EXPECT_EQ(ReadBytes(old_single.File("model.safetensors")), before);
}

TEST(SafetensorsCheckpoint, CreatesTheDirectoryAndPrefersTheSingleFile) {
  const auto ts = ShardedTensors();
  const auto w = ToWrite(ts);
  TempDir dir;
  const std::string sub = dir.File("new");
  ASSERT_TRUE(WriteSafetensorsCheckpoint(sub, w, {}).ok());
  // A stray index beside model.safetensors does not matter (transformers' rule).
  WriteBytes(sub + "/model.safetensors.index.json", "not json");
  auto ck = SafetensorsCheckpoint::Open(sub);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_FALSE(ck->sharded());
  EXPECT_EQ(ck->names().size(), ts.size());
}

// A Qwen3-30B-A3B-sized header (48 layers x (128 experts x 3 projections +
// the router): 18,480 tensors, 2 MB of JSON) parses in linear time: nlohmann's parser
// callback, once used for duplicate keys, took 30 s for this at -O2.
TEST(Safetensors, ManyTensorsParseInLinearTime) {
  std::vector<std::string> names;
  for (int l = 0; l < 48; ++l) {
    for (int e = 0; e < 128; ++e)
      for (const char* p : {"gate_proj", "up_proj", "down_proj"})
        names.push_back("model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + "." + p +
                        ".weight");
    names.push_back("model.layers." + std::to_string(l) + ".mlp.gate.weight");
  }
  const auto data = RandomBytes(names.size() * 4);
  std::vector<TensorToWrite> ts;
  for (size_t i = 0; i < names.size(); ++i) ts.push_back({names[i], DType::kBF16, {2}, data.data() + 4 * i, 4});
  TempDir dir;
  ASSERT_TRUE(WriteSafetensorsCheckpoint(dir.path(), ts, {}).ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto ck = SafetensorsCheckpoint::Open(dir.path());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ck->names().size(), names.size());
  auto v = ck->Get("model.layers.47.mlp.experts.127.down_proj.weight");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(std::memcmp(v->data, data.data() + 4 * (names.size() - 2), 4), 0);
  EXPECT_LT(seconds, 60) << "a quadratic parser takes minutes here";
  std::printf("[safetensors] open of %zu tensors: %.2f s\n", names.size(), seconds);
}

TEST(SafetensorsIndex, EscapesNonAsciiAsPythonsJsonDumps) {
  EXPECT_EQ(SafetensorsIndexJson({{"é\x7f\"", "model-00001-of-00001.safetensors"}}, 3),
            "{\n  \"metadata\": {\n    \"total_size\": 3\n  },\n  \"weight_map\": {\n"
            "    \"\\u00e9\\u007f\\\"\": \"model-00001-of-00001.safetensors\"\n  }\n}\n");
  EXPECT_EQ(SafetensorsShardFileName(0, 3), "model-00001-of-00003.safetensors");
  EXPECT_EQ(SafetensorsShardFileName(99999, 123456), "model-100000-of-123456.safetensors");
}

}  // namespace
}  // namespace tandem::model
