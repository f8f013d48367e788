// PortLeaseRegistry: see port_lease.h.
#include "backends/port_lease.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/log.h"

namespace tandem::backends {
namespace {

bool CanBind(int port, in_addr_t addr) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = addr;
  bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

StatusOr<PortRange> ReadEphemeralRange(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return NotFound("cannot read " + file.string());
  PortRange r;
  if (!(in >> r.first >> r.last) || r.first < 1 || r.last > 65535 || r.empty())
    return InvalidArgument("malformed port range in " + file.string());
  return r;
}

bool PortIsFree(int port) {
  return CanBind(port, htonl(INADDR_ANY)) && CanBind(port, htonl(INADDR_LOOPBACK));
}

std::optional<PortClaim> PortClaim::TryTake(const std::filesystem::path& lock_dir, int port) {
  const std::string path = (lock_dir / std::to_string(port)).string();
  // Read-only: any user may lock a file another user created (mode 0644).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return std::nullopt;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  return PortClaim(fd);
}

PortClaim& PortClaim::operator=(PortClaim&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

PortClaim::~PortClaim() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// The lock directory, created mode 1777 if missing; "" (claims off, with a
// warning) when it cannot be made or is not a writable directory.
std::filesystem::path UsableLockDir(const std::filesystem::path& dir) {
  if (dir.empty()) return dir;
  if (::mkdir(dir.c_str(), 01777) == 0) {
    ::chmod(dir.c_str(), 01777);  // past the umask: every user's daemons share it
  } else if (errno != EEXIST) {
    log::Warn("ports", "port claims off: cannot create {}: {}", dir.string(), std::strerror(errno));
    return {};
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::access(dir.c_str(), W_OK | X_OK) != 0) {
    log::Warn("ports", "port claims off: {} is not a directory this user can write", dir.string());
    return {};
  }
  return dir;
}

}  // namespace

StatusOr<PortLeaseRegistry> PortLeaseRegistry::Create(const PortLeaseOptions& options) {
  const PortRange r = options.range;
  if (r.empty() || r.first < 1 || r.last > 65535)
    return InvalidArgument("port lease range " + std::to_string(r.first) + "-" +
                           std::to_string(r.last) + ": expected 1 <= first <= last <= 65535");
  PortLeaseRegistry reg;
  reg.verify_ = options.verify_by_binding;
  reg.lock_dir_ = UsableLockDir(options.lock_dir);
  PortRange eph;  // empty unless the file says otherwise
  if (!options.ephemeral_range_file.empty()) {
    auto e = ReadEphemeralRange(options.ephemeral_range_file);
    if (e.ok()) {
      eph = *e;
    } else {
      log::Warn("ports", "no ephemeral range, not avoiding one: {}", e.status().message());
    }
  }
  if (eph.empty() || eph.last < r.first || eph.first > r.last) {
    reg.ranges_.push_back(r);
  } else {
    if (eph.first > r.first) reg.ranges_.push_back({r.first, eph.first - 1});
    if (eph.last < r.last) reg.ranges_.push_back({eph.last + 1, r.last});
  }
  for (const auto& c : reg.ranges_) reg.total_ += static_cast<size_t>(c.last - c.first + 1);
  if (reg.total_ == 0)
    return InvalidArgument("port lease range " + std::to_string(r.first) + "-" +
                           std::to_string(r.last) + " lies inside the ephemeral range " +
                           std::to_string(eph.first) + "-" + std::to_string(eph.last));
  return reg;
}

int PortLeaseRegistry::NextCandidate() {
  size_t i = cursor_;
  cursor_ = (cursor_ + 1) % total_;
  for (const auto& c : ranges_) {
    size_t n = static_cast<size_t>(c.last - c.first + 1);
    if (i < n) return c.first + static_cast<int>(i);
    i -= n;
  }
  return ranges_.front().first;  // unreachable: i < total_
}

StatusOr<std::vector<int>> PortLeaseRegistry::Lease(const std::string& owner, int count) {
  if (count < 0) return InvalidArgument("port lease: negative count");
  std::vector<int> got;
  got.reserve(static_cast<size_t>(count));
  for (size_t tried = 0; static_cast<int>(got.size()) < count && tried < total_; ++tried) {
    int p = NextCandidate();
    if (holder_.count(p)) continue;
    if (verify_ && !PortIsFree(p)) continue;
    if (!lock_dir_.empty()) {
      std::optional<PortClaim> claim = PortClaim::TryTake(lock_dir_, p);
      if (!claim) continue;  // another daemon on this machine leased it
      claims_.emplace(p, std::move(*claim));
    }
    got.push_back(p);
    holder_[p] = owner;  // held now so the rest of this loop skips it
  }
  if (static_cast<int>(got.size()) < count) {
    for (int p : got) {
      holder_.erase(p);
      claims_.erase(p);
    }
    return ResourceExhausted("port lease for " + owner + ": wanted " + std::to_string(count) +
                             " ports, only " + std::to_string(got.size()) +
                             " free in the lease range (" + std::to_string(holder_.size()) +
                             " leased)");
  }
  auto& mine = by_owner_[owner];
  mine.insert(mine.end(), got.begin(), got.end());
  return got;
}

void PortLeaseRegistry::Release(const std::string& owner) {
  auto it = by_owner_.find(owner);
  if (it == by_owner_.end()) return;
  for (int p : it->second) {
    holder_.erase(p);
    claims_.erase(p);
  }
  by_owner_.erase(it);
}

Status PortLeaseRegistry::Adopt(const std::string& owner, const std::vector<int>& ports) {
  for (int p : ports) {
    if (p < 1 || p > 65535) return InvalidArgument("adopt ports of " + owner + ": port " +
                                                   std::to_string(p) + " out of range");
    auto h = holder_.find(p);
    if (h != holder_.end() && h->second != owner)
      return AlreadyExists("adopt ports of " + owner + ": port " + std::to_string(p) +
                           " is leased to " + h->second);
  }
  auto& mine = by_owner_[owner];
  for (int p : ports) {
    if (holder_.count(p)) continue;  // already this owner's
    holder_[p] = owner;
    mine.push_back(p);
    // The task holds the port; the claim keeps other daemons' leases off it.
    if (lock_dir_.empty()) continue;
    if (std::optional<PortClaim> claim = PortClaim::TryTake(lock_dir_, p)) {
      claims_.emplace(p, std::move(*claim));
    } else {
      log::Warn("ports", "adopted port {} of {} is claimed by another process on this machine", p, owner);
    }
  }
  return Status::Ok();
}

std::vector<int> PortLeaseRegistry::PortsOf(const std::string& owner) const {
  auto it = by_owner_.find(owner);
  return it == by_owner_.end() ? std::vector<int>{} : it->second;
}

}  // namespace tandem::backends
