// Writing safetensors files and checkpoints (see safetensors_writer.h).
#include "workers/model/safetensors_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

#include "workers/model/safetensors_header.h"
#include "workers/model/safetensors_index.h"

namespace tandem::model {
namespace {

using nlohmann::json;

// JSON text of a string; InvalidArgument when it is not valid UTF-8.
StatusOr<std::string> JsonString(std::string_view s, std::string_view what) {
  try {
    return json(std::string(s)).dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::strict);
  } catch (const json::exception&) {
    return InvalidArgument(std::string(what) + " is not valid UTF-8");
  }
}

// safetensors' Dtype declaration order ("in increasing alignment order");
// the official writer lays tensors out by this rank, descending.
int OfficialRank(DType t) {
  switch (t) {
    case DType::kBool: return 0;
    case DType::kU8: return 1;
    case DType::kI8: return 2;
    case DType::kI16: return 5;
    case DType::kF16: return 7;
    case DType::kBF16: return 8;
    case DType::kI32: return 9;
    case DType::kF32: return 11;
    case DType::kF64: return 12;
    case DType::kI64: return 13;
  }
  return 0;
}

Status ValidateTensor(const TensorToWrite& t) {
  const std::string where = "tensor " + DumpJson(json(t.name));
  if (t.name.empty()) return InvalidArgument("a tensor has the empty name");
  if (t.name == "__metadata__") return InvalidArgument("a tensor is named __metadata__ (reserved)");
  uint64_t elements = 1;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    const int64_t d = t.shape[i];
    if (d < 0) return InvalidArgument(where + ": shape[" + std::to_string(i) + "] is " + std::to_string(d));
    if (d != 0 && elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / static_cast<uint64_t>(d))
      return InvalidArgument(where + ": shape has more than 2^63 elements");
    elements *= static_cast<uint64_t>(d);
  }
  if (elements > std::numeric_limits<uint64_t>::max() / DTypeSize(t.dtype) ||
      elements * DTypeSize(t.dtype) != t.nbytes)
    return InvalidArgument(where + ": " + std::to_string(t.nbytes) + " bytes given, but " +
                           std::string(DTypeName(t.dtype)) + " of " + std::to_string(elements) +
                           " elements needs " + std::to_string(elements * DTypeSize(t.dtype)));
  if (t.nbytes > 0 && t.data == nullptr) return InvalidArgument(where + ": data is null");
  return Status::Ok();
}

Status ValidateAll(std::span<const TensorToWrite> tensors) {
  std::set<std::string_view> seen;
  for (const TensorToWrite& t : tensors) {
    TANDEM_RETURN_IF_ERROR(ValidateTensor(t));
    if (!seen.insert(t.name).second) return InvalidArgument("tensor " + DumpJson(json(t.name)) + " is given twice");
  }
  return Status::Ok();
}

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write " + path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Join(const std::string& dir, std::string_view name) {
  std::string out = dir;
  if (!out.empty() && out.back() != '/') out += '/';
  out += name;
  return out;
}

Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open directory " + dir);
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? Status::Ok() : ErrnoStatus("fsync directory " + dir, err);
}

// Writes `path` through a temporary file beside it: body(fd), fsync, rename, fsync of the directory.
Status WriteFileAtomically(const std::string& path, const std::function<Status(int fd, const std::string& tmp)>& body) {
  const std::string dir = DirOf(path);
  // Built by appending: GCC 12 -O3 warns (-Wrestrict, a false positive) on "." + std::string.
  std::string tmp = Join(dir, std::string(".").append(BaseOf(path)).append(".tmp-XXXXXX"));
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("create a temporary file in " + dir);
  auto fail = [&](Status st) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  };
  if (Status st = body(fd, tmp); !st.ok()) return fail(st);
  if (::fchmod(fd, 0644) != 0) return fail(ErrnoStatus("chmod " + tmp));
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return fail(ErrnoStatus("fsync " + tmp));
  if (::close(fd) != 0) {
    const Status st = ErrnoStatus("close " + tmp);
    ::unlink(tmp.c_str());
    return st;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const Status st = ErrnoStatus("rename " + tmp + " to " + path);
    ::unlink(tmp.c_str());
    return st;
  }
  return FsyncDir(dir);
}

Status WriteValidated(const std::string& path, std::span<const TensorToWrite> tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<size_t> order;
  TANDEM_ASSIGN_OR_RETURN(const std::string head, SafetensorsHeaderBytes(tensors, metadata, &order));
  return WriteFileAtomically(path, [&](int fd, const std::string& tmp) {
    TANDEM_RETURN_IF_ERROR(WriteAll(fd, head.data(), head.size(), tmp));
    for (const size_t i : order) TANDEM_RETURN_IF_ERROR(WriteAll(fd, tensors[i].data, tensors[i].nbytes, tmp));
    return Status::Ok();
  });
}

// "model-DDDDD-of-DDDDD.safetensors" (5 digits or more each).
bool IsShardFileName(std::string_view name) {
  auto digits = [&](size_t& pos) {
    const size_t start = pos;
    while (pos < name.size() && std::isdigit(static_cast<unsigned char>(name[pos]))) ++pos;
    return pos - start >= 5;
  };
  auto literal = [&](size_t& pos, std::string_view lit) {
    if (name.substr(pos, lit.size()) != lit) return false;
    pos += lit.size();
    return true;
  };
  size_t pos = 0;
  return literal(pos, "model-") && digits(pos) && literal(pos, "-of-") && digits(pos) &&
         literal(pos, ".safetensors") && pos == name.size();
}

Status RemoveIfPresent(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("remove " + path);
  return Status::Ok();
}

// Shard files in `dir` (IsShardFileName) that are not in `keep`.
StatusOr<std::vector<std::string>> StaleShards(const std::string& dir, const std::set<std::string>& keep) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus("list " + dir);
  std::vector<std::string> out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (IsShardFileName(name) && keep.count(name) == 0) out.push_back(name);
  }
  ::closedir(d);
  return out;
}

// The shards as huggingface_hub's split_state_dict_into_shards makes them: indices into `tensors`.
std::vector<std::vector<size_t>> PlanShards(std::span<const TensorToWrite> tensors, uint64_t max_bytes) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t n = tensors[i].nbytes;
    if (n > max_bytes) {
      shards.push_back({i});
      continue;
    }
    if (current_bytes + n > max_bytes) {
      shards.push_back(std::move(current));
      current = {};
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += n;
  }
  if (!current.empty()) shards.push_back(std::move(current));
  return shards;
}

}  // namespace

StatusOr<std::string> SafetensorsHeaderBytes(std::span<const TensorToWrite> tensors,
                                             const std::map<std::string, std::string>& metadata,
                                             std::vector<size_t>* order) {
  TANDEM_RETURN_IF_ERROR(ValidateAll(tensors));
  std::vector<size_t> idx(tensors.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const int ra = OfficialRank(tensors[a].dtype), rb = OfficialRank(tensors[b].dtype);
    if (ra != rb) return ra > rb;
    return tensors[a].name < tensors[b].name;
  });

  // Built by hand rather than with nlohmann::ordered_json, whose insertion is
  // linear in the object size (quadratic for 100k tensors).
  std::string text = "{";
  if (!metadata.empty()) {
    text += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      TANDEM_ASSIGN_OR_RETURN(const std::string k, JsonString(key, "metadata key"));
      TANDEM_ASSIGN_OR_RETURN(const std::string v, JsonString(value, "metadata value of " + k));
      if (!first) text += ',';
      first = false;
      text += k + ':' + v;
    }
    text += '}';
  }
  uint64_t offset = 0;
  for (const size_t i : idx) {
    const TensorToWrite& t = tensors[i];
    TANDEM_ASSIGN_OR_RETURN(const std::string name, JsonString(t.name, "a tensor name"));
    if (text.size() > 1) text += ',';
    text += name + ":{\"dtype\":\"" + std::string(DTypeName(t.dtype)) + "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d > 0) text += ',';
      text += std::to_string(t.shape[d]);
    }
    text += "],\"data_offsets\":[" + std::to_string(offset) + ',' + std::to_string(offset + t.nbytes) + "]}";
    offset += t.nbytes;
  }
  text += '}';
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kMaxSafetensorsHeaderBytes)
    return InvalidArgument("header of " + std::to_string(text.size()) + " bytes is larger than readers accept");

  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (size_t b = 0; b < 8; ++b) out[b] = static_cast<char>((n >> (8 * b)) & 0xff);
  out += text;
  if (order != nullptr) *order = std::move(idx);
  return out;
}

Status WriteSafetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                        const std::map<std::string, std::string>& metadata) {
  return WriteValidated(path, tensors, metadata).WithContext("write " + path);
}

Status WriteSafetensorsCheckpoint(const std::string& dir, std::span<const TensorToWrite> tensors,
                                  const WriteOptions& options) {
  const std::string ctx = "write checkpoint " + dir;
  TANDEM_RETURN_IF_ERROR(ValidateAll(tensors), ctx);
  if (options.max_shard_bytes == 0) return InvalidArgument(ctx + ": max_shard_bytes is 0");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgument(ctx + ": cannot create the directory: " + ec.message());
  std::map<std::string, std::string> metadata = options.metadata;
  metadata.emplace("format", "pt");

  const std::string single = Join(dir, kSafetensorsSingleFileName);
  const std::string index = Join(dir, kSafetensorsIndexFileName);
  const std::vector<std::vector<size_t>> plan = PlanShards(tensors, options.max_shard_bytes);
  if (plan.size() <= 1) {
    // From the rename of model.safetensors on, readers see the new checkpoint.
    TANDEM_RETURN_IF_ERROR(WriteValidated(single, tensors, metadata), ctx);
    TANDEM_RETURN_IF_ERROR(RemoveIfPresent(index), ctx);
    TANDEM_ASSIGN_OR_RETURN(const std::vector<std::string> stale, StaleShards(dir, {}), ctx);
    for (const std::string& name : stale) TANDEM_RETURN_IF_ERROR(RemoveIfPresent(Join(dir, name)), ctx);
    return FsyncDir(dir).WithContext(ctx);
  }

  // An old index goes first: until the new one is in place the directory
  // reads as the old single file (if any) or as no checkpoint, never as an
  // old index over new shards.
  TANDEM_RETURN_IF_ERROR(RemoveIfPresent(index), ctx);
  TANDEM_RETURN_IF_ERROR(FsyncDir(dir), ctx);
  std::map<std::string, std::string> weight_map;
  std::set<std::string> files;
  uint64_t total_size = 0;
  for (size_t s = 0; s < plan.size(); ++s) {
    const std::string file = SafetensorsShardFileName(s, plan.size());
    std::vector<TensorToWrite> shard;
    shard.reserve(plan[s].size());
    for (const size_t i : plan[s]) {
      shard.push_back(tensors[i]);
      weight_map.emplace(tensors[i].name, file);
      total_size += tensors[i].nbytes;
    }
    TANDEM_RETURN_IF_ERROR(WriteValidated(Join(dir, file), shard, metadata), ctx + ": shard " + file);
    files.insert(file);
  }
  const std::string index_text = SafetensorsIndexJson(weight_map, total_size);
  TANDEM_RETURN_IF_ERROR(WriteFileAtomically(index, [&](int fd, const std::string& tmp) {
                           return WriteAll(fd, index_text.data(), index_text.size(), tmp);
                         }),
                         ctx);
  TANDEM_RETURN_IF_ERROR(RemoveIfPresent(single), ctx);
  TANDEM_ASSIGN_OR_RETURN(const std::vector<std::string> stale, StaleShards(dir, files), ctx);
  for (const std::string& name : stale) TANDEM_RETURN_IF_ERROR(RemoveIfPresent(Join(dir, name)), ctx);
  return FsyncDir(dir).WithContext(ctx);
}

}  // namespace tandem::model
