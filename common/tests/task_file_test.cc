// Files a task can write (common/task_file.h) and typed JSON fields
// (common/json_field.h), on real files: what a hostile task can leave at a
// path the daemon reads — a FIFO, a symlink (to /dev/zero), a directory, a
// huge file, JSON of any shape — is refused at once, never read forever or
// waited on.
#include "common/task_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/json_field.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

class TaskFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "tandem-task-file-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return dir_ / name;
  }
  fs::path dir_;
};

TEST_F(TaskFileTest, ReadsARegularFileWholeOrItsTail) {
  const fs::path f = Write("a.out", "hello world");
  auto all = ReadTaskFile(f, 11);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, "hello world");
  auto big = ReadTaskFile(f, 10);
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted) << big.status().ToString();
  bool truncated = false;
  auto tail = ReadTaskFileTail(f, 5, &truncated);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(*tail, "world");
  EXPECT_TRUE(truncated);
  tail = ReadTaskFileTail(f, 100, &truncated);
  EXPECT_EQ(*tail, "hello world");
  EXPECT_FALSE(truncated);
  EXPECT_EQ(ReadTaskFile(dir_ / "missing", 10).status().code(), StatusCode::kNotFound);
}

TEST_F(TaskFileTest, AFifoIsRefusedAtOnceForReadingAndAppending) {
  const fs::path fifo = dir_ / "task.exit";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto read = ReadTaskFile(fifo, 1024);
  EXPECT_EQ(read.status().code(), StatusCode::kFailedPrecondition) << read.status().ToString();
  EXPECT_NE(read.status().message().find("FIFO"), std::string::npos) << read.status().ToString();
  auto append = OpenTaskFile(fifo, O_WRONLY | O_APPEND | O_CREAT);
  EXPECT_EQ(append.status().code(), StatusCode::kFailedPrecondition) << append.status().ToString();
  EXPECT_FALSE(ReadTaskJson(fifo));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "a FIFO was waited on";
}

TEST_F(TaskFileTest, SymlinksDevicesAndDirectoriesAreRefused) {
  const fs::path real = Write("real.json", "{\"a\":1}");
  fs::create_symlink(real, dir_ / "link.json");
  fs::create_symlink("/dev/zero", dir_ / "zero");
  EXPECT_EQ(ReadTaskFile(dir_ / "link.json", 100).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadTaskFile(dir_ / "zero", 100).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadTaskFile("/dev/zero", 100).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadTaskFile(dir_, 100).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(ReadTaskJson(dir_ / "link.json"));
  EXPECT_TRUE(ReadTaskJson(real));
}

TEST_F(TaskFileTest, AppendingCreatesARegularFile) {
  const fs::path log = dir_ / "handoff.jsonl";
  auto fd = OpenTaskFile(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  ASSERT_EQ(::write(fd->get(), "x\n", 2), 2);
  EXPECT_EQ(*ReadTaskFile(log, 10), "x\n");
}

TEST_F(TaskFileTest, OnlyBoundedJsonObjectsAreRecords) {
  EXPECT_TRUE(ReadTaskJson(Write("ok.json", "{\"job_id\":\"12\"}")));
  EXPECT_FALSE(ReadTaskJson(Write("array.json", "[1,2]")));
  EXPECT_FALSE(ReadTaskJson(Write("bad.json", "{\"job_id\":")));
  EXPECT_FALSE(ReadTaskJson(Write("deep.json", "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}")));
  EXPECT_FALSE(ReadTaskJson(Write("big.json", "{\"a\":\"" + std::string(2 << 20, 'x') + "\"}")));
  EXPECT_FALSE(ReadTaskJson(""));
}

TEST(JsonFieldTest, WrongTypesAndShapesGiveTheFallback) {
  const auto j = nlohmann::json::parse(R"({"s":"x","i":-5,"u":18446744073709551615,"n":null,"f":1.5,"o":{}})");
  EXPECT_EQ(StringField(j, "s"), "x");
  EXPECT_EQ(StringField(j, "i", "d"), "d");
  EXPECT_EQ(StringField(j, "missing", "d"), "d");
  EXPECT_EQ(IntField(j, "i", 0), -5);
  EXPECT_EQ(IntField(j, "u", 7), 7) << "beyond int64";
  EXPECT_EQ(IntField(j, "f", 7), 7);
  EXPECT_EQ(IntField(j, "s", 7), 7);
  EXPECT_EQ(IntField(j, "n", 7), 7);
  EXPECT_EQ(StringField(nlohmann::json::array({1}), "s", "d"), "d");
  EXPECT_EQ(IntField(nlohmann::json("text"), "i", 3), 3);
}

}  // namespace
}  // namespace tandem
