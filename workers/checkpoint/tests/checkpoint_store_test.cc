// The checkpoint writer and reader on a real file system (checkpoint_writer.h,
// checkpoint_reader.h): round trip through every Add*, keep-N rotation, and
// each kind of partial or corrupt checkpoint skipped with the right message
// and the previous one chosen; stale scratch directories; errors leave the
// previous checkpoint untouched and no temp directory.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "workers/checkpoint/checkpoint_digest.h"
#include "workers/checkpoint/checkpoint_layout.h"
#include "workers/checkpoint/checkpoint_reader.h"
#include "workers/checkpoint/checkpoint_writer.h"
#include "workers/checkpoint/tests/checkpoint_test_util.h"

namespace tandem::checkpoint {
namespace {

using testing::Entries;
using testing::Pattern;
using testing::ReadAll;
using testing::ScratchDir;
using testing::WriteAllTo;
namespace fs = std::filesystem;

// Writes step `step` with two files whose bytes depend on the step.
CommittedCheckpoint WriteStep(CheckpointWriter& w, uint64_t step, size_t bytes = 10'000) {
  auto p = w.Begin(step, step + 100);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->AddFile("a.bin", Pattern(step, bytes)).ok());
  EXPECT_TRUE(p->AddFile("sub/b.bin", Pattern(step + 1000, bytes / 2)).ok());
  auto c = p->Commit({{"step_seen", step}});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : CommittedCheckpoint{};
}

std::vector<uint64_t> Steps(const std::string& root) {
  std::vector<uint64_t> out;
  const auto dirs = ListStepDirs(root);
  EXPECT_TRUE(dirs.ok()) << dirs.status().ToString();
  if (dirs.ok())
    for (const auto& d : *dirs) out.push_back(d.step);
  return out;
}

bool HasScratch(const std::string& root) {
  for (const auto& n : Entries(root))
    if (ParseScratchDirName(n)) return true;
  return false;
}

TEST(CheckpointStore, RoundTripEveryKindOfFile) {
  ScratchDir root;
  auto w = CheckpointWriter::Open(root.path() + "/run/ckpt");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto p = w->Begin(7, 6);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const std::string big = Pattern(1, 5'000'123);
  ASSERT_TRUE(p->AddFile("optimizer/state.bin", big).ok());
  ASSERT_TRUE(p->AddFile("empty.bin", std::string()).ok());
  ASSERT_TRUE(p->AddStream("rng/rank-0.txt", [](FileSink& s) {
                  for (int i = 0; i < 1000; ++i) TANDEM_RETURN_IF_ERROR(s.Write("line " + std::to_string(i) + "\n"));
                  return Status::Ok();
                }).ok());
  ASSERT_TRUE(p->AddWrittenFile("cursor.json", [](const std::string& path) {
                  WriteAllTo(path, R"({"index": 42})");
                  return Status::Ok();
                }).ok());
  ASSERT_TRUE(p->AddDirectory("model", [](const std::string& dir) {  // as model::SavePretrained would
                  WriteAllTo(dir + "/config.json", "{}");
                  fs::create_directories(dir + "/shards");
                  WriteAllTo(dir + "/shards/model-00001.safetensors", Pattern(2, 70'000));
                  return Status::Ok();
                }).ok());
  const std::string tmp = p->dir();
  EXPECT_TRUE(fs::exists(tmp + "/optimizer/state.bin"));
  EXPECT_FALSE(fs::exists(tmp + "/manifest.json")) << "the manifest is written last, at commit";
  auto c = p->Commit({{"data_cursor", 42}, {"rng", "AAEC"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->path, w->root() + "/step-00000007");
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(Entries(w->root()), std::vector<std::string>{"step-00000007"});

  auto got = FindLatestCheckpoint(w->root(), Verify::kDigests);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->path, c->path);
  EXPECT_EQ(got->manifest, c->manifest);
  EXPECT_EQ(got->manifest.step, 7u);
  EXPECT_EQ(got->manifest.weight_version, 6u);
  EXPECT_EQ(got->manifest.metadata["data_cursor"], 42);
  std::vector<std::string> paths;
  for (const auto& f : got->manifest.files) paths.push_back(f.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"cursor.json", "empty.bin", "model/config.json",
                                             "model/shards/model-00001.safetensors", "optimizer/state.bin",
                                             "rng/rank-0.txt"}));
  EXPECT_EQ(ReadAll(c->path + "/optimizer/state.bin"), big);
  for (const auto& f : got->manifest.files) {
    const std::string bytes = ReadAll(c->path + "/" + f.path);
    EXPECT_EQ(bytes.size(), f.bytes) << f.path;
    EXPECT_EQ(DigestOf(std::as_bytes(std::span(bytes.data(), bytes.size()))), f.digest) << f.path;
  }
}

TEST(CheckpointStore, KeepsTheNewestN) {
  for (const size_t keep : {1u, 2u, 3u}) {
    ScratchDir root;
    auto w = CheckpointWriter::Open(root.path(), {.keep = keep});
    ASSERT_TRUE(w.ok());
    for (uint64_t s = 1; s <= 5; ++s) WriteStep(*w, s);
    std::vector<uint64_t> want;
    for (uint64_t s = 5; s > 5 - keep; --s) want.push_back(s);
    EXPECT_EQ(Steps(root.path()), want) << "keep=" << keep;
    EXPECT_FALSE(HasScratch(root.path()));
  }
  ScratchDir root;
  EXPECT_FALSE(CheckpointWriter::Open(root.path(), {.keep = 0}).ok());
}

TEST(CheckpointStore, KeepOneKeepsThePreviousUntilTheNewIsWhole) {
  ScratchDir root;
  auto w = CheckpointWriter::Open(root.path(), {.keep = 1});
  ASSERT_TRUE(w.ok());
  WriteStep(*w, 1);
  auto p = w->Begin(2, 2);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->AddFile("a.bin", Pattern(9, 100'000)).ok());
  EXPECT_EQ(FindLatestCheckpoint(root.path(), Verify::kDigests)->manifest.step, 1u) << "while step 2 is written";
  ASSERT_TRUE(p->Commit().ok());
  EXPECT_EQ(Steps(root.path()), std::vector<uint64_t>{2});
  EXPECT_EQ(FindLatestCheckpoint(root.path(), Verify::kDigests)->manifest.step, 2u);
}

TEST(CheckpointStore, RotationDropsInvalidOnesAndKeepsWholeOnes) {
  ScratchDir root;
  auto w = CheckpointWriter::Open(root.path(), {.keep = 2});
  ASSERT_TRUE(w.ok());
  WriteStep(*w, 1);
  const auto c2 = WriteStep(*w, 2);
  fs::remove(c2.path + "/manifest.json");  // step 2 now partial
  WriteStep(*w, 3);
  // Kept: 3 (new) and 1 (the newest whole older one); the partial 2 is gone.
  EXPECT_EQ(Steps(root.path()), (std::vector<uint64_t>{3, 1}));
}

struct Damage {
  const char* name;
  std::function<void(const std::string& dir)> apply;
  Verify verify;
  const char* want;
};

TEST(CheckpointStore, PartialOrCorruptSkippedWithWhyAndPreviousChosen) {
  const std::vector<Damage> table = {
      {"manifest deleted", [](const std::string& d) { fs::remove(d + "/manifest.json"); }, Verify::kSizes,
       "missing manifest.json"},
      {"manifest torn", [](const std::string& d) { fs::resize_file(d + "/manifest.json", 40); }, Verify::kSizes,
       "manifest.json: manifest: not valid JSON"},
      {"manifest empty", [](const std::string& d) { fs::resize_file(d + "/manifest.json", 0); }, Verify::kSizes,
       "manifest.json: manifest: not valid JSON"},
      {"file truncated", [](const std::string& d) { fs::resize_file(d + "/a.bin", 9'999); }, Verify::kSizes,
       "size mismatch of file \"a.bin\": 9999 bytes on disk, the manifest says 10000"},
      {"file grown", [](const std::string& d) { fs::resize_file(d + "/sub/b.bin", 6'000); }, Verify::kSizes,
       "size mismatch of file \"sub/b.bin\""},
      {"file deleted", [](const std::string& d) { fs::remove(d + "/sub/b.bin"); }, Verify::kSizes,
       "missing file \"sub/b.bin\""},
      {"bit flipped",
       [](const std::string& d) {
         std::string b = ReadAll(d + "/a.bin");
         b[1234] ^= 0x10;
         WriteAllTo(d + "/a.bin", b);
       },
       Verify::kDigests, "digest mismatch of file \"a.bin\""},
      {"unlisted file", [](const std::string& d) { WriteAllTo(d + "/sub/extra", "x"); }, Verify::kSizes,
       "unlisted file \"sub/extra\""},
      {"file replaced by symlink",
       [](const std::string& d) {
         fs::rename(d + "/a.bin", d + "/../a.bin.moved");
         fs::create_symlink(d + "/../a.bin.moved", d + "/a.bin");
       },
       Verify::kSizes, "file \"a.bin\": open"},
      {"dir replaced by symlink",
       [](const std::string& d) {
         fs::rename(d + "/sub", d + "/../sub.moved");
         fs::create_directory_symlink(d + "/../sub.moved", d + "/sub");
       },
       Verify::kSizes, "file \"sub/b.bin\": open"},
      {"manifest of another step",
       [](const std::string& d) {
         std::string m = ReadAll(d + "/manifest.json");
         const size_t at = m.find("\"step\": 2");
         ASSERT_NE(at, std::string::npos);
         m.replace(at, 9, "\"step\": 1");
         WriteAllTo(d + "/manifest.json", m);
       },
       Verify::kSizes, "manifest.json says step 1, the directory is of step 2"},
  };
  for (const Damage& dmg : table) {
    ScratchDir root;
    auto w = CheckpointWriter::Open(root.path(), {.keep = 3});
    ASSERT_TRUE(w.ok());
    const auto c1 = WriteStep(*w, 1);
    const auto c2 = WriteStep(*w, 2);
    ASSERT_EQ(FindLatestCheckpoint(root.path(), dmg.verify)->path, c2.path) << dmg.name;
    dmg.apply(c2.path);
    std::vector<SkippedCheckpoint> skipped;
    auto got = FindLatestCheckpoint(root.path(), dmg.verify, &skipped);
    ASSERT_TRUE(got.ok()) << dmg.name << ": " << got.status().ToString();
    EXPECT_EQ(got->path, c1.path) << dmg.name;
    ASSERT_EQ(skipped.size(), 1u) << dmg.name;
    EXPECT_EQ(skipped[0].path, c2.path);
    EXPECT_EQ(skipped[0].why.code(), StatusCode::kDataLoss) << dmg.name;
    EXPECT_NE(skipped[0].why.message().find(dmg.want), std::string::npos)
        << dmg.name << ": got \"" << skipped[0].why.message() << "\", want \"" << dmg.want << "\"";
  }
}

TEST(CheckpointStore, DigestsOnlyCheckedWhenAsked) {
  ScratchDir root;
  auto w = CheckpointWriter::Open(root.path());
  ASSERT_TRUE(w.ok());
  const auto c = WriteStep(*w, 1);
  std::string b = ReadAll(c.path + "/a.bin");
  b[0] ^= 1;
  WriteAllTo(c.path + "/a.bin", b);
  EXPECT_TRUE(FindLatestCheckpoint(root.path(), Verify::kSizes).ok());
  auto full = FindLatestCheckpoint(root.path(), Verify::kDigests);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kNotFound);
  EXPECT_NE(full.status().message().find("digest mismatch of file \"a.bin\""), std::string::npos)
      << full.status().message();
}

TEST(CheckpointStore, NoCheckpointIsNotFound) {
  ScratchDir root;
  auto none = FindLatestCheckpoint(root.path(), Verify::kSizes);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  fs::create_directories(root.path() + "/.tmp-step-00000003-1/x");
  fs::create_directories(root.path() + "/step-3");  // not canonical: ignored
  EXPECT_EQ(FindLatestCheckpoint(root.path(), Verify::kSizes).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(FindLatestCheckpoint(root.path() + "/absent", Verify::kSizes).status().code(), StatusCode::kNotFound);
}

TEST(CheckpointStore, FailingCallbackRemovesTempAndLeavesPreviousAlone) {
  ScratchDir root;
  auto w = CheckpointWriter::Open(root.path());
  ASSERT_TRUE(w.ok());
  const auto c1 = WriteStep(*w, 1);
  auto p = w->Begin(2, 2);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->AddFile("a.bin", "abc").ok());
  const Status s = p->AddStream("b.bin", [](FileSink& sink) {
    TANDEM_RETURN_IF_ERROR(sink.Write("half"));
    return Unavailable("serializer gave up");
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("checkpoint file \"b.bin\": serializer gave up"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(p->dir()));
  EXPECT_EQ(p->AddFile("c.bin", "x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(p->Commit().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Entries(root.path()), std::vector<std::string>{"step-00000001"});
  EXPECT_EQ(FindLatestCheckpoint(root.path(), Verify::kDigests)->manifest, c1.manifest);
}

TEST(CheckpointStore, BadPathsAndDuplicatesRefused) {
  ScratchDir root;
  auto w = CheckpointWriter::Open(root.path());
  ASSERT_TRUE(w.ok());
  for (const char* bad : {"../x", "/abs", "a//b", "manifest.json", "", "a/./b"}) {
    auto p = w->Begin(1, 1);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->AddFile(bad, "x").code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(fs::exists(p->dir())) << bad;
  }
  auto p = w->Begin(1, 1);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->AddFile("a", "x").ok());
  EXPECT_EQ(p->AddFile("a", "y").code(), StatusCode::kAlreadyExists);
  auto q = w->Begin(2, 2);
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->AddDirectory("m", [](const std::string& dir) {
                  fs::create_symlink("/etc/passwd", dir + "/passwd");
                  return Status::Ok();
                }).ok());
  EXPECT_FALSE(HasScratch(root.path()));
}

TEST(CheckpointStore, DestroyedWithoutCommitLeavesNothing) {
  ScratchDir root;
  auto w = CheckpointWriter::Open(root.path());
  ASSERT_TRUE(w.ok());
  {
    auto p = w->Begin(4, 4);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE(p->AddFile("a", Pattern(3, 1000)).ok());
    EXPECT_TRUE(HasScratch(root.path()));
  }
  EXPECT_TRUE(Entries(root.path()).empty());
}

TEST(CheckpointStore, StepWrittenAgainReplacesItAndNewerTimelineIsDropped) {
  ScratchDir root;
  auto w = CheckpointWriter::Open(root.path(), {.keep = 5});
  ASSERT_TRUE(w.ok());
  for (uint64_t s = 1; s <= 4; ++s) WriteStep(*w, s);
  // A resume from step 2 writes step 3 again: 4 is an abandoned timeline.
  auto p = w->Begin(3, 77);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->AddFile("other.bin", "new timeline").ok());
  ASSERT_TRUE(p->Commit().ok());
  EXPECT_EQ(Steps(root.path()), (std::vector<uint64_t>{3, 2, 1}));
  auto got = FindLatestCheckpoint(root.path(), Verify::kDigests);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->manifest.weight_version, 77u);
  EXPECT_EQ(ReadAll(got->path + "/other.bin"), "new timeline");
  EXPECT_FALSE(HasScratch(root.path()));
}

// A pid that was alive and is not any more: a child that exited, reaped.
int64_t DeadPid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return pid;
}

TEST(CheckpointStore, StaleScratchRemovedByTheRule) {
  ScratchDir root;
  const int64_t dead = DeadPid();
  const std::string dead_tmp = TempDirName(5, dead), dead_trash = TrashDirName(2, dead);
  const std::string live_tmp = TempDirName(5, ::getppid());  // our parent: alive
  const std::string own_tmp = TempDirName(6, ::getpid());
  for (const auto& n : {dead_tmp, dead_trash, live_tmp, own_tmp}) {
    fs::create_directories(root.path() + "/" + n + "/model");
    WriteAllTo(root.path() + "/" + n + "/model/x", "partial");
  }
  auto w = CheckpointWriter::Open(root.path());
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(Entries(root.path()), (std::vector<std::string>{live_tmp, own_tmp}));
  WriteStep(*w, 1);  // Begin's pass removes nothing more, commit works beside them
  EXPECT_EQ(Entries(root.path()), (std::vector<std::string>{live_tmp, own_tmp, "step-00000001"}));
  auto sole = CheckpointWriter::Open(root.path(), {.sole_writer = true});
  ASSERT_TRUE(sole.ok());
  EXPECT_EQ(Entries(root.path()), std::vector<std::string>{"step-00000001"});
}

}  // namespace
}  // namespace tandem::checkpoint
