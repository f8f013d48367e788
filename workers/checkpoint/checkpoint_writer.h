// The transactional checkpoint writer (docs/weights.md "Checkpoints", issue
// #15 items 2 and 3). One checkpoint of step N is committed as:
//
//   1. Begin(N): mkdir <root>/.tmp-step-<N>-<pid>/;
//   2. Add*(relpath, ...): each file created there (O_EXCL, never through
//      a symlink), written, fsync'd and closed, its size and XXH64 noted;
//   3. Commit(metadata): manifest.json written LAST (sizes, digests, step,
//      weight version, the caller's metadata), fsync'd; every directory of
//      the temp tree fsync'd; a previous <root>/step-<N>/ (a step written
//      again after a resume) renamed aside to .trash-…; the temp directory
//      renamed to <root>/step-<N>/ (atomic); <root> fsync'd; then rotation.
//
// A crash anywhere leaves either no step-<N> (only a .tmp-…, which no
// reader looks at) or a whole one; the checkpoints before it are untouched
// until the new one is whole and durable.
//
// Errors (ENOSPC, EIO, EDQUOT, a failing callback, a bad path): the pending
// checkpoint is dead from then on: its temp directory is removed at once,
// the error names the file and the errno ("write <path>: No space left on
// device (ENOSPC)"), every later call on it fails, and nothing outside the
// temp directory was changed. An error after the rename (the fsync of the
// root, rotation) is returned too, but the new checkpoint stays in place.
//
// Rotation, after each commit of step N: checkpoints with a step above N
// belong to a timeline abandoned by a resume from an older one and are
// deleted (a reader would otherwise prefer them); of those below N, the
// newest keep-1 that pass Verify::kSizes are kept and every other one,
// valid or not, is deleted. Deleting is a rename to .trash-… and then a
// removal, so a half-deleted directory never looks like a checkpoint.
//
// Stale scratch directories (.tmp-… and .trash-… left by a killed writer)
// are removed by Open and by every Begin. The rule: by default, only those
// whose pid is not a live process on this host and is not our own (safe
// when several processes share a root on one host). With
// options.sole_writer, Open removes every one of them, ours included: the
// job's single checkpoint writer (actor rank 0) opens its root so, which is
// also right after a restart in a new container, where a stale pid may be
// reused by a live process. Pids mean nothing across hosts: a root on a
// shared file system written from several hosts must use sole_writer on
// the one writer.
//
// Not thread-safe; one writer per root (see above). Blocking (fsync):
// called from a worker's own thread, never from an event loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/checkpoint/checkpoint_digest.h"
#include "workers/checkpoint/checkpoint_fs.h"
#include "workers/checkpoint/checkpoint_manifest.h"

namespace tandem::checkpoint {

struct CheckpointWriterOptions {
  size_t keep = 2;           // whole checkpoints kept after a commit, the new one included (>= 1)
  bool sole_writer = false;  // the stale-scratch rule above
};

// A file being written through PendingCheckpoint::AddStream: bytes go to
// the file and through the digest in one pass.
class FileSink {
 public:
  Status Write(std::span<const std::byte> bytes);
  Status Write(std::string_view text) { return Write(std::as_bytes(std::span(text.data(), text.size()))); }
  uint64_t bytes_written() const { return bytes_; }

 private:
  friend class PendingCheckpoint;
  FileSink(int fd, std::string shown) : fd_(fd), shown_(std::move(shown)) {}
  int fd_;
  std::string shown_;
  Digester digester_;
  uint64_t bytes_ = 0;
};

// What Commit made.
struct CommittedCheckpoint {
  std::string path;  // <root>/step-<N>
  Manifest manifest;
};

// One checkpoint being written (move-only). Destroyed without a successful
// Commit, it removes its temp directory.
class PendingCheckpoint {
 public:
  PendingCheckpoint(PendingCheckpoint&& other) noexcept;
  PendingCheckpoint& operator=(PendingCheckpoint&&) = delete;
  PendingCheckpoint(const PendingCheckpoint&) = delete;
  ~PendingCheckpoint();

  // The temp directory (absolute or as the root was given).
  const std::string& dir() const { return tmp_; }
  uint64_t step() const { return step_; }

  // A file of these bytes.
  Status AddFile(std::string_view relpath, std::span<const std::byte> bytes);
  Status AddFile(std::string_view relpath, std::string_view text) {
    return AddFile(relpath, std::as_bytes(std::span(text.data(), text.size())));
  }
  // A file whose bytes `write` streams into the sink (digested as they pass).
  Status AddStream(std::string_view relpath, const std::function<Status(FileSink&)>& write);
  // A file that `write` creates itself at the absolute path it is given
  // (which does not exist yet; its parent does); then fsync'd, and read
  // back once for its size and digest.
  Status AddWrittenFile(std::string_view relpath, const std::function<Status(const std::string& path)>& write);
  // A directory `reldir` whose files `write` creates under the path it is
  // given (e.g. model::SavePretrained(model, path)); every regular file
  // found under it afterwards is fsync'd, read back and listed. A symlink
  // or special file there is an error.
  Status AddDirectory(std::string_view reldir, const std::function<Status(const std::string& path)>& write);

  // Writes the manifest and commits (the protocol above). At most once.
  StatusOr<CommittedCheckpoint> Commit(nlohmann::json metadata = nlohmann::json::object());

  // Removes the temp directory; later calls fail. Idempotent.
  void Abandon();

 private:
  friend class CheckpointWriter;
  PendingCheckpoint(std::string root, CheckpointWriterOptions options, uint64_t step, uint64_t weight_version,
                    std::string tmp);
  Status Usable() const;
  Status Fail(Status error);  // abandons, remembers, returns the error
  Status BeginFile(std::string_view relpath);  // checks the path, makes parents
  Status AddExisting(const std::string& relpath);  // fsync + read back a file the caller wrote
  Status Rotate(uint64_t new_step);

  std::string root_;
  CheckpointWriterOptions options_;
  uint64_t step_ = 0;
  uint64_t weight_version_ = 0;
  std::string tmp_;
  std::map<std::string, ManifestFile> files_;
  Status failed_;
  bool done_ = false;  // committed or abandoned
};

class CheckpointWriter {
 public:
  // Creates `root` (and its parents) when absent and removes stale scratch
  // directories (the rule above). keep must be >= 1.
  static StatusOr<CheckpointWriter> Open(std::string root, CheckpointWriterOptions options = {});

  // Starts step `step`: removes stale scratch directories (never ours), then
  // creates the temp directory.
  StatusOr<PendingCheckpoint> Begin(uint64_t step, uint64_t weight_version);

  const std::string& root() const { return root_; }

 private:
  CheckpointWriter(std::string root, CheckpointWriterOptions options)
      : root_(std::move(root)), options_(options) {}
  std::string root_;
  CheckpointWriterOptions options_;
};

// Removes the stale scratch directories of `root`: with `all`, every one;
// else those whose pid is neither alive nor ours. Returns how many.
StatusOr<size_t> RemoveStaleScratch(const std::string& root, bool all);

}  // namespace tandem::checkpoint
