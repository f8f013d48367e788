// Signed agent commands (issue #6 "Security"; docs/redis.md "Signed
// commands"). Whoever can write to Redis must not be able to make an agent
// run a command, so every command the daemon writes to an agent's stream
// carries an HMAC-SHA256 under a cluster key that only the daemon and the
// agents hold (read from a file, never from a command line).
//
// A command stream entry has four fields:
//   msg    the command JSON, exactly the bytes that were signed
//   ts     the signer's wall clock in ms
//   nonce  32 hex digits from the OpenSSL RNG, new per command
//   sig    hex HMAC-SHA256(key, "tandem-cmd-v1\n" stream "\n" ts "\n" nonce "\n" msg)
// The stream key (<p>:agent:<node>:cmds) is part of the MAC, so a command
// signed for one node cannot be copied into another node's stream.
//
// The agent (CommandVerifier) refuses an entry that is unsigned, wrongly
// signed, older (or newer) than max_age against its own clock, or whose
// nonce it already accepted under a different stream entry id (a replay;
// the same entry delivered again after a reconnect is not a replay).
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "backends/redis/redis_conn.h"
#include "common/status.h"

namespace tandem::backends::redis {

class ClusterKey {
 public:
  // Reads the key file: its content without trailing whitespace, at least 16
  // bytes. Refuses a file that group or others may read (chmod 600).
  static StatusOr<ClusterKey> FromFile(const std::string& path);
  static ClusterKey FromBytes(std::string bytes) { return ClusterKey(std::move(bytes)); }
  const std::string& bytes() const { return bytes_; }

 private:
  explicit ClusterKey(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string bytes_;
};

// Hex HMAC-SHA256 over the canonical bytes of one command.
std::string CommandMac(const ClusterKey& key, const std::string& stream, long long ts_ms, const std::string& nonce,
                       const std::string& msg);

// The XADD field/value arguments ("msg", msg, "ts", ..., "nonce", ..., "sig", ...)
// of a command signed now for `stream`.
std::vector<std::string> SignCommand(const ClusterKey& key, const std::string& stream, const std::string& msg);

class CommandVerifier {
 public:
  CommandVerifier(ClusterKey key, std::string stream, std::chrono::milliseconds max_age)
      : key_(std::move(key)), stream_(std::move(stream)), max_age_(max_age) {}

  // Ok when `entry` is a correctly signed, fresh command not seen under
  // another entry id; PermissionDenied saying which check failed otherwise.
  // Records the nonce of an accepted entry. Not thread-safe.
  Status Verify(const StreamEntry& entry, long long now_ms);

 private:
  ClusterKey key_;
  std::string stream_;
  std::chrono::milliseconds max_age_;
  std::map<std::string, std::pair<std::string, long long>> seen_;  // nonce -> (entry id, ts)
};

}  // namespace tandem::backends::redis
