// DurableLog on POSIX files: recovery, group commit and compaction
// (durable_log.h, issue #2 "Durable job store"; formats in journal_format.h).
//
// Threads. Everything public runs on the io thread. Append serializes the
// record and write(2)s the line at once; one sync thread owned by the log
// waits for "written > durable", fdatasyncs the journal once for all records
// written so far (group commit), publishes the new durable mark and posts a
// delivery to the io_context, which runs the pending callbacks in append
// order. The io thread never waits for an fsync except in Flush and Compact.
// Failures are not sticky. A failed write(2) is taken back at once
// (ftruncate to the end of the last whole line) and refused to its caller
// only. A failed fsync refuses every record not yet durable; the next append
// (or Headroom, Compact) first truncates the journal back to the last
// durable record and fsyncs that ("Repair"), then goes on, so the log comes
// back by itself when the disk has space again. Records are never reordered:
// a record after a refused one is refused too until the Repair.
//
// Headroom. The log keeps kHeadroomBytes allocated past the journal's end
// (fallocate KEEP_SIZE), topped up after appends: when the disk fills up,
// records about what already happened (a task started, a task exited) still
// fit, while Headroom() tells the owner to start nothing new.
//
// Compaction protocol. snapshot.json and journal.log each carry a generation
// G. A journal continues the snapshot of the same generation; a journal of a
// lower generation than the snapshot is superseded (its records are already
// in the snapshot). Compact(state) at generation G:
//   1. Flush: every record so far is durable in journal G.
//   2. write snapshot.json.tmp (generation G+1, checksummed), fsync it.
//   3. rename it over snapshot.json, fsync the directory.   <- commit point
//   4. write journal.log.tmp = header of G+1, fsync, rename over journal.log,
//      fsync the directory; append to it from now on.
// A crash before 3 leaves snapshot G + journal G (tmp files are removed on
// Open). A crash between 3 and 4 leaves snapshot G+1 + journal G: recovery
// drops journal G as superseded (with a warning) and starts journal G+1, so no
// record is applied twice. After 4 the state is snapshot G+1 + journal G+1.
// The directory fsync in 3 orders the snapshot rename before the journal's,
// so a journal newer than the snapshot means files were lost: kDataLoss.
// Any failure after 3 refuses appends until step 4 succeeds (retried by
// Repair): appending to journal G would write records that recovery discards.
//
// Recovery (Open): remove stale *.tmp, read the snapshot, parse the journal
// (journal_format.h), truncate a torn tail before the first append, so a new
// record never follows garbage, and fsync the journal: everything returned in
// Recovered is durable. The directory is flock'ed
// for as long as the log is open: a second process on it fails.
#include "orchestrator/store/durable_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "common/log.h"
#include "orchestrator/store/durable_file.h"
#include "orchestrator/store/journal_format.h"

namespace tandem::store {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// State shared by the io thread, the sync thread and posted deliveries.
struct SyncState {
  explicit SyncState(boost::asio::io_context& io_ctx) : io(io_ctx) {}

  boost::asio::io_context& io;
  fs::path journal_path;
  std::function<Status()> before_sync;

  std::mutex mu;
  std::condition_variable work_cv;     // wakes the sync thread
  std::condition_variable durable_cv;  // wakes Flush
  int fd = -1;                         // journal being appended to; swapped only when idle
  uint64_t written = 0;                // sequence number of the last record written
  off_t written_offset = 0;            // journal size after it
  uint64_t durable = 0;                // ... of the last record fsync'd
  off_t durable_offset = 0;            // journal size after it
  uint64_t syncs = 0;
  Status failure;                      // set on a failure until the io thread takes it back (Repair)
  bool syncing = false;                // the sync thread is between unlock and lock around an fsync
  bool stop = false;

  // io thread only.
  struct Pending {
    uint64_t seq;
    DurableLog::DurableCallback cb;
    std::optional<Status> fixed;  // a result known at Append time (or at Repair)
  };
  std::deque<Pending> pending;
  bool closed = false;
};

// Runs, in append order, every callback whose outcome is known.
void Deliver(const std::shared_ptr<SyncState>& s) {
  if (s->closed) return;
  uint64_t durable;
  Status failure;
  {
    std::lock_guard lk(s->mu);
    durable = s->durable;
    failure = s->failure;
  }
  while (!s->pending.empty() && !s->closed) {
    SyncState::Pending& p = s->pending.front();
    Status st;
    if (p.fixed) st = *p.fixed;
    else if (p.seq <= durable) st = Status::Ok();
    else if (!failure.ok()) st = failure;
    else break;
    DurableLog::DurableCallback cb = std::move(p.cb);
    s->pending.pop_front();
    cb(st);  // may Append, or even destroy the log (then `closed` stops us)
  }
}

void PostDeliver(const std::shared_ptr<SyncState>& s) {
  boost::asio::post(s->io, [s] { Deliver(s); });
}

void SyncLoop(std::shared_ptr<SyncState> s) {
  std::unique_lock lk(s->mu);
  for (;;) {
    s->work_cv.wait(lk, [&] { return s->stop || (s->written > s->durable && s->failure.ok()); });
    if (s->written <= s->durable || !s->failure.ok()) return;  // stopping, nothing left to sync
    const uint64_t target = s->written;
    const off_t target_offset = s->written_offset;
    const int fd = s->fd;
    s->syncing = true;
    lk.unlock();
    Status st = s->before_sync ? s->before_sync() : Status::Ok();
    if (st.ok()) st = SyncData(fd, s->journal_path);
    lk.lock();
    s->syncing = false;
    ++s->syncs;
    if (st.ok()) {
      s->durable = target;
      s->durable_offset = target_offset;
    } else if (s->failure.ok()) {
      s->failure = st.WithContext("journal sync failed; records not yet durable are refused");
      log::Error("store", "journal sync failed error={}", st.ToString());
    }
    s->durable_cv.notify_all();
    PostDeliver(s);
  }
}

class PosixDurableLog final : public DurableLog {
 public:
  PosixDurableLog(boost::asio::io_context& io, fs::path dir, UniqueFd dir_lock, UniqueFd journal,
                  uint64_t generation, uint64_t records, off_t end, const DurableLogOptions& options)
      : dir_(std::move(dir)),
        dir_lock_(std::move(dir_lock)),
        journal_(std::move(journal)),
        generation_(generation),
        since_compaction_(records),
        end_offset_(end),
        s_(std::make_shared<SyncState>(io)) {
    s_->journal_path = dir_ / kJournalFileName;
    s_->before_sync = options.before_sync;
    s_->fd = journal_.get();
    s_->written_offset = s_->durable_offset = end;  // Open made everything there durable
    (void)Reserve();
    sync_thread_ = std::thread(SyncLoop, s_);
  }

  ~PosixDurableLog() override {
    {
      std::lock_guard lk(s_->mu);
      s_->stop = true;
    }
    s_->work_cv.notify_all();
    sync_thread_.join();
    s_->closed = true;
    s_->pending.clear();
  }

  void Append(const json& record, DurableCallback on_durable) override {
    auto cb = std::make_shared<DurableCallback>(std::move(on_durable));
    if (Status st = Write(record, [cb](Status r) { if (*cb) (*cb)(r); }); !st.ok())
      Fixed(std::move(*cb), st);
  }

  Status Write(const json& record, DurableCallback on_durable) override {
    if (!record.is_object()) {
      return InvalidArgument("journal record must be a JSON object, got " + std::string(record.type_name()));
    }
    std::string text;
    try {
      text = record.dump();
    } catch (const json::exception& e) {
      return InvalidArgument(std::string("journal record: ") + e.what());
    }
    TANDEM_RETURN_IF_ERROR(Repair(), "journal");

    const std::string line = EncodeLine(text);
    if (Status st = WriteAll(journal_.get(), line, s_->journal_path); !st.ok()) {
      // Take the partial line back so that the next record does not follow
      // garbage; if even that fails, Repair truncates before the next write.
      if (::ftruncate(journal_.get(), end_offset_) != 0) Poison(st.WithContext("journal write failed"));
      log::Warn("store", "journal write failed error={}", st.ToString());
      return st.WithContext("journal write failed");
    }
    end_offset_ += static_cast<off_t>(line.size());
    ++appends_;
    bytes_ += line.size();
    ++since_compaction_;
    uint64_t seq;
    {
      std::lock_guard lk(s_->mu);
      seq = ++s_->written;
      s_->written_offset = end_offset_;
    }
    s_->work_cv.notify_one();
    if (on_durable) s_->pending.push_back({seq, std::move(on_durable), std::nullopt});
    if (reserved_end_ < end_offset_ + static_cast<off_t>(kHeadroomBytes / 2)) (void)Reserve();
    return Status::Ok();
  }

  Status Headroom() override {
    TANDEM_RETURN_IF_ERROR(Repair(), "journal");
    TANDEM_RETURN_IF_ERROR(Reserve(), "journal");  // cheap where the range is allocated already
    // And as much again free beyond the reserve: new work must not eat into it.
    struct statvfs vfs;
    if (::fstatvfs(journal_.get(), &vfs) != 0) return Status::Ok();  // cannot tell: promise nothing
    const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (free_bytes < kHeadroomBytes)
      return ResourceExhausted(fmt::format("journal: no space left on the file system of {} ({} bytes free, "
                                           "new work needs {})",
                                           s_->journal_path.string(), free_bytes, kHeadroomBytes));
    return Status::Ok();
  }

  Status Flush() override {
    std::unique_lock lk(s_->mu);
    const uint64_t target = s_->written;
    s_->durable_cv.wait(lk, [&] { return s_->durable >= target || !s_->failure.ok(); });
    return s_->failure;
  }

  Status Compact(const json& snapshot) override {
    std::string state_text;
    try {
      state_text = snapshot.dump();
    } catch (const json::exception& e) {
      return InvalidArgument(std::string("compact: snapshot: ") + e.what());
    }
    TANDEM_RETURN_IF_ERROR(Repair(), "compact");
    TANDEM_RETURN_IF_ERROR(Flush(), "compact");
    const uint64_t gen = generation_ + 1;
    const fs::path snap = dir_ / kSnapshotFileName;
    const fs::path snap_tmp = dir_ / (std::string(kSnapshotFileName) + std::string(kTmpSuffix));
    {
      StatusOr<UniqueFd> tmp = WriteSyncedFile(snap_tmp, EncodeSnapshot(gen, state_text));
      if (!tmp.ok()) {
        (void)RemoveIfExists(snap_tmp);
        return tmp.status().WithContext("compact: write snapshot");
      }
    }
    if (Status st = RenameDurably(snap_tmp, snap); !st.ok()) {
      if (std::error_code ec; fs::exists(snap_tmp, ec) || ec) {
        // Not renamed: snapshot G and journal G still hold; nothing changed.
        (void)RemoveIfExists(snap_tmp);
        return st.WithContext("compact: install snapshot");
      }
      // Renamed, but the directory fsync failed: journal G is superseded
      // either way; go on to restart the journal (it fsyncs the directory).
      log::Warn("store", "compact: snapshot installed but directory sync failed error={}", st.ToString());
    }
    // Commit point passed: snapshot G+1 is the truth; now restart the journal.
    restart_generation_ = gen;
    TANDEM_RETURN_IF_ERROR(RestartJournal(), "compact");
    since_compaction_ = 0;
    ++compactions_;
    log::Info("store", "compacted journal generation={} snapshot_bytes={}", gen, state_text.size());
    return Status::Ok();
  }

  uint64_t records_since_compaction() const override { return since_compaction_; }

  DurableLogStats stats() const override {
    DurableLogStats st;
    st.appends = appends_;
    st.bytes = bytes_;
    st.compactions = compactions_;
    st.generation = generation_;
    std::lock_guard lk(s_->mu);
    st.syncs = s_->syncs;
    return st;
  }

 private:
  Status Failure() const {
    std::lock_guard lk(s_->mu);
    return s_->failure;
  }

  void Poison(const Status& st) {
    {
      std::lock_guard lk(s_->mu);
      if (s_->failure.ok()) s_->failure = st;
    }
    log::Error("store", "durable log failed error={}", st.ToString());
    s_->work_cv.notify_all();
    s_->durable_cv.notify_all();
    PostDeliver(s_);
  }

  // Queues a callback whose result is already known, behind earlier ones.
  void Fixed(DurableCallback cb, Status st) {
    if (!cb) return;
    s_->pending.push_back({0, std::move(cb), std::move(st)});
    PostDeliver(s_);
  }

  // After a failure: fail every record not durable, cut the journal back to
  // the last durable record and fsync that, so appending can go on. Ok when
  // there was nothing to take back.
  Status Repair() {
    std::unique_lock lk(s_->mu);
    if (s_->failure.ok()) return Status::Ok();
    if (s_->syncing) return s_->failure;  // the sync thread still holds the fd; next time
    const Status failure = s_->failure;
    const uint64_t durable = s_->durable;
    const off_t durable_offset = s_->durable_offset;
    lk.unlock();
    if (restart_generation_) {
      if (Status st = RestartJournal(); !st.ok()) return failure;
    } else {
      if (::ftruncate(journal_.get(), durable_offset) != 0) return failure;
      if (!SyncData(journal_.get(), s_->journal_path).ok()) return failure;
      end_offset_ = durable_offset;
      reserved_end_ = 0;  // the truncate freed the reserve
    }
    for (auto& p : s_->pending)
      if (!p.fixed && p.seq > durable) p.fixed = failure;
    lk.lock();
    s_->written = s_->durable;
    s_->written_offset = s_->durable_offset = end_offset_;
    s_->failure = Status::Ok();
    lk.unlock();
    log::Warn("store", "journal recovered from a failure; records not yet durable were refused error=\"{}\"",
              failure.ToString());
    PostDeliver(s_);  // the refused records' callbacks
    (void)Reserve();
    return Status::Ok();
  }

  // Step 4 of compaction: an empty journal of restart_generation_ replaces
  // the old one. On failure the log refuses appends (failure set) until a
  // later Repair gets here again.
  Status RestartJournal() {
    const uint64_t gen = *restart_generation_;
    const fs::path journal_tmp = dir_ / (std::string(kJournalFileName) + std::string(kTmpSuffix));
    const std::string header = EncodeJournalHeader(gen);
    StatusOr<UniqueFd> fresh = WriteSyncedFile(journal_tmp, header);
    Status st = fresh.status();
    if (st.ok()) st = RenameDurably(journal_tmp, s_->journal_path);
    if (!st.ok()) {
      (void)RemoveIfExists(journal_tmp);
      Poison(st.WithContext("compact: restart journal after the snapshot"));
      return Failure();
    }
    {
      std::lock_guard lk(s_->mu);  // the sync thread is idle (failure set or nothing to sync)
      journal_ = std::move(fresh).value();
      s_->fd = journal_.get();
      s_->written = s_->durable;
      s_->written_offset = s_->durable_offset = static_cast<off_t>(header.size());
      s_->failure = Status::Ok();
    }
    end_offset_ = static_cast<off_t>(header.size());
    reserved_end_ = 0;
    generation_ = gen;
    restart_generation_.reset();
    (void)Reserve();
    return Status::Ok();
  }

  // Allocates kHeadroomBytes past the end of the journal (not changing its size).
  Status Reserve() {
    if (!reserve_supported_) return Status::Ok();
    const off_t target = end_offset_ + static_cast<off_t>(kHeadroomBytes);
    int rc;
    do rc = ::fallocate(journal_.get(), FALLOC_FL_KEEP_SIZE, end_offset_, target - end_offset_);
    while (rc != 0 && errno == EINTR);
    if (rc == 0) {
      reserved_end_ = target;
      return Status::Ok();
    }
    if (errno == EOPNOTSUPP || errno == ENOSYS) {
      reserve_supported_ = false;
      log::Info("store", "journal space cannot be reserved on this file system (fallocate unsupported)");
      return Status::Ok();
    }
    return ErrnoStatus("reserve " + std::to_string(kHeadroomBytes) + " bytes of journal headroom in " +
                       s_->journal_path.string());
  }

  const fs::path dir_;
  UniqueFd dir_lock_;  // flock'ed while open
  UniqueFd journal_;
  uint64_t generation_;
  std::optional<uint64_t> restart_generation_;  // set while step 4 of a compaction is owed
  uint64_t since_compaction_;
  off_t end_offset_ = 0;
  off_t reserved_end_ = 0;       // allocated (fallocate) up to here
  bool reserve_supported_ = true;
  uint64_t appends_ = 0;
  uint64_t bytes_ = 0;
  uint64_t compactions_ = 0;
  std::shared_ptr<SyncState> s_;
  std::thread sync_thread_;
};

// Creates journal.log of `generation` (empty) by tmp + fsync + rename.
StatusOr<UniqueFd> StartJournal(const fs::path& dir, uint64_t generation) {
  const fs::path tmp = dir / (std::string(kJournalFileName) + std::string(kTmpSuffix));
  TANDEM_ASSIGN_OR_RETURN(UniqueFd fd, WriteSyncedFile(tmp, EncodeJournalHeader(generation)),
                          "start journal");
  TANDEM_RETURN_IF_ERROR(RenameDurably(tmp, dir / kJournalFileName), "start journal");
  return fd;
}

}  // namespace

StatusOr<std::unique_ptr<DurableLog>> DurableLog::Open(boost::asio::io_context& io, const fs::path& dir,
                                                       Recovered* out) {
  return Open(io, dir, out, DurableLogOptions{});
}

StatusOr<std::unique_ptr<DurableLog>> DurableLog::Open(boost::asio::io_context& io, const fs::path& dir,
                                                       Recovered* out, const DurableLogOptions& options) {
  const std::string ctx = "open journal in " + dir.string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal("create " + dir.string() + ": " + ec.message()).WithContext(ctx);

  UniqueFd lock(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!lock) return ErrnoStatus("open " + dir.string()).WithContext(ctx);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return FailedPrecondition(dir.string() + " is in use by another open journal (flock)").WithContext(ctx);
    }
    return ErrnoStatus("flock " + dir.string()).WithContext(ctx);
  }
  for (std::string_view name : {kSnapshotFileName, kJournalFileName}) {
    TANDEM_RETURN_IF_ERROR(RemoveIfExists(dir / (std::string(name) + std::string(kTmpSuffix))), ctx);
  }

  Recovered rec;
  uint64_t generation = 0;
  TANDEM_ASSIGN_OR_RETURN(std::optional<std::string> snap_bytes, ReadFileIfExists(dir / kSnapshotFileName), ctx);
  if (snap_bytes) {
    TANDEM_ASSIGN_OR_RETURN(ParsedSnapshot snap, ParseSnapshot(*snap_bytes), ctx);
    generation = snap.generation;
    rec.snapshot = std::move(snap.state);
  }

  const fs::path journal_path = dir / kJournalFileName;
  TANDEM_ASSIGN_OR_RETURN(std::optional<std::string> journal_bytes, ReadFileIfExists(journal_path), ctx);
  bool start_new = true;
  std::optional<uint64_t> truncate_to;
  if (!journal_bytes) {
    if (snap_bytes) rec.warnings.push_back("journal.log: missing; starting an empty journal after the snapshot");
  } else {
    TANDEM_ASSIGN_OR_RETURN(ParsedJournal pj, ParseJournal(*journal_bytes, kJournalFileName), ctx);
    if (!pj.generation) {
      rec.warnings.push_back("journal.log: empty (no header); starting a new journal");
    } else if (*pj.generation < generation) {
      rec.warnings.push_back(fmt::format(
          "journal.log: generation {} superseded by snapshot generation {} (compaction was interrupted); "
          "its {} records are already in the snapshot",
          *pj.generation, generation, pj.records.size()));
    } else if (*pj.generation > generation) {
      return DataLoss(fmt::format("journal.log has generation {} but snapshot.json has {}; the snapshot "
                                  "it continues is missing",
                                  *pj.generation, snap_bytes ? std::to_string(generation) : "none"))
          .WithContext(ctx);
    } else {
      start_new = false;
      rec.records = std::move(pj.records);
      if (pj.warning) rec.warnings.push_back(*pj.warning);
      if (pj.good_bytes < journal_bytes->size()) truncate_to = pj.good_bytes;
    }
  }

  UniqueFd journal;
  off_t end = 0;
  if (start_new) {
    TANDEM_ASSIGN_OR_RETURN(journal, StartJournal(dir, generation), ctx);
    end = static_cast<off_t>(EncodeJournalHeader(generation).size());
  } else {
    journal.Reset(::open(journal_path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    if (!journal) return ErrnoStatus("open " + journal_path.string()).WithContext(ctx);
    end = static_cast<off_t>(truncate_to.value_or(journal_bytes->size()));
    if (truncate_to && ::ftruncate(journal.get(), end) != 0) {
      return ErrnoStatus("truncate torn tail of " + journal_path.string()).WithContext(ctx);
    }
    // What we recovered may have been in the page cache only (the previous
    // process died before its fsync); the owner acts on it, so make it durable.
    TANDEM_RETURN_IF_ERROR(SyncData(journal.get(), journal_path), ctx);
    // Likewise the names: the last compaction may have died before its directory fsync.
    TANDEM_RETURN_IF_ERROR(SyncDir(dir), ctx);
  }
  for (const std::string& w : rec.warnings) log::Warn("store", "recovery dir={} warning=\"{}\"", dir.string(), w);
  log::Info("store", "recovered dir={} generation={} snapshot={} records={}", dir.string(), generation,
            !rec.snapshot.is_null(), rec.records.size());

  auto log_impl = std::make_unique<PosixDurableLog>(io, dir, std::move(lock), std::move(journal), generation,
                                                    rec.records.size(), end, options);
  if (out) *out = std::move(rec);
  return std::unique_ptr<DurableLog>(std::move(log_impl));
}

}  // namespace tandem::store
