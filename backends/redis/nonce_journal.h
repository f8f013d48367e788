// The agent's persisted nonce memory (docs/redis.md "Signed commands"): the
// nonces of accepted commands, kept in a small file in the agent's state
// directory so a command accepted before an agent restart is refused as a
// replay after it.
//
// Format: one line per accepted command, "<nonce> <entry id> <ts ms>\n",
// appended and fdatasync'd in batches (CommandVerifier::Flush, once per read
// of the command stream, before the commands run). Bounded: when the file
// holds more than twice the live entries (and more than 1024 lines) it is
// rewritten with only the live ones — to a temporary file, fsync'd, then
// renamed over the old one (and the directory fsync'd). Entries older than
// the verifier's horizon (twice the maximum message age) are dropped on load
// and on every rewrite; a malformed line (a torn last write) is skipped.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::backends::redis {

class NonceJournal {
 public:
  struct Entry {
    std::string nonce;
    std::string entry_id;
    long long ts_ms = 0;
  };

  // Opens (creating the directory and the file, mode 0600) `path`.
  static StatusOr<std::unique_ptr<NonceJournal>> Open(const std::filesystem::path& path);
  ~NonceJournal();
  NonceJournal(const NonceJournal&) = delete;
  NonceJournal& operator=(const NonceJournal&) = delete;

  // The entries in the file signed at or after `oldest_ms`.
  StatusOr<std::vector<Entry>> Load(long long oldest_ms);
  // Appends and fdatasyncs `entries`; rewrites the file with `live` first
  // when it has grown past twice live.size() (and 1024 lines).
  Status Append(const std::vector<Entry>& entries, const std::vector<Entry>& live);

  const std::filesystem::path& path() const { return path_; }

 private:
  explicit NonceJournal(std::filesystem::path path) : path_(std::move(path)) {}
  Status Rewrite(const std::vector<Entry>& live);

  std::filesystem::path path_;
  int fd_ = -1;
  size_t lines_ = 0;
};

}  // namespace tandem::backends::redis
