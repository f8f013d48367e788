// Run dirs of jobs; see job_run_dir.h (docs/jobspec.md "Run directories").
#include "orchestrator/daemon/job_run_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "orchestrator/store/durable_file.h"

namespace tandem::daemon {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;
}  // namespace

// A name for history/<name>/ from an old job.json's "id": only what a job id
// can hold ([A-Za-z0-9._-], not "." or ".."), else "previous". The file is
// the run dir's, and a task may have written it.
std::string ArchiveName(const fs::path& job_json) {
  std::error_code ec;
  const auto size = fs::file_size(job_json, ec);
  if (ec || size > (64u << 20)) return "previous";
  std::ifstream in(job_json);
  const json old = json::parse(in, nullptr, false);
  if (old.is_discarded() || !old.is_object() || !old.contains("id") || !old["id"].is_string()) return "previous";
  const std::string id = old["id"].get<std::string>();
  if (id.empty() || id.size() > 100 || id == "." || id == "..") return "previous";
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return "previous";
  return id;
}

// A run dir reused by a new job keeps the old job's files under
// history/<old id>/ (history/<old id>-2/, ... when taken). Every step goes
// through directory fds opened without following symlinks, so a symlink a
// task left (history -> /elsewhere) cannot move files out of the run dir.
Status ArchivePreviousRun(const fs::path& run_dir) {
  const std::string ctx = "archive the previous run in " + run_dir.string();
  store::UniqueFd run(::open(run_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!run) return ErrnoStatus("open " + run_dir.string()).WithContext(ctx);
  if (::mkdirat(run.get(), "history", 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir history").WithContext(ctx);
  store::UniqueFd history(::openat(run.get(), "history", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!history)
    return ErrnoStatus("open history (must be a directory, not a symlink)").WithContext(ctx);
  const std::string base = ArchiveName(run_dir / "job.json");
  std::string name = base;
  for (int n = 2; ::mkdirat(history.get(), name.c_str(), 0700) != 0; ++n) {
    if (errno != EEXIST || n > 1000) return ErrnoStatus("mkdir history/" + name).WithContext(ctx);
    name = base + "-" + std::to_string(n);
  }
  store::UniqueFd dest(::openat(history.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dest) return ErrnoStatus("open history/" + name).WithContext(ctx);
  for (const char* entry : {"job.json", "events.jsonl", "tasks", "handoff.jsonl", "residency.jsonl", "metrics.jsonl"}) {
    struct stat st;
    if (::fstatat(run.get(), entry, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // not there
    if (::renameat(run.get(), entry, dest.get(), entry) != 0)
      return ErrnoStatus(std::string("move ") + entry + " to history/" + name).WithContext(ctx);
  }
  log::Info("jobs", "previous run archived run_dir={} to=history/{}", run_dir.string(), name);
  return Status::Ok();
}

// The run dir as the file system resolves it (symlinks, ".."), for comparing.
fs::path ResolvedDir(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::path(dir), ec);
  if (ec) p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "a/b/" -> "a/b"
  return p;
}

// One contains the other (or they are the same): the jobs would share files.
bool DirsOverlap(const fs::path& a, const fs::path& b) {
  auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return ia == a.end() || ib == b.end();
}

// Creates `dir` if needed; a dir this creates is 0755 whatever the umask.
// One that exists must not be writable by others (they could replace what
// the job writes there).
Status PrepareDir(const fs::path& dir, bool must_be_private) {
  std::error_code ec;
  const bool existed = fs::exists(dir, ec);
  std::vector<fs::path> missing;  // outermost last
  for (fs::path p = fs::absolute(dir, ec).lexically_normal(); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    if (p.filename().empty()) continue;
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("create " + it->string());
    if (::chmod(it->c_str(), 0755) != 0) return ErrnoStatus("chmod " + it->string());  // whatever the umask
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus("stat " + dir.string());
  if (!existed || !must_be_private) {
    if ((st.st_mode & 07777) != 0755 && ::chmod(dir.c_str(), 0755) != 0) return ErrnoStatus("chmod " + dir.string());
  } else if (st.st_mode & S_IWOTH) {
    return FailedPrecondition("run_dir: " + dir.string() +
                              " is writable by every user; choose a directory only you can write");
  }
  return Status::Ok();
}

// Writes `text` to `path` as 0600 (tmp + fsync + rename): job.json holds the spec's environment.
Status WritePrivateFile(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  auto fd = store::WriteSyncedFile(tmp, text);
  if (!fd.ok()) {
    (void)store::RemoveIfExists(tmp);
    return fd.status();
  }
  return store::RenameDurably(tmp, path);
}

}  // namespace tandem::daemon
