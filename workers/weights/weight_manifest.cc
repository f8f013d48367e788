// The weight manifest's JSON form and its checks (weight_manifest.h).
#include "workers/weights/weight_manifest.h"

#include <algorithm>
#include <limits>
#include <set>

#include "common/bounded_json.h"
#include "common/xxh64.h"

namespace tandem::weights {
namespace {

using nlohmann::json;

constexpr size_t kMaxBuffers = 64;
constexpr size_t kMaxDims = 8;
constexpr size_t kMaxNameBytes = 1024;
constexpr uint64_t kMaxBufferBytes = uint64_t{1} << 56;

std::string TypeName(const json& j) { return j.type_name(); }

// `obj` must be an object whose keys are all in `allowed`.
Status OnlyKeys(const json& obj, const std::string& path, std::initializer_list<std::string_view> allowed) {
  if (!obj.is_object()) return InvalidArgument(path + ": expected an object, got " + TypeName(obj));
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end()) {
      std::string list;
      for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      return InvalidArgument(path + ": unknown key \"" + it.key() + "\" (expected only " + list + ")");
    }
  }
  return Status::Ok();
}

StatusOr<const json*> Member(const json& obj, const std::string& path, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return InvalidArgument(path + (path.empty() ? "" : ".") + key + ": missing");
  return &*it;
}

// A non-negative integer (a JSON integer, not 3.0) of at most `max`.
StatusOr<uint64_t> Unsigned(const json& j, const std::string& path, uint64_t max) {
  if (!j.is_number_integer())
    return InvalidArgument(path + ": expected a non-negative integer, got " + TypeName(j));
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > max) return InvalidArgument(path + ": " + std::to_string(v) + " is larger than the limit " + std::to_string(max));
    return v;
  }
  const int64_t v = j.get<int64_t>();
  if (v < 0) return InvalidArgument(path + ": expected a non-negative integer, got " + std::to_string(v));
  if (static_cast<uint64_t>(v) > max)
    return InvalidArgument(path + ": " + std::to_string(v) + " is larger than the limit " + std::to_string(max));
  return static_cast<uint64_t>(v);
}

StatusOr<model::DType> DTypeField(const json& j, const std::string& path) {
  if (!j.is_string()) return InvalidArgument(path + ": expected a dtype name (F32, BF16, ...), got " + TypeName(j));
  const std::string s = j.get<std::string>();
  const std::optional<model::DType> t = model::ParseDType(s);
  if (!t) return InvalidArgument(path + ": unknown dtype \"" + s + "\" (expected F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
  return *t;
}

StatusOr<uint64_t> ParseDigest(const json& j, const std::string& path) {
  if (!j.is_string()) return InvalidArgument(path + ": expected \"xxh64:\" and 16 hex digits, got " + TypeName(j));
  const std::string s = j.get<std::string>();
  if (s.size() != 22 || s.compare(0, 6, "xxh64:") != 0)
    return InvalidArgument(path + ": expected \"xxh64:\" and 16 hex digits, got \"" + s.substr(0, 40) + "\"");
  const std::optional<uint64_t> v = ParseXxh64Hex(std::string_view(s).substr(6));
  if (!v) return InvalidArgument(path + ": \"" + s + "\" is not lowercase hex after \"xxh64:\"");
  return *v;
}

// prod(shape) * size, or nullopt on overflow past 2^63.
std::optional<uint64_t> Bytes(const std::vector<int64_t>& shape, model::DType dtype) {
  unsigned __int128 n = model::DTypeSize(dtype);
  for (const int64_t d : shape) {
    if (d < 0) return std::nullopt;
    n *= static_cast<uint64_t>(d);
    if (n > std::numeric_limits<int64_t>::max()) return std::nullopt;
  }
  return static_cast<uint64_t>(n);
}

}  // namespace

uint64_t WeightManifest::Tensor::nbytes() const { return Bytes(shape, dtype).value_or(0); }

uint64_t WeightManifest::total_bytes() const {
  uint64_t n = 0;
  for (const Buffer& b : buffers) n += b.bytes;
  return n;
}

const WeightManifest::Tensor* WeightManifest::Find(std::string_view name) const {
  for (const Tensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string DigestString(uint64_t digest) { return "xxh64:" + Xxh64Hex(digest); }

Status ValidateWeightManifest(const WeightManifest& m) {
  if (m.version < 0) return InvalidArgument("version: " + std::to_string(m.version) + ", expected >= 0");
  if (m.buffers.empty() || m.buffers.size() > kMaxBuffers)
    return InvalidArgument("buffers: " + std::to_string(m.buffers.size()) + " buffers, expected 1 to " +
                           std::to_string(kMaxBuffers));
  for (size_t b = 0; b < m.buffers.size(); ++b)
    if (m.buffers[b].bytes >= kMaxBufferBytes)
      return InvalidArgument("buffers[" + std::to_string(b) + "].bytes: " + std::to_string(m.buffers[b].bytes) +
                             " is larger than the limit " + std::to_string(kMaxBufferBytes - 1));
  std::set<std::string_view> names;
  // (buffer, offset, end, index) for the overlap check.
  struct Extent { int buffer; uint64_t begin, end; size_t index; };
  std::vector<Extent> extents;
  extents.reserve(m.tensors.size());
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const WeightManifest::Tensor& t = m.tensors[i];
    const std::string path = "tensors[" + std::to_string(i) + "]";
    if (t.name.empty() || t.name.size() > kMaxNameBytes)
      return InvalidArgument(path + ".name: expected 1 to " + std::to_string(kMaxNameBytes) + " bytes, got " +
                             std::to_string(t.name.size()));
    if (!names.insert(t.name).second) return InvalidArgument(path + ".name: \"" + t.name + "\" appears twice");
    if (t.shape.size() > kMaxDims)
      return InvalidArgument(path + ".shape: " + std::to_string(t.shape.size()) + " dims, expected at most " +
                             std::to_string(kMaxDims));
    const std::optional<uint64_t> bytes = Bytes(t.shape, t.dtype);
    if (!bytes)
      return InvalidArgument(path + ".shape: " + ShapeString(t.shape) + " has a negative dim or more than 2^63 bytes");
    if (t.buffer < 0 || static_cast<size_t>(t.buffer) >= m.buffers.size())
      return InvalidArgument(path + ".buffer: " + std::to_string(t.buffer) + ", expected 0 to " +
                             std::to_string(m.buffers.size() - 1));
    const uint64_t size = model::DTypeSize(t.dtype);
    if (t.offset % size != 0)
      return InvalidArgument(path + ".offset: " + std::to_string(t.offset) + " is not a multiple of " +
                             std::to_string(size) + " (the size of " + std::string(model::DTypeName(t.dtype)) + ")");
    const uint64_t cap = m.buffers[static_cast<size_t>(t.buffer)].bytes;
    if (t.offset > cap || *bytes > cap - t.offset)
      return InvalidArgument(path + ": \"" + t.name + "\" spans bytes [" + std::to_string(t.offset) + ", " +
                             std::to_string(t.offset + *bytes) + ") of buffer " + std::to_string(t.buffer) +
                             ", which has " + std::to_string(cap));
    if (*bytes) extents.push_back({t.buffer, t.offset, t.offset + *bytes, i});
  }
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.buffer != b.buffer ? a.buffer < b.buffer : a.begin < b.begin; });
  for (size_t k = 1; k < extents.size(); ++k) {
    const Extent &a = extents[k - 1], &b = extents[k];
    if (a.buffer == b.buffer && b.begin < a.end)
      return InvalidArgument("tensors[" + std::to_string(b.index) + "]: \"" + m.tensors[b.index].name +
                             "\" overlaps \"" + m.tensors[a.index].name + "\" in buffer " + std::to_string(a.buffer));
  }
  return Status::Ok();
}

StatusOr<WeightManifest> WeightManifestFromJson(const json& j) {
  TANDEM_RETURN_IF_ERROR(OnlyKeys(j, "manifest", {"format", "version", "digest", "buffers", "tensors"}));
  WeightManifest m;
  TANDEM_ASSIGN_OR_RETURN(const json* format, Member(j, "", "format"));
  if (!format->is_string() || format->get<std::string>() != kManifestFormat)
    return InvalidArgument("format: expected \"" + std::string(kManifestFormat) + "\", got " +
                           (format->is_string() ? "\"" + format->get<std::string>().substr(0, 64) + "\"" : TypeName(*format)));
  TANDEM_ASSIGN_OR_RETURN(const json* version, Member(j, "", "version"));
  TANDEM_ASSIGN_OR_RETURN(uint64_t v, Unsigned(*version, "version", std::numeric_limits<int64_t>::max()));
  m.version = static_cast<int64_t>(v);
  TANDEM_ASSIGN_OR_RETURN(const json* digest, Member(j, "", "digest"));
  TANDEM_ASSIGN_OR_RETURN(m.digest, ParseDigest(*digest, "digest"));

  TANDEM_ASSIGN_OR_RETURN(const json* buffers, Member(j, "", "buffers"));
  if (!buffers->is_array()) return InvalidArgument("buffers: expected an array, got " + TypeName(*buffers));
  if (buffers->size() > kMaxBuffers)
    return InvalidArgument("buffers: " + std::to_string(buffers->size()) + " buffers, expected at most " +
                           std::to_string(kMaxBuffers));
  for (size_t b = 0; b < buffers->size(); ++b) {
    const std::string path = "buffers[" + std::to_string(b) + "]";
    const json& e = (*buffers)[b];
    TANDEM_RETURN_IF_ERROR(OnlyKeys(e, path, {"dtype", "bytes"}));
    WeightManifest::Buffer buf;
    TANDEM_ASSIGN_OR_RETURN(const json* dt, Member(e, path, "dtype"));
    TANDEM_ASSIGN_OR_RETURN(buf.dtype, DTypeField(*dt, path + ".dtype"));
    TANDEM_ASSIGN_OR_RETURN(const json* bytes, Member(e, path, "bytes"));
    TANDEM_ASSIGN_OR_RETURN(buf.bytes, Unsigned(*bytes, path + ".bytes", kMaxBufferBytes - 1));
    m.buffers.push_back(buf);
  }

  TANDEM_ASSIGN_OR_RETURN(const json* tensors, Member(j, "", "tensors"));
  if (!tensors->is_array()) return InvalidArgument("tensors: expected an array, got " + TypeName(*tensors));
  m.tensors.reserve(tensors->size());
  for (size_t i = 0; i < tensors->size(); ++i) {
    const std::string path = "tensors[" + std::to_string(i) + "]";
    const json& e = (*tensors)[i];
    TANDEM_RETURN_IF_ERROR(OnlyKeys(e, path, {"name", "dtype", "shape", "buffer", "offset"}));
    WeightManifest::Tensor t;
    TANDEM_ASSIGN_OR_RETURN(const json* name, Member(e, path, "name"));
    if (!name->is_string()) return InvalidArgument(path + ".name: expected a string, got " + TypeName(*name));
    t.name = name->get<std::string>();
    TANDEM_ASSIGN_OR_RETURN(const json* dt, Member(e, path, "dtype"));
    TANDEM_ASSIGN_OR_RETURN(t.dtype, DTypeField(*dt, path + ".dtype"));
    TANDEM_ASSIGN_OR_RETURN(const json* shape, Member(e, path, "shape"));
    if (!shape->is_array()) return InvalidArgument(path + ".shape: expected an array of dims, got " + TypeName(*shape));
    if (shape->size() > kMaxDims)
      return InvalidArgument(path + ".shape: " + std::to_string(shape->size()) + " dims, expected at most " +
                             std::to_string(kMaxDims));
    for (size_t d = 0; d < shape->size(); ++d) {
      TANDEM_ASSIGN_OR_RETURN(uint64_t dim, Unsigned((*shape)[d], path + ".shape[" + std::to_string(d) + "]",
                                                     std::numeric_limits<int64_t>::max()));
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    TANDEM_ASSIGN_OR_RETURN(const json* buffer, Member(e, path, "buffer"));
    TANDEM_ASSIGN_OR_RETURN(uint64_t b, Unsigned(*buffer, path + ".buffer", kMaxBuffers));
    t.buffer = static_cast<int>(b);
    TANDEM_ASSIGN_OR_RETURN(const json* offset, Member(e, path, "offset"));
    TANDEM_ASSIGN_OR_RETURN(t.offset, Unsigned(*offset, path + ".offset", kMaxBufferBytes));
    m.tensors.push_back(std::move(t));
  }
  TANDEM_RETURN_IF_ERROR(ValidateWeightManifest(m));
  return m;
}

StatusOr<WeightManifest> ParseWeightManifest(std::string_view json_text) {
  TANDEM_ASSIGN_OR_RETURN(json j, ParseJsonBounded(json_text), "weight manifest");
  TANDEM_ASSIGN_OR_RETURN(WeightManifest m, WeightManifestFromJson(j), "weight manifest");
  return m;
}

json ToJson(const WeightManifest& m) {
  json buffers = json::array(), tensors = json::array();
  for (const WeightManifest::Buffer& b : m.buffers)
    buffers.push_back({{"dtype", model::DTypeName(b.dtype)}, {"bytes", b.bytes}});
  for (const WeightManifest::Tensor& t : m.tensors)
    tensors.push_back({{"name", t.name},
                       {"dtype", model::DTypeName(t.dtype)},
                       {"shape", t.shape},
                       {"buffer", t.buffer},
                       {"offset", t.offset}});
  return {{"format", kManifestFormat}, {"version", m.version}, {"digest", DigestString(m.digest)},
          {"buffers", std::move(buffers)}, {"tensors", std::move(tensors)}};
}

}  // namespace tandem::weights
