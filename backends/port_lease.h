// Port leases (docs/jobspec.md "Environment", TANDEM_PORTS): tasks get
// ports from this registry, so replicas never collide with each other or with
// the kernel's ephemeral ports.
//
// - Ports come from a lease range (default 20000-32767, configurable) minus
//   the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range).
// - Each candidate is verified by binding it (TCP, 0.0.0.0 and 127.0.0.1,
//   SO_REUSEADDR off) before it is handed out; a port that is in use by
//   anything on the machine is skipped.
// - A port is never leased to two live owners. Owners are task ids.
// - Nor by two daemons on one machine (two `tandem run`s side by side, each
//   with its own registry): a leased port is also held as an exclusive
//   flock on lock_dir/<port>, released with the lease or when the daemon's
//   process ends (a daemon killed with -9 leaves no stale claim). A port
//   another process holds is skipped like a bound one. Without a usable
//   lock_dir (it cannot be created or written) the registry warns once and
//   leases without machine-wide claims, as before.
// - Release(owner) frees an owner's ports when its task ends; Adopt(owner,
//   ports) restores a known lease after a daemon restart (without binding:
//   the running task holds them; their claims are taken again where free).
// - Candidates are scanned round-robin from where the last lease stopped, so a
//   port just released (maybe still in TIME_WAIT) is reused last.
// Not thread-safe: owned by the daemon's io_context like the rest of its state.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tandem::backends {

struct PortRange {
  int first = 0;  // inclusive
  int last = -1;  // inclusive
  bool empty() const { return last < first; }
  bool contains(int p) const { return p >= first && p <= last; }
};

struct PortLeaseOptions {
  PortRange range{20000, 32767};
  // Where the kernel's ephemeral range is read from; a missing file means
  // "no ephemeral range to avoid".
  std::filesystem::path ephemeral_range_file = "/proc/sys/net/ipv4/ip_local_port_range";
  bool verify_by_binding = true;
  // Machine-wide claims (above); "" turns them off. Created mode 1777 (every
  // user's daemons share it, like /tmp).
  std::filesystem::path lock_dir = "/tmp/tandem-ports";
};

// An exclusive flock on one file, held until destroyed (or moved from).
class PortClaim {
 public:
  // Takes lock_dir/<port> without waiting; nullopt when another open file
  // holds it or the file cannot be opened.
  static std::optional<PortClaim> TryTake(const std::filesystem::path& lock_dir, int port);
  PortClaim(PortClaim&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  PortClaim& operator=(PortClaim&& other) noexcept;
  PortClaim(const PortClaim&) = delete;
  PortClaim& operator=(const PortClaim&) = delete;
  ~PortClaim();

 private:
  explicit PortClaim(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Reads "first last" from an ip_local_port_range file.
StatusOr<PortRange> ReadEphemeralRange(const std::filesystem::path& file);

// True if a TCP socket can bind `port` on 0.0.0.0 and on 127.0.0.1 now
// (SO_REUSEADDR off; the sockets are closed again).
bool PortIsFree(int port);

class PortLeaseRegistry {
 public:
  // Fails when the range is invalid or lies entirely inside the ephemeral range.
  static StatusOr<PortLeaseRegistry> Create(const PortLeaseOptions& options = {});

  // Leases `count` more ports to `owner` (an owner may lease more than once).
  // ResourceExhausted, with nothing leased, when not enough free ports exist.
  StatusOr<std::vector<int>> Lease(const std::string& owner, int count);

  // Frees every port of `owner`; a no-op for an unknown owner.
  void Release(const std::string& owner);

  // Records that `owner` holds `ports` (after a restart). AlreadyExists when
  // a port is held by another owner; InvalidArgument when out of 1..65535.
  // Ports outside the lease range are accepted (the range may have changed).
  Status Adopt(const std::string& owner, const std::vector<int>& ports);

  std::vector<int> PortsOf(const std::string& owner) const;
  size_t leased_count() const { return holder_.size(); }
  // The ranges candidates are drawn from (lease range minus ephemeral range).
  const std::vector<PortRange>& candidate_ranges() const { return ranges_; }

 private:
  PortLeaseRegistry() = default;
  int NextCandidate();  // advances the round-robin cursor

  std::vector<PortRange> ranges_;
  size_t total_ = 0;        // number of candidate ports
  size_t cursor_ = 0;       // index into the concatenated ranges
  bool verify_ = true;
  std::map<int, std::string> holder_;                 // port -> owner
  std::map<std::string, std::vector<int>> by_owner_;  // owner -> ports
  std::filesystem::path lock_dir_;                    // "" = no machine-wide claims
  std::map<int, PortClaim> claims_;                   // port -> its claim
};

}  // namespace tandem::backends
