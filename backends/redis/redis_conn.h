// A blocking Redis connection (hiredis 0.14) with AUTH from a password file
// (issue #6 "Security": the password never appears on a command line), used
// by the node agent's Redis thread and by the redis executor (redis_executor.h).
//
// RedisConfig comes from a URL `redis://[user@]host:port` plus a password
// file; TANDEM_REDIS_USER and TANDEM_REDIS_PASSWORD_FILE fill what the URL and
// flags leave out. Every command has a timeout (RedisConfig::timeout), so a
// partitioned server makes calls fail instead of hang. A connection that saw
// an I/O error is broken() and must be replaced (Connect again).
// Not thread-safe: one connection per thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

struct redisContext;

namespace tandem::backends::redis {

struct RedisConfig {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string user;           // empty: AUTH with the password only (or no AUTH)
  std::string password_file;  // empty: no AUTH
  std::chrono::milliseconds timeout{1000};  // connect and per-command

  // "redis://[user@]host[:port]"; user/password file default to
  // $TANDEM_REDIS_USER / $TANDEM_REDIS_PASSWORD_FILE.
  static StatusOr<RedisConfig> FromUrl(const std::string& url, const std::string& password_file = "");
  std::string Describe() const;  // "tandem@127.0.0.1:26379" (never the password)
};

// One reply, copied out of hiredis' reply object.
struct RedisReply {
  enum class Type { kString, kArray, kInteger, kNil, kStatus, kError };
  Type type = Type::kNil;
  std::string str;  // string, status and error replies
  long long integer = 0;
  std::vector<RedisReply> elements;

  bool is_nil() const { return type == Type::kNil; }
  bool is_array() const { return type == Type::kArray; }
};

class RedisConn {
 public:
  // Connects and authenticates; Unavailable when unreachable,
  // PermissionDenied when AUTH is refused.
  static StatusOr<std::unique_ptr<RedisConn>> Connect(const RedisConfig& config);
  ~RedisConn();
  RedisConn(const RedisConn&) = delete;
  RedisConn& operator=(const RedisConn&) = delete;

  // Runs one command. A Redis error reply is an error Status carrying the
  // server's text (e.g. "BUSYGROUP ..."); an I/O error also marks broken().
  StatusOr<RedisReply> Command(const std::vector<std::string>& args);
  // Changes the per-command timeout (XREAD ... BLOCK needs more than its block time).
  void SetTimeout(std::chrono::milliseconds timeout);
  bool broken() const { return broken_; }

 private:
  explicit RedisConn(redisContext* c) : c_(c) {}
  redisContext* c_;
  bool broken_ = false;
};

// Reads a password file: its first line without surrounding whitespace.
StatusOr<std::string> ReadPasswordFile(const std::string& path);

// For replies of XREAD/XREADGROUP: [[stream, [[id, [field, value, ...]], ...]], ...].
struct StreamEntry {
  std::string id;
  std::vector<std::pair<std::string, std::string>> fields;
  // The value of `name`, or "" when absent.
  std::string Field(const std::string& name) const;
};
std::vector<StreamEntry> ParseStreamReply(const RedisReply& reply);

}  // namespace tandem::backends::redis
