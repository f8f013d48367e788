// A run dir is one live job's, across processes too (issue #12 point 6;
// docs/jobspec.md "Run directories"): two `tandem run`s of the same spec
// (each its own embedded daemon) and a tandemd given the same run_dir. The
// first run holds <run_dir>/run.lock; the second `tandem run` is refused
// naming the holder's pid, and so is a tandemd's submit; after kill -9 of
// the holder the kernel has dropped its lock and a third run takes the run
// dir. Real processes: the tandem binary, tandemd, bash tasks.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <optional>

#include "tests/daemon/daemon_process.h"

namespace tandem::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// `tandem ARGS` with stdout and stderr to files; its pid.
pid_t SpawnTandem(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  std::vector<std::string> all = {(BinDir() / "tandem").string()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

// Its exit code once it exited within `timeout`; nullopt (and SIGKILL) otherwise.
std::optional<int> WaitExit(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return std::nullopt;
}

std::string LockHolder(const fs::path& run_dir) {
  std::string pid = ReadFile(run_dir / "run.lock");
  while (!pid.empty() && pid.back() == '\n') pid.pop_back();
  return pid;
}

TEST(RunDirLock, ASecondRunOfTheSameRunDirIsRefusedUntilTheHolderDies) {
  const fs::path dir = MakeTempDir("tandem-rundir-lock");
  const fs::path run_dir = dir / "shared", go = dir / "go", spec_file = dir / "spec.json";
  struct Release {  // however the test ends, the tasks end
    fs::path go;
    ~Release() { std::ofstream(go) << "go"; }
  } release{go};
  json spec = BashJob("same", "while [ ! -e " + go.string() + " ]; do sleep 0.05; done");
  spec["run_dir"] = run_dir.string();
  std::ofstream(spec_file) << spec.dump();

  const pid_t first = SpawnTandem({"run", spec_file.string()}, dir / "first.out", dir / "first.err");
  ASSERT_GT(first, 0);
  ASSERT_TRUE(WaitFor([&] { return LockHolder(run_dir) == std::to_string(first); }, std::chrono::seconds(30)))
      << ReadFile(dir / "first.err");

  // A second `tandem run` of the same spec: refused at once, naming the holder.
  const pid_t second = SpawnTandem({"run", spec_file.string()}, dir / "second.out", dir / "second.err");
  ASSERT_GT(second, 0);
  const std::optional<int> rc = WaitExit(second, std::chrono::seconds(30));
  ASSERT_TRUE(rc.has_value()) << "the second run was not refused: it ran\n" << ReadFile(dir / "second.err");
  EXPECT_NE(*rc, 0);
  const std::string err = ReadFile(dir / "second.err");
  EXPECT_NE(err.find("is in use by another tandem process (pid " + std::to_string(first) + ","), std::string::npos)
      << err;
  EXPECT_EQ(LockHolder(run_dir), std::to_string(first));

  // So is a tandemd's job naming that run dir.
  {
    DaemonProcess d(dir / "state");
    d.Start();
    auto r = d.client().Request("POST", "/v1/jobs", spec.dump());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 409) << r->body;
    EXPECT_NE(r->body.find("pid " + std::to_string(first)), std::string::npos) << r->body;
    d.Stop();
  }

  // kill -9 of the holder: the kernel drops its lock, a third run takes the
  // run dir (its task, and the orphaned one, end on the go file).
  ::kill(first, SIGKILL);
  ::waitpid(first, nullptr, 0);
  const pid_t third = SpawnTandem({"run", spec_file.string()}, dir / "third.out", dir / "third.err");
  ASSERT_GT(third, 0);
  EXPECT_TRUE(WaitFor([&] { return LockHolder(run_dir) == std::to_string(third); }, std::chrono::seconds(30)))
      << ReadFile(dir / "third.err");
  std::ofstream(go) << "go";
  const std::optional<int> third_rc = WaitExit(third, std::chrono::seconds(60));
  ASSERT_TRUE(third_rc.has_value()) << ReadFile(dir / "third.err");
  EXPECT_EQ(*third_rc, 0) << ReadFile(dir / "third.err");
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::testing
