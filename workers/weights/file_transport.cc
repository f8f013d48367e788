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
#include "workers/model/safetensors_writer.h"
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

Status WriteFileSynced(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open " + path);
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = ErrnoStatus("write " + path);
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status s = ErrnoStatus("fsync " + path);
    ::close(fd);
    return s;
  }
  if (::close(fd) != 0) return ErrnoStatus("close " + path);
  return Status::Ok();
}

std::optional<model::DType> SaveDType(at::ScalarType t, model::ConfigDtype* config_dtype) {
  switch (t) {
    case at::kFloat: *config_dtype = model::ConfigDtype::kFloat32; return model::DType::kF32;
    case at::kBFloat16: *config_dtype = model::ConfigDtype::kBFloat16; return model::DType::kBF16;
    case at::kHalf: *config_dtype = model::ConfigDtype::kFloat16; return model::DType::kF16;
    default: return std::nullopt;
  }
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

// model::LoadWeights' rules on a ParameterSet, every check before the first
// copy.
Status LoadCheckpoint(const model::SafetensorsCheckpoint& ckpt, const model::ParameterSet& params) {
  const bool tied = !params.Find("lm_head.weight") && params.Find("model.embed_tokens.weight");
  for (const std::string& name : ckpt.names()) {
    if (params.Find(name)) continue;
    if (name == "lm_head.weight" && tied) continue;  // a tied copy
    auto view = ckpt.Get(name);
    return InvalidArgument((view.ok() ? view->file : ckpt.dir()) + ": unexpected tensor \"" + name +
                           "\" (not a parameter of this model)");
  }
  std::vector<model::TensorView> views;
  views.reserve(params.size());
  for (const model::ParameterSet::Named& n : params.named()) {
    const std::vector<int64_t> want = n.view.sizes().vec();
    if (!ckpt.Contains(n.name))
      return NotFound(ckpt.dir() + ": missing tensor \"" + n.name + "\" (expected shape " + ShapeString(want) + ")");
    TANDEM_ASSIGN_OR_RETURN(model::TensorView t, ckpt.Get(n.name));
    if (t.shape != want)
      return InvalidArgument(t.file + ": tensor \"" + n.name + "\": shape " + ShapeString(t.shape) + ", expected " +
                             ShapeString(want));
    const std::optional<at::ScalarType> type = model::TorchType(t.dtype);
    if (!type)
      return InvalidArgument(t.file + ": tensor \"" + n.name + "\": dtype " + std::string(model::DTypeName(t.dtype)) +
                             ", expected a float type (F32, BF16, F16 or F64)");
    const uint64_t bytes = WeightManifest::Tensor{n.name, t.dtype, t.shape, 0, 0}.nbytes();
    if (bytes != t.nbytes)
      return InvalidArgument(t.file + ": tensor \"" + n.name + "\": " + std::to_string(t.nbytes) +
                             " bytes for shape " + ShapeString(t.shape));
    views.push_back(std::move(t));
  }
  c10::NoGradGuard no_grad;
  try {
    for (size_t i = 0; i < views.size(); ++i) {
      const model::TensorView& t = views[i];
      // Stage through an aligned host tensor (the mapped bytes need not be
      // aligned for the element type), then convert and copy into the view.
      at::Tensor host = at::empty(t.shape, at::TensorOptions().dtype(*model::TorchType(t.dtype)));
      if (t.nbytes) std::memcpy(host.data_ptr(), t.data, t.nbytes);
      params.named()[i].view.copy_(host);
    }
  } catch (const c10::Error& e) {
    return Internal(std::string("copy weights: ") + e.what_without_backtrace());
  }
  return Status::Ok();
}

class FileSource final : public WeightSource {
 public:
  explicit FileSource(std::string dir) : dir_(std::move(dir)) {}
  Status LoadParameters(const model::ParameterSet& params) override {
    TANDEM_ASSIGN_OR_RETURN(model::SafetensorsCheckpoint ckpt, model::SafetensorsCheckpoint::Open(dir_),
                            "load_weights from " + Describe());
    return LoadCheckpoint(ckpt, params).WithContext("load_weights from " + Describe());
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
  const std::string final_dir = dir + "/v" + std::to_string(version);
  const std::string tmp = dir + "/.v" + std::to_string(version) + ".tmp";
  const std::string what = "publish_weights " + final_dir;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("publish_weights: mkdir " + dir);
  TANDEM_RETURN_IF_ERROR(RemoveTree(tmp), what);

  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> host;  // alive until the files are written
  std::vector<model::TensorToWrite> tensors;
  model::ModelConfig config = options_.config;
  try {
    host.reserve(params.size());
    for (const model::ParameterSet::Named& n : params.named()) {
      const std::optional<model::DType> dt = SaveDType(n.view.scalar_type(), &config.dtype);
      if (!dt)
        return InvalidArgument(what + ": tensor \"" + n.name + "\" has dtype " +
                               std::string(c10::toString(n.view.scalar_type())) + ", expected F32, BF16 or F16");
      host.push_back(n.view.to(at::kCPU).contiguous());
      const at::Tensor& h = host.back();
      tensors.push_back({n.name, *dt, h.sizes().vec(), h.data_ptr(), static_cast<size_t>(h.nbytes())});
    }
  } catch (const c10::Error& e) {
    return Internal(what + ": " + e.what_without_backtrace());
  }
  model::WriteOptions wo;
  wo.metadata["tandem_weight_version"] = std::to_string(version);
  TANDEM_RETURN_IF_ERROR(model::WriteSafetensorsCheckpoint(tmp, tensors, wo), what);
  host.clear();
  TANDEM_RETURN_IF_ERROR(WriteFileSynced(tmp + "/config.json", DumpJson(model::ToHfJson(config), 2) + "\n"), what);
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

}  // namespace tandem::weights
