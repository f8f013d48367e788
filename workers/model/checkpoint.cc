// HF model directories <-> Transformer (checkpoint.h): HF names, shapes and
// dtypes checked tensor by tensor, conversions through a host staging copy.
#include "workers/model/checkpoint.h"

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <c10/core/GradMode.h>
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "common/bounded_json.h"

namespace tandem::model {
namespace {

std::string ShapeString(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

DType SaveType(ConfigDtype d) {
  switch (d) {
    case ConfigDtype::kFloat32: return DType::kF32;
    case ConfigDtype::kBFloat16: return DType::kBF16;
    case ConfigDtype::kFloat16: return DType::kF16;
  }
  return DType::kF32;
}

std::optional<ConfigDtype> ConfigTypeOf(at::ScalarType t) {
  if (t == at::kFloat) return ConfigDtype::kFloat32;
  if (t == at::kBFloat16) return ConfigDtype::kBFloat16;
  if (t == at::kHalf) return ConfigDtype::kFloat16;
  return std::nullopt;
}

// Writes `text` to dir/name through a temporary file, fsync and rename.
Status WriteFileAtomically(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name, tmp = dir + "/." + name + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open " + tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = ErrnoStatus("write " + tmp);
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status s = ErrnoStatus("fsync " + tmp);
    ::close(fd);
    return s;
  }
  if (::close(fd) != 0) return ErrnoStatus("close " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename " + tmp + " to " + path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

}  // namespace

std::optional<at::ScalarType> TorchType(DType t) {
  switch (t) {
    case DType::kF64: return at::kDouble;
    case DType::kF32: return at::kFloat;
    case DType::kF16: return at::kHalf;
    case DType::kBF16: return at::kBFloat16;
    default: return std::nullopt;
  }
}

std::optional<DType> DTypeOf(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return DType::kF64;
    case at::kFloat: return DType::kF32;
    case at::kHalf: return DType::kF16;
    case at::kBFloat16: return DType::kBF16;
    default: return std::nullopt;
  }
}

Status LoadWeights(const ParameterSet& params, const SafetensorsCheckpoint& ckpt) {
  c10::NoGradGuard no_grad;
  const bool tied = !params.Find("lm_head.weight") && params.Find("model.embed_tokens.weight");
  for (const std::string& name : ckpt.names()) {
    if (params.Find(name)) continue;
    if (name == "lm_head.weight" && tied) continue;  // a tied copy
    auto view = ckpt.Get(name);
    return InvalidArgument((view.ok() ? view->file : ckpt.dir()) + ": unexpected tensor \"" + name +
                           "\" (not a parameter of this model)");
  }
  std::vector<TensorView> views;
  views.reserve(params.size());
  for (const ParameterSet::Named& n : params.named()) {
    if (!ckpt.Contains(n.name))
      return NotFound(ckpt.dir() + ": missing tensor \"" + n.name + "\" (expected shape " +
                      ShapeString(n.view.sizes()) + ")");
    TANDEM_ASSIGN_OR_RETURN(TensorView t, ckpt.Get(n.name));
    if (!at::IntArrayRef(t.shape).equals(n.view.sizes()))
      return InvalidArgument(t.file + ": tensor \"" + n.name + "\": shape " + ShapeString(t.shape) + ", expected " +
                             ShapeString(n.view.sizes()));
    const std::optional<at::ScalarType> type = TorchType(t.dtype);
    if (!type)
      return InvalidArgument(t.file + ": tensor \"" + n.name + "\": dtype " + std::string(DTypeName(t.dtype)) +
                             ", expected a float type (F32, BF16, F16 or F64)");
    int64_t numel = 1;
    for (const int64_t d : t.shape) numel *= d;
    if (static_cast<uint64_t>(numel) * c10::elementSize(*type) != t.nbytes)
      return InvalidArgument(t.file + ": tensor \"" + n.name + "\": " + std::to_string(t.nbytes) +
                             " bytes for shape " + ShapeString(t.shape));
    views.push_back(std::move(t));
  }
  try {
    for (size_t i = 0; i < views.size(); ++i) {
      const TensorView& t = views[i];
      // Stage through an aligned host tensor (the mapped bytes need not be
      // aligned for the element type), then convert and copy into the view.
      at::Tensor host = at::empty(t.shape, at::TensorOptions().dtype(*TorchType(t.dtype)));
      if (t.nbytes) std::memcpy(host.data_ptr(), t.data, t.nbytes);
      params.named()[i].view.copy_(host);
    }
  } catch (const c10::Error& e) {
    return Internal(ckpt.dir() + ": copy weights: " + e.what_without_backtrace());
  }
  return Status::Ok();
}

Status LoadWeights(Transformer& model, const SafetensorsCheckpoint& ckpt) { return LoadWeights(model.parameters(), ckpt); }

StatusOr<std::unique_ptr<Transformer>> LoadPretrained(const std::string& dir, at::Device device,
                                                      at::ScalarType dtype) {
  TANDEM_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir + "/config.json"));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Transformer> model, Transformer::Create(config, device, dtype), dir);
  TANDEM_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::Open(dir));
  TANDEM_RETURN_IF_ERROR(LoadWeights(*model, ckpt));
  return model;
}

Status SavePretrained(const ParameterSet& params, const ModelConfig& model_config, const std::string& dir,
                      const SaveOptions& options) {
  c10::NoGradGuard no_grad;
  const at::ScalarType have = params.buffers().empty() ? at::kFloat : params.buffers()[0].scalar_type();
  std::optional<ConfigDtype> cdtype = options.dtype ? options.dtype : ConfigTypeOf(have);
  if (!cdtype) return InvalidArgument("save " + dir + ": cannot save parameters of dtype " + c10::toString(have));
  const DType dtype = SaveType(*cdtype);
  const at::ScalarType host_type = *TorchType(dtype);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Internal("save " + dir + ": cannot create the directory: " + ec.message());

  std::vector<at::Tensor> host;  // alive until the files are written
  std::vector<TensorToWrite> tensors;
  host.reserve(params.size());
  try {
    for (const ParameterSet::Named& n : params.named()) {
      host.push_back(n.view.to(at::kCPU, host_type).contiguous());
      const at::Tensor& h = host.back();
      tensors.push_back({n.name, dtype, h.sizes().vec(), h.data_ptr(), static_cast<size_t>(h.nbytes())});
    }
  } catch (const c10::Error& e) {
    return Internal("save " + dir + ": " + e.what_without_backtrace());
  }
  WriteOptions wo;
  wo.max_shard_bytes = options.max_shard_bytes;
  wo.metadata = options.metadata;
  TANDEM_RETURN_IF_ERROR(WriteSafetensorsCheckpoint(dir, tensors, wo), "save " + dir);
  ModelConfig config = model_config;
  config.dtype = *cdtype;
  TANDEM_RETURN_IF_ERROR(WriteFileAtomically(dir, "config.json", DumpJson(ToHfJson(config), 2) + "\n"),
                         "save " + dir);
  return Status::Ok();
}

Status SavePretrained(const Transformer& model, const std::string& dir, const SaveOptions& options) {
  return SavePretrained(model.parameters(), model.config(), dir, options);
}

}  // namespace tandem::model
