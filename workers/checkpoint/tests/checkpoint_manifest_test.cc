// The checkpoint manifest (checkpoint_manifest.h): round trip, and a table of
// hostile manifests each refused with an error naming the field.
#include "workers/checkpoint/checkpoint_manifest.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "workers/checkpoint/checkpoint_digest.h"
#include "workers/checkpoint/checkpoint_layout.h"

namespace tandem::checkpoint {
namespace {

Manifest Sample() {
  Manifest m;
  m.step = 15;
  m.weight_version = 14;
  m.files = {{"model/config.json", 120, 0x0123456789abcdefull},
             {"model/model.safetensors", 1ull << 40, 0xfedcba9876543210ull},
             {"optimizer/adamw.bin", 0, DigestOf({})}};
  m.metadata = {{"data_cursor", {{"epoch", 1}, {"index", 4242}}}, {"rng", {{"cpu", "AAEC/w=="}}}};
  return m;
}

TEST(CheckpointManifest, RoundTrip) {
  const Manifest m = Sample();
  auto text = ManifestJson(m);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto back = ParseManifest(*text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, m);
  EXPECT_NE(text->find("\"xxh64\": \"0123456789abcdef\""), std::string::npos) << *text;
}

TEST(CheckpointManifest, SortsFilesByPath) {
  Manifest m = Sample();
  std::swap(m.files[0], m.files[2]);
  auto back = ParseManifest(ManifestJson(m).value());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->files, Sample().files);
}

TEST(CheckpointManifest, DigestStreamingEqualsOneShot) {
  std::mt19937_64 rng(std::random_device{}());
  std::string bytes(100'003, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  Digester d;
  const auto all = std::as_bytes(std::span(bytes.data(), bytes.size()));
  for (size_t i = 0; i < all.size(); i += 4099) d.Update(all.subspan(i, std::min<size_t>(4099, all.size() - i)));
  EXPECT_EQ(d.Digest(), DigestOf(all));
  bytes[5000] ^= 1;
  EXPECT_NE(d.Digest(), DigestOf(std::as_bytes(std::span(bytes.data(), bytes.size()))));
  EXPECT_EQ(ParseXxh64Hex(Xxh64Hex(0x00ab00cd00ef0012ull)), 0x00ab00cd00ef0012ull);
  EXPECT_FALSE(ParseXxh64Hex("00AB00CD00EF0012").has_value());
  EXPECT_FALSE(ParseXxh64Hex("0ab").has_value());
}

TEST(CheckpointManifest, ValidPathsAccepted) {
  for (const char* p : {"a", "model/model.safetensors", "x/y/z.bin", ".hidden", "a..b", "manifest.json.bak",
                        "dir/manifest.json", "rng/rank-0.json"})
    EXPECT_TRUE(ValidateRelativePath(p).ok()) << p << ": " << ValidateRelativePath(p).ToString();
}

// A valid manifest with one part replaced: each row must be refused and the
// error must contain `want`.
struct Hostile {
  const char* name;
  std::string text;
  const char* want;
};

std::string With(const std::string& files, const std::string& top = R"("step": 3, "weight_version": 3)") {
  return R"({"format": "tandem-checkpoint", "format_version": 1, "digest": "xxh64", )" + top +
         R"(, "metadata": {}, "files": [)" + files + "]}";
}
std::string File(const std::string& path, const std::string& bytes = "10",
                 const std::string& digest = "\"0123456789abcdef\"") {
  return R"({"path": )" + path + R"(, "bytes": )" + bytes + R"(, "xxh64": )" + digest + "}";
}

TEST(CheckpointManifest, HostileManifestsRefused) {
  const std::string ok_file = File("\"a.bin\"");
  ASSERT_TRUE(ParseManifest(With(ok_file)).ok()) << ParseManifest(With(ok_file)).status().ToString();
  const std::vector<Hostile> table = {
      {"empty", "", "not valid JSON"},
      {"not json", "{\"format\": ", "not valid JSON"},
      {"array", "[]", "not a JSON object"},
      {"nul byte", With(ok_file) + std::string(1, '\0'), "NUL byte"},
      {"deep metadata", With(ok_file).replace(With(ok_file).find("\"metadata\": {}"), 14,
                                              "\"metadata\": " + std::string(100, '[') + std::string(100, ']')),
       "nested deeper"},
      {"absolute path", With(File("\"/etc/passwd\"")), "files[0].path: absolute path"},
      {"dotdot", With(File("\"../../x\"")), "files[0].path: component \"..\""},
      {"dotdot inside", With(File("\"a/../../x\"")), "component \"..\""},
      {"dot", With(File("\"./a\"")), "component \".\""},
      {"empty path", With(File("\"\"")), "files[0].path: empty path"},
      {"double slash", With(File("\"a//b\"")), "empty component"},
      {"trailing slash", With(File("\"a/\"")), "empty component"},
      {"backslash", With(File("\"a\\\\..\\\\b\"")), "backslash"},
      {"control char", With(File("\"a\\u0001b\"")), "control character"},
      {"newline", With(File("\"a\\nb\"")), "control character"},
      {"manifest itself", With(File("\"manifest.json\"")), "the manifest's own"},
      {"long component", With(File("\"" + std::string(300, 'a') + "\"")), "component of 300 bytes"},
      {"long path", With(File("\"" + [] { std::string s; for (int i = 0; i < 300; ++i) s += "abcd/"; return s + "x"; }() + "\"")),
       "above the limit 1024"},
      {"path not string", With(File("7")), "files[0].path is not a string"},
      {"duplicate file", With(ok_file + "," + ok_file), "files[1].path \"a.bin\" appears twice"},
      {"file under file", With(File("\"a\"") + "," + File("\"a/b\"")), "lies under \"a\""},
      {"negative size", With(File("\"a\"", "-1")), "files[0]: bytes is -1"},
      {"fractional size", With(File("\"a\"", "1.5")), "bytes is 1.5"},
      {"huge size", With(File("\"a\"", "18446744073709551615")), "above the limit"},
      {"size string", With(File("\"a\"", "\"10\"")), "bytes is \"10\""},
      {"total overflow", With([] {
         std::string s;
         for (int i = 0; i < 70; ++i) s += (i ? "," : "") + File("\"f" + std::to_string(i) + "\"", std::to_string(1ull << 50));
         return s;
       }()),
       "add up to more than"},
      {"digest short", With(File("\"a\"", "1", "\"abc\"")), "files[0].xxh64 is \"abc\""},
      {"digest upper", With(File("\"a\"", "1", "\"0123456789ABCDEF\"")), "16 lowercase hex"},
      {"digest number", With(File("\"a\"", "1", "12")), "files[0].xxh64 is 12"},
      {"file unknown key", With(R"({"path": "a", "bytes": 1, "xxh64": "0123456789abcdef", "mode": 420})"),
       "files[0]: unknown field \"mode\""},
      {"file missing key", With(R"({"path": "a", "bytes": 1})"), "files[0]: missing field \"xxh64\""},
      {"file not object", With("\"a\""), "files[0] is not an object"},
      {"files not array", R"({"format": "tandem-checkpoint", "format_version": 1, "digest": "xxh64", "step": 1,
          "weight_version": 1, "metadata": {}, "files": {}})", "files is not an array"},
      {"top unknown key", With(ok_file, R"("step": 3, "weight_version": 3, "extra": 1)"), "unknown field \"extra\""},
      {"top missing step", With(ok_file, R"("weight_version": 3)"), "missing field \"step\""},
      {"negative step", With(ok_file, R"("step": -3, "weight_version": 3)"), "step is -3"},
      {"step too big", With(ok_file, R"("step": 9007199254740992, "weight_version": 3)"), "step is 9007199254740992"},
      {"float version", With(ok_file, R"("step": 3, "weight_version": 3.0)"), "weight_version is 3.0"},
      {"duplicate key", With(ok_file, R"("step": 3, "step": 4, "weight_version": 3)"), "key \"step\" appears twice"},
      {"duplicate key in file", With(R"({"path": "a", "path": "b", "bytes": 1, "xxh64": "0123456789abcdef"})"),
       "key \"path\" appears twice"},
      {"other format", R"({"format": "other", "format_version": 1, "digest": "xxh64", "step": 1,
          "weight_version": 1, "metadata": {}, "files": []})", "format is \"other\""},
      {"newer version", R"({"format": "tandem-checkpoint", "format_version": 2, "digest": "xxh64", "step": 1,
          "weight_version": 1, "metadata": {}, "files": []})", "format_version is 2"},
      {"other digest", R"({"format": "tandem-checkpoint", "format_version": 1, "digest": "crc32c", "step": 1,
          "weight_version": 1, "metadata": {}, "files": []})", "digest is \"crc32c\""},
      {"metadata array", R"({"format": "tandem-checkpoint", "format_version": 1, "digest": "xxh64", "step": 1,
          "weight_version": 1, "metadata": [], "files": []})", "metadata is not an object"},
      {"too large", std::string(kMaxManifestBytes + 1, ' '), "above the limit"},
  };
  for (const Hostile& h : table) {
    auto m = ParseManifest(h.text);
    ASSERT_FALSE(m.ok()) << h.name << " was accepted";
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << h.name;
    EXPECT_NE(m.status().message().find(h.want), std::string::npos)
        << h.name << ": got \"" << m.status().message() << "\", want it to contain \"" << h.want << "\"";
  }
}

TEST(CheckpointManifest, WriterRefusesWhatReaderWould) {
  Manifest m = Sample();
  m.files.push_back({"../escape", 1, 0});
  EXPECT_FALSE(ManifestJson(m).ok());
  m = Sample();
  m.files.push_back(m.files[0]);
  EXPECT_FALSE(ManifestJson(m).ok());
  m = Sample();
  m.metadata = nlohmann::json::array();
  EXPECT_FALSE(ManifestJson(m).ok());
}

TEST(CheckpointLayout, Names) {
  EXPECT_EQ(StepDirName(15), "step-00000015");
  EXPECT_EQ(StepDirName(123456789), "step-123456789");
  EXPECT_EQ(ParseStepDirName("step-00000015"), 15u);
  EXPECT_EQ(ParseStepDirName("step-123456789"), 123456789u);
  for (const char* bad : {"step-15", "step-", "step-0000001a", "step--0000001", "xstep-00000015", "step-00000015 ",
                          "step-0000000000000000000000015"})
    EXPECT_FALSE(ParseStepDirName(bad).has_value()) << bad;
  const auto s = ParseScratchDirName(TempDirName(7, 4242));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 7u);
  EXPECT_EQ(s->pid, 4242);
  EXPECT_EQ(ParseScratchDirName(TrashDirName(9, 1))->pid, 1);
  EXPECT_FALSE(ParseScratchDirName(".tmp-step-7-42").has_value());
  EXPECT_FALSE(ParseScratchDirName(".tmp-step-00000007-").has_value());
  EXPECT_FALSE(ParseScratchDirName(".tmp-step-00000007-4x").has_value());
}

}  // namespace
}  // namespace tandem::checkpoint
