// The transactional checkpoint writer (see checkpoint_writer.h for the protocol).
#include "workers/checkpoint/checkpoint_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

#include "common/log.h"
#include "workers/checkpoint/checkpoint_layout.h"
#include "workers/checkpoint/checkpoint_reader.h"

namespace tandem::checkpoint {
namespace {

namespace fs = std::filesystem;
constexpr size_t kReadChunk = 4u << 20;

std::string Q(std::string_view s) { return "\"" + std::string(s) + "\""; }

// Creates `path` for writing: new (O_EXCL), not through a symlink.
StatusOr<Fd> CreateFile(const std::string& path) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return FsError("create " + path, errno);
  return fd;
}

// Renames `from` to `to` (both under one directory).
Status Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return FsError("rename " + from + " to " + to, errno);
  return Status::Ok();
}

// Every directory under `dir` (not `dir` itself), deepest first.
StatusOr<std::vector<std::string>> SubdirsOf(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const auto st = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_directory(st)) out.push_back(it->path().string());
  }
  if (ec) return FsError("list " + dir, ec.value());
  std::reverse(out.begin(), out.end());
  return out;
}

// Renames a checkpoint or scratch dir aside and removes it.
Status DeleteDir(const std::string& root, const std::string& name, uint64_t step) {
  const std::string trash = root + "/" + TrashDirName(step, ::getpid());
  TANDEM_RETURN_IF_ERROR(RemoveTree(trash));  // ours from an earlier failed removal
  TANDEM_RETURN_IF_ERROR(Rename(root + "/" + name, trash));
  return RemoveTree(trash);
}

}  // namespace

// --- FileSink

// In pieces of kWritePiece: each is hashed right after it is written, while
// it is in the CPU's cache, and one write(2) of 64 MiB was measured 3-7x
// slower than 16 of 4 MiB here (docs/benchmarks.md "Checkpoints").
Status FileSink::Write(std::span<const std::byte> bytes) {
  constexpr size_t kWritePiece = 4u << 20;
  while (!bytes.empty()) {
    const auto piece = bytes.first(std::min(kWritePiece, bytes.size()));
    TANDEM_RETURN_IF_ERROR(WriteAll(fd_, piece, shown_));
    digester_.Update(piece);
    bytes_ += piece.size();
    bytes = bytes.subspan(piece.size());
  }
  return Status::Ok();
}

// --- stale scratch

StatusOr<size_t> RemoveStaleScratch(const std::string& root, bool all) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(root.c_str()), &::closedir);
  if (!d) return FsError("open checkpoint root " + root, errno);
  std::vector<std::pair<std::string, int64_t>> stale;
  errno = 0;
  while (const dirent* e = ::readdir(d.get())) {
    const auto s = ParseScratchDirName(e->d_name);
    if (s && (all || (s->pid != ::getpid() && !ProcessAlive(s->pid)))) stale.emplace_back(e->d_name, s->pid);
    errno = 0;
  }
  if (errno != 0) return FsError("list checkpoint root " + root, errno);
  for (const auto& [name, pid] : stale) {
    log::Info("checkpoint", "removing stale {} dir={} pid={}", name.starts_with(".tmp-") ? "temp" : "trash",
              root + "/" + name, pid);
    TANDEM_RETURN_IF_ERROR(RemoveTree(root + "/" + name));
  }
  return stale.size();
}

// --- CheckpointWriter

StatusOr<CheckpointWriter> CheckpointWriter::Open(std::string root, CheckpointWriterOptions options) {
  if (options.keep < 1) return InvalidArgument("checkpoint writer: keep must be at least 1");
  if (root.empty()) return InvalidArgument("checkpoint writer: empty root");
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return FsError("create checkpoint root " + root, ec.value());
  TANDEM_RETURN_IF_ERROR(RemoveStaleScratch(root, options.sole_writer).status(), "open checkpoint root");
  return CheckpointWriter(std::move(root), options);
}

StatusOr<PendingCheckpoint> CheckpointWriter::Begin(uint64_t step, uint64_t weight_version) {
  if (step > kMaxStep || weight_version > kMaxStep)
    return InvalidArgument("checkpoint: step or weight version above " + std::to_string(kMaxStep));
  TANDEM_RETURN_IF_ERROR(RemoveStaleScratch(root_, /*all=*/false).status(), "begin checkpoint");
  std::string tmp = root_ + "/" + TempDirName(step, ::getpid());
  if (::mkdir(tmp.c_str(), 0755) != 0) {
    if (errno != EEXIST) return FsError("mkdir " + tmp, errno);
    // Ours, from a pid reused after a restart: nothing can be using it.
    TANDEM_RETURN_IF_ERROR(RemoveTree(tmp));
    if (::mkdir(tmp.c_str(), 0755) != 0) return FsError("mkdir " + tmp, errno);
  }
  return PendingCheckpoint(root_, options_, step, weight_version, std::move(tmp));
}

// --- PendingCheckpoint

PendingCheckpoint::PendingCheckpoint(std::string root, CheckpointWriterOptions options, uint64_t step,
                                     uint64_t weight_version, std::string tmp)
    : root_(std::move(root)), options_(options), step_(step), weight_version_(weight_version), tmp_(std::move(tmp)) {}

PendingCheckpoint::PendingCheckpoint(PendingCheckpoint&& o) noexcept
    : root_(std::move(o.root_)),
      options_(o.options_),
      step_(o.step_),
      weight_version_(o.weight_version_),
      tmp_(std::move(o.tmp_)),
      files_(std::move(o.files_)),
      failed_(std::move(o.failed_)),
      done_(std::exchange(o.done_, true)) {}

PendingCheckpoint::~PendingCheckpoint() { Abandon(); }

void PendingCheckpoint::Abandon() {
  if (done_) return;
  done_ = true;
  if (const Status s = RemoveTree(tmp_); !s.ok()) log::Warn("checkpoint", "abandon: {}", s.message());
}

Status PendingCheckpoint::Usable() const {
  if (!failed_.ok()) return FailedPrecondition("checkpoint " + tmp_ + " failed earlier: " + failed_.message());
  if (done_) return FailedPrecondition("checkpoint " + tmp_ + " was already committed or abandoned");
  return Status::Ok();
}

Status PendingCheckpoint::Fail(Status error) {
  failed_ = error;
  Abandon();
  log::Error("checkpoint", "step {} failed, temp dir removed: {}", step_, error.message());
  return error;
}

Status PendingCheckpoint::BeginFile(std::string_view relpath) {
  if (Status s = ValidateRelativePath(relpath); !s.ok()) return s.WithContext("checkpoint file");
  if (files_.contains(std::string(relpath))) return AlreadyExists("checkpoint file " + Q(relpath) + " added twice");
  return MakeParents(tmp_, relpath);
}

Status PendingCheckpoint::AddFile(std::string_view relpath, std::span<const std::byte> bytes) {
  return AddStream(relpath, [&](FileSink& sink) { return sink.Write(bytes); });
}

Status PendingCheckpoint::AddStream(std::string_view relpath, const std::function<Status(FileSink&)>& write) {
  TANDEM_RETURN_IF_ERROR(Usable());
  if (Status s = BeginFile(relpath); !s.ok()) return Fail(s);
  const std::string path = tmp_ + "/" + std::string(relpath);
  auto fd = CreateFile(path);
  if (!fd.ok()) return Fail(fd.status());
  FileSink sink(fd->get(), path);
  if (Status s = write(sink); !s.ok()) return Fail(s.WithContext("checkpoint file " + Q(relpath)));
  if (Status s = Fsync(fd->get(), path); !s.ok()) return Fail(s);
  if (Status s = fd->Close(path); !s.ok()) return Fail(s);
  files_[std::string(relpath)] = ManifestFile{std::string(relpath), sink.bytes_, sink.digester_.Digest()};
  return Status::Ok();
}

Status PendingCheckpoint::AddExisting(const std::string& relpath) {
  const std::string path = tmp_ + "/" + relpath;
  Fd dir(::open(tmp_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return FsError("open directory " + tmp_, errno);
  TANDEM_ASSIGN_OR_RETURN(Fd fd, OpenBeneath(dir.get(), relpath, path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return FsError("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + " is not a regular file");
  TANDEM_RETURN_IF_ERROR(Fsync(fd.get(), path));
  std::vector<std::byte> buf(kReadChunk);
  Digester digester;
  uint64_t total = 0;
  while (true) {
    TANDEM_ASSIGN_OR_RETURN(size_t n, ReadFull(fd.get(), buf, path));
    digester.Update(std::span(buf.data(), n));
    total += n;
    if (n < buf.size()) break;
  }
  if (total > kMaxFileBytes) return InvalidArgument(path + ": above " + std::to_string(kMaxFileBytes) + " bytes");
  files_[relpath] = ManifestFile{relpath, total, digester.Digest()};
  return Status::Ok();
}

Status PendingCheckpoint::AddWrittenFile(std::string_view relpath,
                                         const std::function<Status(const std::string& path)>& write) {
  TANDEM_RETURN_IF_ERROR(Usable());
  if (Status s = BeginFile(relpath); !s.ok()) return Fail(s);
  const std::string path = tmp_ + "/" + std::string(relpath);
  if (Status s = write(path); !s.ok()) return Fail(s.WithContext("checkpoint file " + Q(relpath)));
  if (Status s = AddExisting(std::string(relpath)); !s.ok()) return Fail(s);
  return Status::Ok();
}

Status PendingCheckpoint::AddDirectory(std::string_view reldir,
                                       const std::function<Status(const std::string& path)>& write) {
  TANDEM_RETURN_IF_ERROR(Usable());
  if (Status s = BeginFile(reldir); !s.ok()) return Fail(s);
  const std::string path = tmp_ + "/" + std::string(reldir);
  if (::mkdir(path.c_str(), 0755) != 0) return Fail(FsError("mkdir " + path, errno));
  if (Status s = write(path); !s.ok()) return Fail(s.WithContext("checkpoint directory " + Q(reldir)));
  std::vector<std::string> found;
  std::error_code ec;
  fs::recursive_directory_iterator it(path, fs::directory_options::none, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const auto st = it->symlink_status(ec);
    if (ec) break;
    const std::string rel = std::string(reldir) + "/" + it->path().lexically_relative(path).generic_string();
    if (fs::is_directory(st)) continue;
    if (!fs::is_regular_file(st))
      return Fail(InvalidArgument("checkpoint directory " + Q(reldir) + ": " + Q(rel) +
                                  " is a symlink or special file"));
    if (Status s = ValidateRelativePath(rel); !s.ok()) return Fail(s.WithContext("checkpoint file"));
    if (files_.contains(rel)) return Fail(AlreadyExists("checkpoint file " + Q(rel) + " added twice"));
    found.push_back(rel);
  }
  if (ec) return Fail(FsError("list " + path, ec.value()));
  for (const std::string& rel : found) {
    if (Status s = AddExisting(rel); !s.ok()) return Fail(s);
  }
  return Status::Ok();
}

StatusOr<CommittedCheckpoint> PendingCheckpoint::Commit(nlohmann::json metadata) {
  TANDEM_RETURN_IF_ERROR(Usable());
  Manifest m;
  m.step = step_;
  m.weight_version = weight_version_;
  for (auto& [path, f] : files_) m.files.push_back(f);  // std::map: sorted by path
  m.metadata = std::move(metadata);
  auto text = ManifestJson(m);
  if (!text.ok()) return Fail(text.status().WithContext("checkpoint commit"));
  // The manifest, last, then every directory of the temp tree.
  const std::string manifest_path = tmp_ + "/" + std::string(kManifestFileName);
  {
    auto fd = CreateFile(manifest_path);
    if (!fd.ok()) return Fail(fd.status());
    if (Status s = WriteAll(fd->get(), std::as_bytes(std::span(text->data(), text->size())), manifest_path); !s.ok())
      return Fail(s);
    if (Status s = Fsync(fd->get(), manifest_path); !s.ok()) return Fail(s);
    if (Status s = fd->Close(manifest_path); !s.ok()) return Fail(s);
  }
  auto subdirs = SubdirsOf(tmp_);
  if (!subdirs.ok()) return Fail(subdirs.status());
  for (const std::string& d : *subdirs) {
    if (Status s = FsyncDir(d); !s.ok()) return Fail(s);
  }
  if (Status s = FsyncDir(tmp_); !s.ok()) return Fail(s);

  // Into place. A step written again (after a resume) replaces the old one.
  const std::string final_name = StepDirName(step_);
  const std::string final_path = root_ + "/" + final_name;
  const std::string aside = root_ + "/" + TrashDirName(step_, ::getpid());
  bool replaced = false;
  struct stat st {};
  if (::lstat(final_path.c_str(), &st) == 0) {
    if (Status s = RemoveTree(aside); !s.ok()) return Fail(s);
    if (Status s = Rename(final_path, aside); !s.ok()) return Fail(s);
    replaced = true;
  }
  if (Status s = Rename(tmp_, final_path); !s.ok()) {
    if (replaced) (void)Rename(aside, final_path);
    return Fail(s);
  }
  done_ = true;  // the temp dir is gone: it is the checkpoint now
  Status after = FsyncDir(root_);
  if (after.ok() && replaced) {
    log::Warn("checkpoint", "replaced an existing {} (a step written again)", final_path);
    after = RemoveTree(aside);
  }
  if (after.ok()) after = Rotate(step_);
  if (!after.ok()) {
    log::Error("checkpoint", "step {} committed to {} but: {}", step_, final_path, after.message());
    return after.WithContext("checkpoint " + final_path + " committed");
  }
  uint64_t total = 0;
  for (const auto& f : m.files) total += f.bytes;
  log::Info("checkpoint", "committed {} step={} weight_version={} files={} bytes={}", final_path, step_,
            weight_version_, m.files.size(), total);
  return CommittedCheckpoint{final_path, std::move(m)};
}

Status PendingCheckpoint::Rotate(uint64_t new_step) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<StepDir> dirs, ListStepDirs(root_), "rotate");
  size_t kept = 1;  // the new one
  for (const StepDir& d : dirs) {  // newest first
    if (d.step == new_step) continue;
    const std::string name = StepDirName(d.step);
    if (d.step > new_step) {
      log::Warn("checkpoint", "deleting {}: newer than the step just written (an abandoned timeline)", d.path);
    } else if (kept < options_.keep) {
      const auto m = ValidateCheckpoint(d.path, d.step, Verify::kSizes);
      if (m.ok()) {
        ++kept;
        continue;
      }
      log::Warn("checkpoint", "deleting {}: not valid ({})", d.path, m.status().message());
    } else {
      log::Info("checkpoint", "rotating out {} keep={}", d.path, options_.keep);
    }
    TANDEM_RETURN_IF_ERROR(DeleteDir(root_, name, d.step), "rotate");
  }
  return Status::Ok();
}

}  // namespace tandem::checkpoint
