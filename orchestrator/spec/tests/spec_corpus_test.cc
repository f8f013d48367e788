// The C++ parser and a real JSON Schema validator (ajv, draft 2020-12, run
// by node: tests/schema/validate.js) must agree on every file of
// examples/*.json and tests/specs/**.json (schemas/jobspec.schema.json is
// the one source of truth):
//   examples/, tests/specs/valid/             both say valid (examples/ for
//                                             this build; valid/ for a build
//                                             with every worker kind)
//   tests/specs/invalid/                      both say invalid
//   tests/specs/invalid-semantic/             ajv valid, C++ invalid (what a schema cannot check)
// Each invalid file X.json has X.expect beside it: every non-empty line not
// starting with '#' must appear in the C++ parser's errors. Missing node or
// ajv is a failure, not a skip: scripts/setup.sh --test installs them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/spec/job_spec.h"
#include "orchestrator/spec/parse_options.h"

namespace tandem::spec {
namespace {

namespace fs = std::filesystem;

enum class Expect { kValid, kInvalid, kSemantic };

struct CorpusFile {
  fs::path path;
  Expect expect;
  // Parsed as for a build with every worker kind of the format (actor,
  // rollout, teacher, probe): tests/specs/valid/ is about the format. The
  // rest is parsed for this build, so an example never names a worker this
  // build lacks and invalid-semantic/ can hold one that it lacks.
  bool every_worker_kind = false;
};

fs::path SourceDir() {
  const char* dir = std::getenv("TANDEM_SOURCE_DIR");
  return dir ? fs::path(dir) : fs::path(TANDEM_SOURCE_DIR_DEFAULT);
}

std::vector<fs::path> JsonFiles(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<CorpusFile> Corpus() {
  const fs::path root = SourceDir();
  std::vector<CorpusFile> out;
  for (const auto& p : JsonFiles(root / "examples")) out.push_back({p, Expect::kValid});
  for (const auto& p : JsonFiles(root / "tests/specs/valid")) out.push_back({p, Expect::kValid, true});
  for (const auto& p : JsonFiles(root / "tests/specs/invalid")) out.push_back({p, Expect::kInvalid});
  for (const auto& p : JsonFiles(root / "tests/specs/invalid-semantic")) out.push_back({p, Expect::kSemantic});
  return out;
}

// Runs the node validator over `files`; returns file -> valid, or fails.
std::map<std::string, bool> AjvVerdicts(const std::vector<CorpusFile>& files, std::string* error) {
  const fs::path root = SourceDir();
  if (std::system("command -v node >/dev/null 2>&1") != 0) {
    *error = "node is not installed: run scripts/setup.sh --test";
    return {};
  }
  std::string cmd = "node " + Quote((root / "tests/schema/validate.js").string()) + " " +
                    Quote((root / "schemas/jobspec.schema.json").string());
  for (const auto& f : files) cmd += " " + Quote(f.path.string());
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) {
    *error = "cannot run node";
    return {};
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  int rc = pclose(pipe);
  if (rc != 0) {
    *error = "the validator failed (exit " + std::to_string(rc) +
             "); is ajv installed? run scripts/setup.sh --test (npm ci in tests/schema)";
    return {};
  }
  std::map<std::string, bool> verdicts;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("file") || !j.contains("valid")) {
      *error = "unexpected validator output: " + line;
      return {};
    }
    verdicts[j["file"].get<std::string>()] = j["valid"].get<bool>();
  }
  return verdicts;
}

std::vector<std::string> ExpectedSubstrings(const fs::path& json_file) {
  fs::path expect = json_file;
  expect.replace_extension(".expect");
  std::vector<std::string> out;
  std::istringstream lines(ReadFile(expect));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] != '#') out.push_back(line);
  }
  return out;
}

TEST(SpecCorpus, TheCorpusCoversEveryKind) {
  std::map<Expect, int> counts;
  for (const auto& f : Corpus()) counts[f.expect]++;
  EXPECT_GE(counts[Expect::kValid], 5) << "examples/ and tests/specs/valid/";
  EXPECT_GE(counts[Expect::kInvalid], 30) << "tests/specs/invalid/";
  EXPECT_GE(counts[Expect::kSemantic], 8) << "tests/specs/invalid-semantic/";
}

TEST(SpecCorpus, CppParserAndAjvAgreeOnEveryFile) {
  std::vector<CorpusFile> files = Corpus();
  ASSERT_FALSE(files.empty()) << "no corpus under " << SourceDir();
  std::string error;
  std::map<std::string, bool> ajv = AjvVerdicts(files, &error);
  ASSERT_TRUE(error.empty()) << error;
  for (const CorpusFile& f : files) {
    SCOPED_TRACE(f.path.string());
    ASSERT_TRUE(ajv.count(f.path.string())) << "no verdict from ajv";
    const bool ajv_valid = ajv[f.path.string()];
    ParseResult r = f.every_worker_kind ? ParseJobSpecText(ReadFile(f.path), ParseOptions{ParseOptions::AllWorkerKinds()})
                                        : ParseJobSpecText(ReadFile(f.path));
    const bool cpp_valid = r.errors.empty();
    const std::string cpp_errors = r.ToStatus().message();
    switch (f.expect) {
      case Expect::kValid:
        EXPECT_TRUE(ajv_valid) << "ajv says invalid";
        EXPECT_TRUE(cpp_valid) << "C++ says invalid:\n" << cpp_errors;
        break;
      case Expect::kInvalid:
        EXPECT_FALSE(ajv_valid) << "ajv says valid";
        EXPECT_FALSE(cpp_valid) << "C++ says valid";
        break;
      case Expect::kSemantic:
        EXPECT_TRUE(ajv_valid) << "ajv says invalid: a schema violation belongs in tests/specs/invalid/";
        EXPECT_FALSE(cpp_valid) << "C++ says valid";
        break;
    }
    if (f.expect != Expect::kValid) {
      std::vector<std::string> expected = ExpectedSubstrings(f.path);
      EXPECT_FALSE(expected.empty()) << "missing or empty .expect file";
      for (const std::string& s : expected) {
        EXPECT_THAT(cpp_errors, ::testing::HasSubstr(s));
      }
    }
  }
}

}  // namespace
}  // namespace tandem::spec
