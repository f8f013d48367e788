// Listing and validating checkpoints (see checkpoint_reader.h).
#include "workers/checkpoint/checkpoint_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>
#include <system_error>

#include "common/log.h"
#include "workers/checkpoint/checkpoint_digest.h"
#include "workers/checkpoint/checkpoint_fs.h"
#include "workers/checkpoint/checkpoint_layout.h"

namespace tandem::checkpoint {
namespace {

constexpr size_t kReadChunk = 4u << 20;

std::string Q(std::string_view s) { return "\"" + std::string(s) + "\""; }

StatusOr<std::string> ReadManifestText(int dir_fd, const std::string& dir) {
  const std::string shown = dir + "/" + std::string(kManifestFileName);
  auto fd = OpenBeneath(dir_fd, kManifestFileName, shown);
  if (!fd.ok()) {
    if (fd.status().code() == StatusCode::kNotFound)
      return DataLoss("missing manifest.json (an interrupted or partial checkpoint)");
    return DataLoss(fd.status().message());
  }
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return FsError("stat " + shown, errno);
  if (!S_ISREG(st.st_mode)) return DataLoss("manifest.json is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxManifestBytes)
    return DataLoss("manifest.json of " + std::to_string(st.st_size) + " bytes, above the limit " +
                    std::to_string(kMaxManifestBytes));
  std::string text(static_cast<size_t>(st.st_size), '\0');
  TANDEM_ASSIGN_OR_RETURN(size_t got,
                          ReadFull(fd->get(), std::as_writable_bytes(std::span(text.data(), text.size())), shown));
  if (got != text.size()) return DataLoss("manifest.json shrank while being read");
  return text;
}

// Size, and with kDigests the digest, of one listed file.
Status CheckFile(int dir_fd, const std::string& dir, const ManifestFile& f, Verify verify, std::vector<std::byte>& buf) {
  const std::string shown = dir + "/" + f.path;
  auto fd = OpenBeneath(dir_fd, f.path, shown);
  if (!fd.ok()) {
    if (fd.status().code() == StatusCode::kNotFound) return DataLoss("missing file " + Q(f.path));
    return DataLoss("file " + Q(f.path) + ": " + fd.status().message());
  }
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return FsError("stat " + shown, errno);
  if (!S_ISREG(st.st_mode)) return DataLoss("file " + Q(f.path) + " is not a regular file");
  if (static_cast<uint64_t>(st.st_size) != f.bytes)
    return DataLoss("size mismatch of file " + Q(f.path) + ": " + std::to_string(st.st_size) +
                    " bytes on disk, the manifest says " + std::to_string(f.bytes));
  if (verify != Verify::kDigests) return Status::Ok();
  (void)::posix_fadvise(fd->get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  if (buf.size() < kReadChunk) buf.resize(kReadChunk);
  Digester digester;
  uint64_t total = 0;
  while (true) {
    TANDEM_ASSIGN_OR_RETURN(size_t n, ReadFull(fd->get(), buf, shown));
    digester.Update(std::span(buf.data(), n));
    total += n;
    if (n < buf.size() || total > f.bytes) break;
  }
  if (total != f.bytes)
    return DataLoss("size mismatch of file " + Q(f.path) + ": read " + std::to_string(total) +
                    " bytes, the manifest says " + std::to_string(f.bytes) + " (changed while read)");
  if (digester.Digest() != f.digest)
    return DataLoss("digest mismatch of file " + Q(f.path) + ": xxh64 " + Xxh64Hex(digester.Digest()) +
                    " on disk, the manifest says " + Xxh64Hex(f.digest));
  return Status::Ok();
}

// Anything in the directory that the manifest does not list.
Status CheckNothingElse(const std::string& dir, const Manifest& m) {
  std::set<std::string> listed;
  for (const auto& f : m.files) listed.insert(f.path);
  listed.insert(std::string(kManifestFileName));
  std::error_code ec;
  namespace fs = std::filesystem;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  size_t seen = 0;
  for (; !ec && it != end; it.increment(ec)) {
    if (++seen > kMaxFiles * 2 + 16) return DataLoss("more entries than any manifest may list");
    const fs::file_status st = it->symlink_status(ec);
    if (ec) break;
    const std::string rel = it->path().lexically_relative(dir).generic_string();
    if (fs::is_directory(st)) continue;
    if (fs::is_symlink(st)) return DataLoss("symlink " + Q(rel) + " in the checkpoint");
    if (!fs::is_regular_file(st)) return DataLoss("special file " + Q(rel) + " in the checkpoint");
    if (!listed.contains(rel)) return DataLoss("unlisted file " + Q(rel) + " in the checkpoint");
  }
  if (ec) return FsError("list " + dir, ec.value());
  return Status::Ok();
}

}  // namespace

StatusOr<Manifest> ValidateCheckpoint(const std::string& dir, uint64_t expected_step, Verify verify) {
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir_fd.valid()) return FsError("open directory " + dir, errno);
  TANDEM_ASSIGN_OR_RETURN(std::string text, ReadManifestText(dir_fd.get(), dir));
  auto parsed = ParseManifest(text);
  if (!parsed.ok()) return DataLoss("manifest.json: " + parsed.status().message());
  Manifest m = std::move(parsed).value();
  if (m.step != expected_step)
    return DataLoss("manifest.json says step " + std::to_string(m.step) + ", the directory is of step " +
                    std::to_string(expected_step));
  std::vector<std::byte> buf;
  for (const auto& f : m.files) TANDEM_RETURN_IF_ERROR(CheckFile(dir_fd.get(), dir, f, verify, buf));
  TANDEM_RETURN_IF_ERROR(CheckNothingElse(dir, m));
  return m;
}

StatusOr<std::vector<StepDir>> ListStepDirs(const std::string& root) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(root.c_str()), &::closedir);
  if (!d) return FsError("open checkpoint root " + root, errno);
  std::vector<StepDir> out;
  errno = 0;
  while (const dirent* e = ::readdir(d.get())) {
    if (const auto step = ParseStepDirName(e->d_name)) out.push_back({*step, root + "/" + e->d_name});
    errno = 0;
  }
  if (errno != 0) return FsError("list checkpoint root " + root, errno);
  std::sort(out.begin(), out.end(), [](const StepDir& a, const StepDir& b) { return a.step > b.step; });
  return out;
}

StatusOr<ValidCheckpoint> FindLatestCheckpoint(const std::string& root, Verify verify,
                                               std::vector<SkippedCheckpoint>* skipped) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<StepDir> dirs, ListStepDirs(root));
  size_t n_skipped = 0;
  std::string newest_why;
  for (const StepDir& d : dirs) {
    auto m = ValidateCheckpoint(d.path, d.step, verify);
    if (m.ok()) return ValidCheckpoint{d.path, std::move(m).value()};
    log::Warn("checkpoint", "skipped {}: {}", d.path, m.status().message());
    if (n_skipped++ == 0) newest_why = d.path + ": " + m.status().message();
    if (skipped != nullptr) skipped->push_back({d.path, m.status()});
  }
  if (n_skipped == 0) return NotFound("no checkpoint under " + root);
  return NotFound("no valid checkpoint under " + root + " (" + std::to_string(n_skipped) +
                  " skipped; the newest, " + newest_why + ")");
}

}  // namespace tandem::checkpoint
