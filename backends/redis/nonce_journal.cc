// Implements nonce_journal.h: an append-only file with atomic compaction.
#include "backends/redis/nonce_journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace tandem::backends::redis {
namespace {

Status WriteAll(int fd, const std::string& data, const std::string& what) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("write " + what, errno);
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

std::string Lines(const std::vector<NonceJournal::Entry>& entries) {
  std::string out;
  for (const auto& e : entries) out += e.nonce + " " + e.entry_id + " " + std::to_string(e.ts_ms) + "\n";
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<NonceJournal>> NonceJournal::Open(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return ErrnoStatus("nonce journal: create " + path.parent_path().string(), ec.value());
  std::unique_ptr<NonceJournal> j(new NonceJournal(path));
  j->fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (j->fd_ < 0) return ErrnoStatus("nonce journal: open " + path.string(), errno);
  return j;
}

NonceJournal::~NonceJournal() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<std::vector<NonceJournal::Entry>> NonceJournal::Load(long long oldest_ms) {
  std::ifstream in(path_);
  if (!in) return ErrnoStatus("nonce journal: read " + path_.string(), errno);
  std::vector<Entry> out;
  lines_ = 0;
  for (std::string line; std::getline(in, line);) {
    ++lines_;
    std::istringstream ss(line);
    Entry e;
    std::string extra;
    if (!(ss >> e.nonce >> e.entry_id >> e.ts_ms) || (ss >> extra)) continue;  // torn or foreign line
    if (e.ts_ms >= oldest_ms) out.push_back(std::move(e));
  }
  return out;
}

Status NonceJournal::Append(const std::vector<Entry>& entries, const std::vector<Entry>& live) {
  if (entries.empty()) return Status::Ok();
  if (lines_ + entries.size() > 1024 && lines_ + entries.size() > 2 * live.size()) return Rewrite(live);
  TANDEM_RETURN_IF_ERROR(WriteAll(fd_, Lines(entries), path_.string()), "nonce journal");
  if (::fdatasync(fd_) != 0) return ErrnoStatus("nonce journal: fdatasync " + path_.string(), errno);
  lines_ += entries.size();
  return Status::Ok();
}

Status NonceJournal::Rewrite(const std::vector<Entry>& live) {
  const std::filesystem::path tmp = path_.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("nonce journal: open " + tmp.string(), errno);
  Status st = WriteAll(fd, Lines(live), tmp.string());
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus("nonce journal: fsync " + tmp.string(), errno);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path_.c_str()) != 0) st = ErrnoStatus("nonce journal: rename " + tmp.string(), errno);
  TANDEM_RETURN_IF_ERROR(st, "nonce journal rewrite");
  if (int dir = ::open(path_.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
  int nfd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (nfd < 0) return ErrnoStatus("nonce journal: reopen " + path_.string(), errno);
  ::close(fd_);
  fd_ = nfd;
  lines_ = live.size();
  return Status::Ok();
}

}  // namespace tandem::backends::redis
