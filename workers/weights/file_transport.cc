// The file transport (file_transport.h): a version as an HF directory,
// written aside and renamed into place.
#include "workers/weights/file_transport.h"

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <c10/core/GradMode.h>
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/bounded_json.h"
#include "workers/model/checkpoint.h"
#include "workers/model/safetensors.h"
#include "workers/weights/weight_manifest.h"

namespace tandem::weights {
namespace {

// rm -r without std::filesystem::remove_all (see model_test_util.h's
// RemoveTree: PyTorch wheels export their own std::filesystem symbols).
Status RemoveTree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? Status::Ok() : ErrnoStatus("stat " + path);
  const int rc = ::nftw(path.c_str(), [](const char* p, const struct stat*, int, FTW*) { return std::remove(p); }, 16,
                        FTW_DEPTH | FTW_PHYS);
  if (rc != 0) return ErrnoStatus("remove " + path);
  return Status::Ok();
}

Status FsyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? Status::Ok() : ErrnoStatus("fsync " + path, err);
}

// "v12" -> 12; "x", "v", "v1x" -> -1.
int64_t VersionOfEntry(const std::string& name) {
  if (name.size() < 2 || name[0] != 'v') return -1;
  int64_t v = 0;
  for (size_t i = 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

// A version's names in DIR: v<N> in place, .v<N>.tmp being written,
// .v<N>.pending queued or being written (the marker readers wait on).
std::string VersionPath(const std::string& dir, int64_t version, const char* suffix = "") {
  return dir + (*suffix == '\0' ? "/v" : "/.v") + std::to_string(version) + suffix;
}
std::string PendingMarker(const std::string& dir, int64_t version) { return VersionPath(dir, version, ".pending"); }

// Creates DIR (one level) and the marker of version N in it.
Status MarkPending(const std::string& dir, int64_t version) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("publish_weights: mkdir " + dir);
  const std::string marker = PendingMarker(dir, version);
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("publish_weights: " + marker);
  ::close(fd);
  return Status::Ok();
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// While DIR/v<N> is missing and DIR/.v<N>.tmp (being written) or
// DIR/.v<N>.pending (queued: BackgroundFilePublisher) is there, waits (up
// to 120 s) for the publisher to put it in place.
void WaitWhileBeingWritten(const std::string& dir) {
  const size_t slash = dir.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : dir.substr(0, slash);
  const std::string name = slash == std::string::npos ? dir : dir.substr(slash + 1);
  const int64_t version = VersionOfEntry(name);
  if (version < 0) return;
  const std::string tmp = VersionPath(parent, version, ".tmp"), pending = PendingMarker(parent, version);
  for (int i = 0; i < 1200 && !Exists(dir) && (Exists(tmp) || Exists(pending)); ++i) ::usleep(100'000);
}

class FileSource final : public WeightSource {
 public:
  explicit FileSource(std::string dir) : dir_(std::move(dir)) {}
  Status LoadParameters(const model::ParameterSet& params) override {
    WaitWhileBeingWritten(dir_);
    TANDEM_ASSIGN_OR_RETURN(model::SafetensorsCheckpoint ckpt, model::SafetensorsCheckpoint::Open(dir_),
                            "load_weights from " + Describe());
    return model::LoadWeights(params, ckpt).WithContext("load_weights from " + Describe());
  }
  std::string Describe() const override { return "file:" + dir_; }

 private:
  std::string dir_;
};

}  // namespace

StatusOr<std::unique_ptr<WeightSource>> OpenFileSource(std::string dir) {
  return std::unique_ptr<WeightSource>(new FileSource(std::move(dir)));
}

StatusOr<std::string> FilePublisher::Publish(int64_t version, const model::ParameterSet& params) {
  if (version <= last_version_)
    return FailedPrecondition("publish_weights: version " + std::to_string(version) + " after version " +
                              std::to_string(last_version_) + " (versions must grow)");
  const std::string& dir = options_.dir;
  const std::string final_dir = VersionPath(dir, version);
  const std::string tmp = VersionPath(dir, version, ".tmp");
  const std::string what = "publish_weights " + final_dir;
  // Readers wait on the marker until the directory is in place (OpenFileSource):
  // the .tmp directory alone leaves a gap between its removal and its rewrite.
  TANDEM_RETURN_IF_ERROR(MarkPending(dir, version));
  const std::string marker = PendingMarker(dir, version);
  struct Unmark {
    const std::string& path;
    ~Unmark() { (void)::unlink(path.c_str()); }
  } unmark{marker};
  TANDEM_RETURN_IF_ERROR(RemoveTree(tmp), what);

  model::SaveOptions so;
  so.metadata["tandem_weight_version"] = std::to_string(version);
  TANDEM_RETURN_IF_ERROR(model::SavePretrained(params, options_.config, tmp, so), what);
  TANDEM_RETURN_IF_ERROR(FsyncPath(tmp, O_RDONLY | O_DIRECTORY), what);
  TANDEM_RETURN_IF_ERROR(RemoveTree(final_dir), what);  // a leftover of a publisher that restarted
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) return ErrnoStatus(what + ": rename " + tmp);
  TANDEM_RETURN_IF_ERROR(FsyncPath(dir, O_RDONLY | O_DIRECTORY), what);
  last_version_ = version;

  // The versions this one replaces, and dead publishers' temporaries.
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> stale;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      const int64_t v = VersionOfEntry(name);
      const bool tmp_dir = name.size() > 6 && name.compare(0, 2, ".v") == 0 && name.compare(name.size() - 4, 4, ".tmp") == 0;
      if ((v >= 0 && v < version) || tmp_dir) stale.push_back(dir + "/" + name);
    }
    ::closedir(d);
    for (const std::string& p : stale) (void)RemoveTree(p);
  }
  return "file:" + final_dir;
}

BackgroundFilePublisher::BackgroundFilePublisher(FileOptions options, std::function<void(int64_t)> before_write)
    : dir_(options.dir), config_(options.config), before_write_(std::move(before_write)), file_(std::move(options)) {
  writer_ = std::thread([this] { WriteLoop(); });
}

BackgroundFilePublisher::~BackgroundFilePublisher() {
  (void)Wait();
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  writer_.join();
}

Status BackgroundFilePublisher::Wait() {
  std::unique_lock<std::mutex> l(mu_);
  changed_.wait(l, [this] { return writing_ < 0 && pending_ < 0; });
  return result_;
}

void BackgroundFilePublisher::WriteLoop() {
  for (;;) {
    int slot = -1;
    int64_t version = -1;
    {
      std::unique_lock<std::mutex> l(mu_);
      changed_.wait(l, [this] { return stop_ || pending_ >= 0; });
      if (pending_ < 0) return;  // stopping, nothing queued
      slot = writing_ = pending_;
      version = writing_version_ = pending_version_;
      pending_ = -1;
    }
    if (before_write_) before_write_(version);
    const StatusOr<std::string> written = file_.Publish(version, *snapshots_[slot]);
    (void)::unlink(PendingMarker(dir_, version).c_str());
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!written.ok() && result_.ok()) result_ = written.status();
      writing_ = -1;
    }
    changed_.notify_all();
  }
}

StatusOr<std::string> BackgroundFilePublisher::Publish(int64_t version, const model::ParameterSet& params) {
  // Held through the copy: the writer takes a pending snapshot only whole.
  std::lock_guard<std::mutex> l(mu_);
  TANDEM_RETURN_IF_ERROR(result_, "publish_weights: the durable copy of an earlier version");
  if (version <= last_version_)
    return FailedPrecondition("publish_weights: version " + std::to_string(version) + " after version " +
                              std::to_string(last_version_) + " (versions must grow)");
  const int slot = pending_ >= 0 ? pending_ : writing_ == 0 ? 1 : 0;
  if (pending_ >= 0) {  // replaced before its write began (and unqueued before its snapshot changes)
    (void)::unlink(PendingMarker(dir_, pending_version_).c_str());
    pending_ = -1;
  }
  try {
    std::unique_ptr<model::ParameterSet>& host = snapshots_[slot];
    if (!host) {
      const at::ScalarType dtype = params.buffers().at(0).scalar_type();
      at::TensorOptions to = at::TensorOptions().dtype(dtype).device(at::kCPU);
      if (params.buffers()[0].is_cuda()) to = to.pinned_memory(true);  // copies from the device at full speed
      const at::Tensor buffer = at::empty({model::ParameterSet::BufferNumel(config_, dtype)}, to);
      host = std::make_unique<model::ParameterSet>(model::ParameterSet::Create(config_, at::kCPU, dtype, buffer));
    }
    if (host->buffers().size() != params.buffers().size())
      return InvalidArgument("publish_weights: the parameters are not laid out like the model's config");
    for (size_t i = 0; i < params.buffers().size(); ++i) {
      const at::Tensor& from = params.buffers()[i];
      const at::Tensor& to = host->buffers()[i];
      if (from.numel() != to.numel() || from.scalar_type() != to.scalar_type())
        return InvalidArgument("publish_weights: buffer " + std::to_string(i) + " is not laid out like the model's config");
      to.copy_(from);  // synchronous: the caller may change `params` once Publish returns
    }
  } catch (const std::exception& e) {
    return Internal(std::string("publish_weights: the host snapshot: ") + e.what());
  }
  // A reader sent this version waits on the marker until its directory is in place.
  TANDEM_RETURN_IF_ERROR(MarkPending(dir_, version));
  pending_ = slot;
  pending_version_ = version;
  last_version_ = version;
  changed_.notify_all();
  return "file:" + VersionPath(dir_, version);
}

}  // namespace tandem::weights
