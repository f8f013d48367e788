// Every refusal of the safetensors reader and writer, on real files: each
// is a Status whose message names the file and the tensor or header field
// and says what was wrong; nothing crashes. Files are built by hand.
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "workers/model/safetensors.h"
#include "workers/model/tests/safetensors_test_files.h"

namespace tandem::model {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::AsBytes;
using testing::HandBuiltFile;
using testing::RandomBytes;
using testing::ReadBytes;
using testing::TempDir;
using testing::U64Le;
using testing::WriteBytes;

// Opens `bytes` written to a file; returns the error (the test fails when it opens).
Status OpenError(const TempDir& dir, const std::string& bytes, const std::string& name = "bad.safetensors") {
  const std::string path = dir.File(name);
  WriteBytes(path, bytes);
  auto f = SafetensorsFile::Open(path);
  EXPECT_FALSE(f.ok()) << "opened: " << name;
  if (f.ok()) return Status::Ok();
  EXPECT_THAT(f.status().message(), HasSubstr(path));
  return f.status();
}

std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

TEST(SafetensorsErrors, TruncatedFiles) {
  TempDir dir;
  Status st = OpenError(dir, "");
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_THAT(st.message(), HasSubstr("shorter than the 8-byte header size"));
  st = OpenError(dir, std::string("\x10\0\0", 3), "short.safetensors");
  EXPECT_THAT(st.message(), HasSubstr("file is 3 bytes"));

  st = OpenError(dir, U64Le(1000) + "{}");
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_THAT(st.message(), HasSubstr("header size 1000 runs past the end of the file (10 bytes)"));

  st = OpenError(dir, U64Le(100'000'001) + "{}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("larger than the limit 100000000"));
  st = OpenError(dir, U64Le(~uint64_t{0}) + "{}");
  EXPECT_THAT(st.message(), HasSubstr("larger than the limit"));

  // The data cut short: the last tensor runs past the end.
  st = OpenError(dir, HandBuiltFile("{" + Entry("w", "F32", "[4]", "[0,16]") + "}", std::string(10, 'x')));
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("tensor \"w\""), HasSubstr("run past the end of the data (10 bytes")));
}

TEST(SafetensorsErrors, EveryTruncationOfAValidFileIsRefused) {
  const auto a = RandomBytes(24), b = RandomBytes(6);
  const std::vector<TensorToWrite> ts = {{"a", DType::kF64, {3}, a.data(), 24}, {"b", DType::kU8, {2, 3}, b.data(), 6}};
  TempDir dir;
  ASSERT_TRUE(WriteSafetensors(dir.File("ok.safetensors"), ts, {{"format", "pt"}}).ok());
  const std::string bytes = ReadBytes(dir.File("ok.safetensors"));
  ASSERT_TRUE(ParseSafetensorsHeader(AsBytes(bytes), "ok").ok());
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(ParseSafetensorsHeader(AsBytes(std::string_view(bytes).substr(0, n)), "cut").ok()) << n;
  EXPECT_FALSE(ParseSafetensorsHeader(AsBytes(bytes + "x"), "long").ok());
}

TEST(SafetensorsErrors, BadHeaderJson) {
  TempDir dir;
  Status st = OpenError(dir, HandBuiltFile("{\"a\": ", ""));
  EXPECT_THAT(st.message(), HasSubstr("header is not valid JSON"));
  st = OpenError(dir, HandBuiltFile("[1, 2]", ""));
  EXPECT_THAT(st.message(), HasSubstr("header is JSON array, expected an object"));
  st = OpenError(dir, HandBuiltFile(std::string(100, '[') + std::string(100, ']'), ""));
  EXPECT_THAT(st.message(), HasSubstr("nested deeper than 64 levels"));
  st = OpenError(dir, HandBuiltFile("{\"__metadata__\":{\"k\":\"\xff\"}}", ""));
  EXPECT_THAT(st.message(), HasSubstr("not valid JSON"));  // not UTF-8
  st = OpenError(dir, HandBuiltFile("\xEF\xBB\xBF{}", ""));
  EXPECT_THAT(st.message(), HasSubstr("byte-order mark"));
  // NUL padding is not JSON whitespace (and nlohmann would stop reading at it).
  st = OpenError(dir, HandBuiltFile(std::string_view("{}\0\0", 4), ""));
  EXPECT_THAT(st.message(), HasSubstr("header holds a NUL byte at offset 2"));
  st = OpenError(dir, HandBuiltFile(std::string_view("{}\0{\"x\":", 8), ""));
  EXPECT_THAT(st.message(), HasSubstr("NUL byte"));
  st = OpenError(dir, HandBuiltFile("{\"__metadata__\":{\"step\":7}}", ""));
  EXPECT_THAT(st.message(), HasSubstr("__metadata__.step is number, expected a string"));
  st = OpenError(dir, HandBuiltFile("{\"__metadata__\":[]}", ""));
  EXPECT_THAT(st.message(), HasSubstr("__metadata__ is array, expected an object"));
  // The official parser allows a null __metadata__.
  WriteBytes(dir.File("null.safetensors"), HandBuiltFile("{\"__metadata__\":null}  ", ""));
  EXPECT_TRUE(SafetensorsFile::Open(dir.File("null.safetensors")).ok());
}

TEST(SafetensorsErrors, BadTensorEntries) {
  TempDir dir;
  auto one = [&](const std::string& entry, size_t data_bytes) {
    return OpenError(dir, HandBuiltFile("{" + entry + "}", std::string(data_bytes, '\0')));
  };
  Status st = one(Entry("w", "F8_E4M3", "[2]", "[0,2]"), 2);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("tensor \"w\": unsupported dtype \"F8_E4M3\""), HasSubstr("BF16")));
  st = one(Entry("w", "F32", "[2,2]", "[0,12]"), 12);
  EXPECT_THAT(st.message(),
              HasSubstr("tensor \"w\": data_offsets [0,12] span 12 bytes, but F32 [2,2] is 16 bytes"));
  st = one(Entry("w", "F32", "[2,-1]", "[0,0]"), 0);
  EXPECT_THAT(st.message(), HasSubstr("tensor \"w\": shape[1] is -1, expected a non-negative integer"));
  st = one(Entry("w", "F32", "[2.0]", "[0,8]"), 8);
  EXPECT_THAT(st.message(), HasSubstr("shape[0] is 2.0"));
  st = one(Entry("w", "F32", "{}", "[0,8]"), 8);
  EXPECT_THAT(st.message(), HasSubstr("shape is object, expected an array"));
  st = one(Entry("w", "F32", "[4611686018427387904,4611686018427387904]", "[0,0]"), 0);
  EXPECT_THAT(st.message(), HasSubstr("more than 2^63 elements"));
  st = one(Entry("w", "F32", "[18446744073709551616]", "[0,0]"), 0);  // past u64: parsed as a float
  EXPECT_THAT(st.message(), HasSubstr("expected a non-negative integer"));
  st = one(Entry("w", "U8", "[4]", "[4,0]"), 4);
  EXPECT_THAT(st.message(), HasSubstr("data_offsets [4,0] end before they begin"));
  st = one(Entry("w", "U8", "[4]", "[0,4,8]"), 4);
  EXPECT_THAT(st.message(), HasSubstr("expected [begin, end]"));
  st = one(Entry("w", "U8", "[4]", "[0,-4]"), 4);
  EXPECT_THAT(st.message(), HasSubstr("are not non-negative integers"));
  st = one("\"w\":{\"dtype\":\"U8\",\"shape\":[1]}", 1);
  EXPECT_THAT(st.message(), HasSubstr("tensor \"w\": missing data_offsets"));
  st = one("\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":1}", 1);
  EXPECT_THAT(st.message(), HasSubstr("tensor \"w\": unknown key \"extra\""));
  st = one("\"w\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}", 1);
  EXPECT_THAT(st.message(), HasSubstr("tensor \"w\": dtype is number, expected a string"));
  st = one("\"w\":[1]", 1);
  EXPECT_THAT(st.message(), HasSubstr("tensor \"w\": expected an object"));
  st = one(Entry("", "U8", "[1]", "[0,1]"), 1);
  EXPECT_THAT(st.message(), HasSubstr("empty name"));
}

TEST(SafetensorsErrors, DuplicateKeys) {
  TempDir dir;
  Status st = OpenError(dir, HandBuiltFile("{" + Entry("w", "U8", "[1]", "[0,1]") + "," +
                                               Entry("w", "U8", "[1]", "[1,2]") + "}",
                                           "ab"));
  EXPECT_THAT(st.message(), HasSubstr("key \"w\" appears twice in the header"));
  st = OpenError(dir, HandBuiltFile("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "a"));
  EXPECT_THAT(st.message(), HasSubstr("key \"dtype\" appears twice in the entry of \"w\""));
}

TEST(SafetensorsErrors, OverlapHoleAndTrailingBytes) {
  TempDir dir;
  Status st = OpenError(dir, HandBuiltFile("{" + Entry("a", "F32", "[2]", "[0,8]") + "," +
                                               Entry("b", "F32", "[2]", "[4,12]") + "}",
                                           std::string(12, '\0')));
  EXPECT_THAT(st.message(), HasSubstr("tensor \"b\": data_offsets [4, 12] overlap tensor \"a\", which ends at 8"));
  st = OpenError(dir, HandBuiltFile("{" + Entry("a", "F32", "[1]", "[0,4]") + "," +
                                        Entry("b", "F32", "[1]", "[8,12]") + "}",
                                    std::string(12, '\0')));
  EXPECT_THAT(st.message(), HasSubstr("tensor \"b\": data_offsets [8, 12] leave a hole: data bytes [4, 8)"));
  st = OpenError(dir, HandBuiltFile("{" + Entry("a", "F32", "[1]", "[4,8]") + "}", std::string(8, '\0')));
  EXPECT_THAT(st.message(), HasSubstr("leave a hole: data bytes [0, 4)"));
  st = OpenError(dir, HandBuiltFile("{" + Entry("a", "F32", "[1]", "[0,4]") + "}", std::string(6, '\0')));
  EXPECT_THAT(st.message(), HasSubstr("data bytes [4, 6) after the last tensor belong to no tensor"));
  st = OpenError(dir, HandBuiltFile("{" + Entry("a", "F32", "[1]", "[0,4]") + "," +
                                        Entry("b", "U8", "[4]", "[0,4]") + "}",
                                    std::string(4, '\0')));
  EXPECT_THAT(st.message(), HasSubstr("overlap tensor"));
}

TEST(SafetensorsErrors, MissingFilesAndTensors) {
  TempDir dir;
  auto f = SafetensorsFile::Open(dir.File("absent.safetensors"));
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(f.status().message(), HasSubstr(dir.File("absent.safetensors")));
  f = SafetensorsFile::Open(dir.path());
  EXPECT_THAT(f.status().message(), HasSubstr("not a regular file"));

  WriteBytes(dir.File("ok.safetensors"), HandBuiltFile("{" + Entry("a", "U8", "[1]", "[0,1]") + "}", "z"));
  f = SafetensorsFile::Open(dir.File("ok.safetensors"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->Get("b").status().code(), StatusCode::kNotFound);
  EXPECT_THAT(f->Get("b").status().message(), HasSubstr(dir.File("ok.safetensors") + ": no tensor \"b\""));
}

// A sharded checkpoint of two U8 tensors "a" (shard 1) and "b" (shard 2); `index` replaces the index.
void WriteSharded(const TempDir& dir, const std::string& index) {
  WriteBytes(dir.File("model-00001-of-00002.safetensors"), HandBuiltFile("{" + Entry("a", "U8", "[1]", "[0,1]") + "}", "1"));
  WriteBytes(dir.File("model-00002-of-00002.safetensors"), HandBuiltFile("{" + Entry("b", "U8", "[1]", "[0,1]") + "}", "2"));
  WriteBytes(dir.File("model.safetensors.index.json"), index);
}

Status CheckpointError(const TempDir& dir) {
  auto ck = SafetensorsCheckpoint::Open(dir.path());
  EXPECT_FALSE(ck.ok());
  return ck.ok() ? Status::Ok() : ck.status();
}

constexpr const char* kGoodIndex =
    R"({"metadata": {"total_size": 2}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})";

TEST(SafetensorsCheckpointErrors, Directory) {
  TempDir dir;
  auto ck = SafetensorsCheckpoint::Open(dir.File("absent"));
  EXPECT_EQ(ck.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(ck.status().message(), HasSubstr("does not exist"));
  ck = SafetensorsCheckpoint::Open(dir.path());
  EXPECT_EQ(ck.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(ck.status().message(), HasSubstr("holds neither model.safetensors nor model.safetensors.index.json"));
  WriteSharded(dir, kGoodIndex);
  ck = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(static_cast<char>(ck->Get("b")->data[0]), '2');
}

TEST(SafetensorsCheckpointErrors, MissingShardAndMissingTensor) {
  TempDir dir;
  WriteSharded(dir, kGoodIndex);
  ::unlink(dir.File("model-00002-of-00002.safetensors").c_str());
  Status st = CheckpointError(dir);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("model.safetensors.index.json: maps tensor \"b\" to shard "
                                      "model-00002-of-00002.safetensors, which does not exist"));

  WriteSharded(dir, R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
                        "c": "model-00002-of-00002.safetensors"}})");
  st = CheckpointError(dir);
  EXPECT_THAT(st.message(), HasSubstr("maps tensor \"c\" to shard model-00002-of-00002.safetensors, which does not hold it"));

  WriteSharded(dir, R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"}})");
  st = CheckpointError(dir);
  EXPECT_THAT(st.message(), HasSubstr("maps tensor \"b\" to shard model-00001-of-00002.safetensors, which does not hold it"));

  WriteSharded(dir, R"({"weight_map": {"a": "model-00001-of-00002.safetensors"}})");  // shard 2 unused: fine
  EXPECT_TRUE(SafetensorsCheckpoint::Open(dir.path()).ok());
  WriteBytes(dir.File("model-00001-of-00002.safetensors"),
             HandBuiltFile("{" + Entry("a", "U8", "[1]", "[0,1]") + "," + Entry("x", "U8", "[1]", "[1,2]") + "}", "12"));
  st = CheckpointError(dir);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("model-00001-of-00002.safetensors: holds tensor \"x\""),
                                  HasSubstr("does not list")));

  WriteSharded(dir, kGoodIndex);
  WriteBytes(dir.File("model-00002-of-00002.safetensors"), U64Le(3) + "{}");
  st = CheckpointError(dir);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("shard model-00002-of-00002.safetensors"), HasSubstr("runs past the end")));
}

TEST(SafetensorsCheckpointErrors, EscapingShardPaths) {
  TempDir dir;
  for (const std::string file : {"../model-00001-of-00002.safetensors", "/etc/passwd", "sub/x.safetensors", "..", ".",
                                 "", "a\\u0000b"}) {
    WriteSharded(dir, R"({"weight_map": {"a": ")" + file + R"("}})");
    const Status st = CheckpointError(dir);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << file;
    EXPECT_THAT(st.message(), AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("weight_map[\"a\"]"))) << file;
  }
}

TEST(SafetensorsCheckpointErrors, BadIndex) {
  TempDir dir;
  WriteSharded(dir, "{");
  EXPECT_THAT(CheckpointError(dir).message(), HasSubstr("model.safetensors.index.json: not valid JSON"));
  WriteSharded(dir, "{\"metadata\": {}}");
  EXPECT_THAT(CheckpointError(dir).message(), HasSubstr("missing weight_map"));
  WriteSharded(dir, "{\"weight_map\": {\"a\": 3}}");
  EXPECT_THAT(CheckpointError(dir).message(), HasSubstr("weight_map[\"a\"] is number, expected a file name"));
  WriteSharded(dir, "{\"metadata\": {\"total_size\": -1}, \"weight_map\": {}}");
  EXPECT_THAT(CheckpointError(dir).message(), HasSubstr("metadata.total_size is -1"));
}

TEST(SafetensorsWriterErrors, RefusesBadTensorsAndLeavesNothing) {
  const auto bytes = RandomBytes(16);
  TempDir dir;
  const std::string path = dir.File("w.safetensors");
  auto refused = [&](std::vector<TensorToWrite> ts) {
    const Status st = WriteSafetensors(path, ts, {});
    EXPECT_FALSE(st.ok());
    EXPECT_TRUE(dir.List().empty());
    return st.message();
  };
  EXPECT_THAT(refused({{"a", DType::kF32, {2}, bytes.data(), 8}, {"a", DType::kF32, {2}, bytes.data(), 8}}),
              AllOf(HasSubstr(path), HasSubstr("tensor \"a\" is given twice")));
  EXPECT_THAT(refused({{"a", DType::kF32, {3}, bytes.data(), 8}}),
              HasSubstr("tensor \"a\": 8 bytes given, but F32 of 3 elements needs 12"));
  EXPECT_THAT(refused({{"a", DType::kF32, {-2}, bytes.data(), 8}}), HasSubstr("shape[0] is -2"));
  EXPECT_THAT(refused({{"a", DType::kF32, {2}, nullptr, 8}}), HasSubstr("data is null"));
  EXPECT_THAT(refused({{"", DType::kU8, {1}, bytes.data(), 1}}), HasSubstr("empty name"));
  EXPECT_THAT(refused({{"__metadata__", DType::kU8, {1}, bytes.data(), 1}}), HasSubstr("reserved"));
  EXPECT_THAT(refused({{"bad\xff", DType::kU8, {1}, bytes.data(), 1}}), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(WriteSafetensors(dir.File("absent/w.safetensors"), {}, {}).message(),
              HasSubstr("create a temporary file in " + dir.File("absent")));
  EXPECT_THAT(WriteSafetensorsCheckpoint(dir.path(), {}, WriteOptions{0, {}}).message(), HasSubstr("max_shard_bytes is 0"));
}

// The fuzz seeds (tests/fuzz/safetensors/, make_seeds.py) say what they are:
// valid_* parse, bad_* are refused.
TEST(SafetensorsErrors, FuzzSeedsAreWhatTheirNamesSay) {
  const char* src = std::getenv("TANDEM_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "TANDEM_SOURCE_DIR is not set (ctest sets it)";
  const std::filesystem::path seeds = std::filesystem::path(src) / "tests/fuzz/safetensors";
  size_t valid = 0, bad = 0;
  for (const auto& e : std::filesystem::directory_iterator(seeds)) {
    const std::string name = e.path().filename().string();
    const std::string bytes = ReadBytes(e.path().string());
    if (name.rfind("valid_", 0) == 0) {
      const auto h = ParseSafetensorsHeader(AsBytes(bytes), name);
      EXPECT_TRUE(h.ok()) << h.status().ToString();
      ++valid;
    } else if (name.rfind("bad_", 0) == 0) {
      EXPECT_FALSE(ParseSafetensorsHeader(AsBytes(bytes), name).ok()) << name;
      ++bad;
    }
  }
  EXPECT_GE(valid, 4u);
  EXPECT_GE(bad, 8u);
  EXPECT_TRUE(ParseSafetensorsIndex(ReadBytes((seeds / "index_valid.json").string()), "index").ok());
  EXPECT_FALSE(ParseSafetensorsIndex(ReadBytes((seeds / "index_escaping.json").string()), "index").ok());
}

}  // namespace
}  // namespace tandem::model
