// The daemon's durable journal (issue #2, "Durable job store").
//
// Every state change of the daemon is one record appended to a journal file
// as one line, "<crc32c as 8 hex digits> <compact JSON>\n", the checksum
// taken over the JSON text. Records are fsync'd before they count: Append
// writes at once and the fsync runs on a worker thread, grouping every
// record appended meanwhile into one fsync (group commit); `on_durable`
// callbacks are posted back to the io_context after it.
//
// From time to time the owner calls Compact(snapshot) with the state that
// all records so far produce; the snapshot is written to a temporary file,
// fsync'd, renamed over snapshot.json, the directory fsync'd, and the journal
// restarted empty. Recovery = snapshot + the journal's records after it.
// Both files carry a generation number so that a crash between the two steps
// never applies a record twice (protocol in durable_log.cc).
//
// Recovery is strict about the middle and lenient about the end: a torn or
// corrupt *last* line (a crash during a write) is skipped with a warning; a
// corrupt line followed by valid ones is kDataLoss, since records after it
// cannot be trusted to apply to the right state.
//
// Files in `dir`: snapshot.json, journal.log (and *.tmp during compaction).
// The on-disk formats and the crash-safe compaction protocol (journal
// generations) are described in journal_format.h and durable_log.cc.
//
// Threading: every method is called on the io thread (the daemon is
// single-threaded); the log owns one sync thread that only runs fsync.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::store {

struct Recovered {
  nlohmann::json snapshot;                // null when there was none
  std::vector<nlohmann::json> records;    // journal records after the snapshot, in order
  std::vector<std::string> warnings;      // e.g. "journal.log:118: torn last record skipped"
};

// Knobs for Open. The default is what the daemon uses.
struct DurableLogOptions {
  // Fault injection for tests: runs on the sync thread before each fsync of
  // the journal; a non-ok result is treated as that fsync failing.
  std::function<Status()> before_sync;
};

// Counters since Open, for /metrics and tests.
struct DurableLogStats {
  uint64_t appends = 0;      // records written to the journal
  uint64_t syncs = 0;        // journal fsyncs (group commits); < appends under load
  uint64_t bytes = 0;        // journal bytes written
  uint64_t compactions = 0;
  uint64_t generation = 0;   // the journal generation now appended to
};

class DurableLog {
 public:
  using DurableCallback = std::function<void(Status)>;

  // Opens (creating `dir` if needed), recovers what is there into `out`, and
  // prepares to append. Fails with kDataLoss on corruption that is not a torn
  // tail (a torn tail is truncated away before the first append), and with
  // kFailedPrecondition while another DurableLog has `dir` open (flock).
  // `io` runs the callbacks and must outlive the log.
  static StatusOr<std::unique_ptr<DurableLog>> Open(boost::asio::io_context& io,
                                                    const std::filesystem::path& dir,
                                                    Recovered* out);
  static StatusOr<std::unique_ptr<DurableLog>> Open(boost::asio::io_context& io,
                                                    const std::filesystem::path& dir,
                                                    Recovered* out,
                                                    const DurableLogOptions& options);
  // Waits for the fsync in flight, then stops the sync thread. Callbacks not
  // yet run are dropped (never called): the owner is going away too.
  virtual ~DurableLog() = default;

  // Appends one record (a JSON object). The line is written before Append
  // returns; the fsync never runs on the calling thread. It is durable once
  // `on_durable(Ok)` runs. A record that could not be written or synced gets
  // the error and is not in the journal (recovery never returns it). A failure
  // is not sticky: the log takes back what was not durable (truncates the
  // journal to its last durable record) and tries again on the next append,
  // so it recovers on its own when space returns. A record that is not an
  // object, or not valid UTF-8, gets kInvalidArgument and is not written.
  // Callbacks run in append order.
  virtual void Append(const nlohmann::json& record, DurableCallback on_durable = {}) = 0;

  // Append, but a record that could not be written is refused at once: the
  // error is returned and `on_durable` is never called. Ok means the line is
  // written and `on_durable` will tell whether it became durable. For owners
  // that must not act on a record the journal does not hold.
  virtual Status Write(const nlohmann::json& record, DurableCallback on_durable = {}) = 0;

  // Whether new work may start: the journal has `kHeadroomBytes` allocated
  // past its end (fallocate, KEEP_SIZE; topped up here and by appends) and
  // the file system has as much again free (statvfs, f_bavail). The reserve
  // lets records that report what already happened (a task started, a task
  // exited) fit when the disk has just filled up, while Headroom() fails as
  // soon as the disk is (nearly) full: owners call it before starting
  // something new (accepting a job, launching tasks). The reserve part is
  // skipped where the file system cannot fallocate. Errors: ENOSPC
  // (kResourceExhausted), or the last failure if the log could not take it
  // back yet.
  virtual Status Headroom() = 0;
  static constexpr uint64_t kHeadroomBytes = 256 * 1024;

  // Blocks until everything appended so far is durable (or its fsync failed:
  // then the error). For shutdown and tests.
  virtual Status Flush() = 0;

  // Replaces snapshot + journal by `snapshot` (the state after every record
  // appended so far). Blocking; call rarely (the daemon does it every N records).
  // A failure before the new snapshot is in place leaves the log as it was; a
  // failure after it (restarting the journal) refuses appends until a later
  // append or Headroom() manages to restart the journal (the old one no longer
  // counts). Also the way an owner makes its whole state durable again after
  // records failed (the snapshot holds them).
  virtual Status Compact(const nlohmann::json& snapshot) = 0;

  // Records appended since the last Compact (or Open).
  virtual uint64_t records_since_compaction() const = 0;

  virtual DurableLogStats stats() const = 0;
};

// crc32c of `data` (Castagnoli), as used in journal lines.
uint32_t Crc32c(std::string_view data);

}  // namespace tandem::store
