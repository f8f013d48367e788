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
//
// The same MAC signs what agents write back (docs/redis.md "Signed
// events"): events on <p>:events are stream entries like commands (the
// daemon verifies them with a CommandVerifier for the events stream); the
// node record, the signed copy of a task's state in its hash, log-tail
// replies and the agent's own task list are envelopes, a JSON object
// {"msg","ts","nonce","sig"} signed for the key they are stored at
// (SignEnvelope / OpenEnvelope), so a value copied to another key is refused.
//
// A verifier may keep its nonce memory in a file (nonce_journal.h), so a
// replay is refused also after the agent restarted.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/redis/nonce_journal.h"
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

// A JSON envelope {"msg":msg,"ts","nonce","sig"} of `msg` signed now for
// `domain` (the Redis key the envelope is stored at).
std::string SignEnvelope(const ClusterKey& key, const std::string& domain, const std::string& msg);

// The `msg` of an envelope made by SignEnvelope for `domain`;
// PermissionDenied when it is not one, is wrongly signed, or — with
// max_age > 0 — was signed more than max_age away from now_ms.
StatusOr<std::string> OpenEnvelope(const ClusterKey& key, const std::string& domain, const std::string& text,
                                   long long now_ms, std::chrono::milliseconds max_age);

class CommandVerifier {
 public:
  CommandVerifier(ClusterKey key, std::string stream, std::chrono::milliseconds max_age)
      : key_(std::move(key)), stream_(std::move(stream)), max_age_(max_age) {}

  // Keeps the nonce memory in `journal` from now on: loads what it holds
  // (entries older than twice max_age are dropped) and appends every
  // accepted nonce on Flush().
  Status UseJournal(std::unique_ptr<NonceJournal> journal, long long now_ms);

  // Ok when `entry` is a correctly signed, fresh command not seen under
  // another entry id; PermissionDenied saying which check failed otherwise.
  // Records the nonce of an accepted entry. Not thread-safe.
  Status Verify(const StreamEntry& entry, long long now_ms);

  // Writes the nonces accepted since the last Flush to the journal (fsync'd);
  // call before acting on them. Ok without a journal.
  Status Flush();

 private:
  ClusterKey key_;
  std::string stream_;
  std::chrono::milliseconds max_age_;
  std::map<std::string, std::pair<std::string, long long>> seen_;  // nonce -> (entry id, ts)
  std::unique_ptr<NonceJournal> journal_;
  std::vector<NonceJournal::Entry> unflushed_;
};

}  // namespace tandem::backends::redis
