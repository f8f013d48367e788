// The safetensors header parser (see safetensors_header.h for the contract).
#include "workers/model/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/json_repeated_key.h"

namespace tandem::model {
namespace {

using nlohmann::json;

constexpr size_t kSizeBytes = 8;  // the u64 N in front of the header

std::string Quoted(std::string_view s) { return DumpJson(json(std::string(s))); }

std::string SupportedDTypes() {
  std::string out;
  for (const DType t : kAllDTypes) {
    if (!out.empty()) out += ", ";
    out += DTypeName(t);
  }
  return out;
}


// Parses `text` like ParseJsonBounded, and also refuses a key twice in one object.
StatusOr<json> ParseNoDuplicateKeys(std::string_view text) {
  if (!JsonDepthWithin(text, kMaxJsonDepth))
    return InvalidArgument("header JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (the limit)");
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("header is not valid JSON");
  if (const std::optional<RepeatedKey> twice = FindRepeatedKey(text))
    return InvalidArgument(twice->depth == 1 ? "key " + Quoted(twice->key) + " appears twice in the header"
                                             : "key " + Quoted(twice->key) + " appears twice in the entry of " +
                                                   Quoted(twice->top_key));
  return j;
}

// A JSON non-negative integer as u64, or nullopt (negative, fractional, not a number).
std::optional<uint64_t> AsU64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

// The entry of tensor `name` (`v` its JSON value).
StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const json& v) {
  auto where = [&name] { return "tensor " + Quoted(name); };
  if (name.empty()) return InvalidArgument("a tensor has the empty name");
  if (!v.is_object())
    return InvalidArgument(where() + ": expected an object {dtype, shape, data_offsets}, got " + v.type_name());
  for (const auto& [key, value] : v.items()) {
    (void)value;
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      return InvalidArgument(where() + ": unknown key " + Quoted(key) + " (expected dtype, shape, data_offsets)");
  }
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) return InvalidArgument(where() + ": missing " + key);

  SafetensorsEntry e;
  e.name = name;
  const json& dtype = v["dtype"];
  if (!dtype.is_string()) return InvalidArgument(where() + ": dtype is " + dtype.type_name() + ", expected a string");
  const auto parsed = ParseDType(dtype.get_ref<const std::string&>());
  if (!parsed)
    return InvalidArgument(where() + ": unsupported dtype " + Quoted(dtype.get_ref<const std::string&>()) +
                           " (tandem reads " + SupportedDTypes() + ")");
  e.dtype = *parsed;

  const json& shape = v["shape"];
  if (!shape.is_array()) return InvalidArgument(where() + ": shape is " + shape.type_name() + ", expected an array");
  uint64_t elements = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const auto d = AsU64(shape[i]);
    if (!d || *d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return InvalidArgument(where() + ": shape[" + std::to_string(i) + "] is " + DumpJson(shape[i]) +
                             ", expected a non-negative integer");
    e.shape.push_back(static_cast<int64_t>(*d));
    // Every partial product stays <= INT64_MAX, so TensorView::numel cannot overflow.
    if (*d != 0 && elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / *d) overflow = true;
    elements *= *d;  // wraps only when overflow is set
  }
  const uint64_t esize = DTypeSize(e.dtype);
  if (overflow || elements > std::numeric_limits<uint64_t>::max() / esize)
    return InvalidArgument(where() + ": shape " + DumpJson(shape) + " holds more than 2^63 elements or 2^64 bytes");
  const uint64_t nbytes = elements * esize;

  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    return InvalidArgument(where() + ": data_offsets is " + DumpJson(off) + ", expected [begin, end]");
  const auto b = AsU64(off[0]), en = AsU64(off[1]);
  if (!b || !en)
    return InvalidArgument(where() + ": data_offsets " + DumpJson(off) + " are not non-negative integers");
  if (*en < *b) return InvalidArgument(where() + ": data_offsets " + DumpJson(off) + " end before they begin");
  e.begin = *b;
  e.end = *en;
  if (e.end - e.begin != nbytes)
    return InvalidArgument(where() + ": data_offsets " + DumpJson(off) + " span " + std::to_string(e.end - e.begin) +
                           " bytes, but " + std::string(DTypeName(e.dtype)) + " " + DumpJson(shape) + " is " +
                           std::to_string(nbytes) + " bytes");
  return e;
}

StatusOr<std::map<std::string, std::string>> ParseMetadata(const json& v) {
  std::map<std::string, std::string> out;
  if (v.is_null()) return out;
  if (!v.is_object()) return InvalidArgument(std::string("__metadata__ is ") + v.type_name() + ", expected an object");
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string())
      return InvalidArgument("__metadata__." + key + " is " + value.type_name() + ", expected a string");
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

StatusOr<SafetensorsHeader> Parse(std::span<const std::byte> bytes) {
  if (bytes.size() < kSizeBytes)
    return DataLoss("file is " + std::to_string(bytes.size()) + " bytes, shorter than the 8-byte header size");
  uint64_t n = 0;
  for (size_t i = 0; i < kSizeBytes; ++i) n |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (n > kMaxSafetensorsHeaderBytes)
    return InvalidArgument("header size " + std::to_string(n) + " is larger than the limit " +
                           std::to_string(kMaxSafetensorsHeaderBytes));
  if (n > bytes.size() - kSizeBytes)
    return DataLoss("header size " + std::to_string(n) + " runs past the end of the file (" +
                    std::to_string(bytes.size()) + " bytes): truncated?");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + kSizeBytes, n);
  if (text.substr(0, 3) == "\xEF\xBB\xBF") return InvalidArgument("header begins with a byte-order mark");
  // nlohmann's lexer takes a NUL byte for the end of the input, so
  // "{...}\0garbage" would parse; in valid JSON a NUL byte cannot appear.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    return InvalidArgument("header holds a NUL byte at offset " + std::to_string(nul) + " (not valid JSON)");
  TANDEM_ASSIGN_OR_RETURN(json j, ParseNoDuplicateKeys(text));
  if (!j.is_object()) return InvalidArgument(std::string("header is JSON ") + j.type_name() + ", expected an object");

  SafetensorsHeader h;
  h.header_bytes = n;
  h.data_offset = kSizeBytes + n;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      TANDEM_ASSIGN_OR_RETURN(h.metadata, ParseMetadata(value));
      continue;
    }
    TANDEM_ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(key, value));
    h.tensors.push_back(std::move(e));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });

  const uint64_t data_bytes = bytes.size() - h.data_offset;
  uint64_t cursor = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : h.tensors) {
    auto where = [&e] {
      return "tensor " + Quoted(e.name) + ": data_offsets [" + std::to_string(e.begin) + ", " +
             std::to_string(e.end) + "]";
    };
    if (e.end > data_bytes)
      return DataLoss(where() + " run past the end of the data (" + std::to_string(data_bytes) +
                      " bytes after the header): truncated?");
    if (e.begin < cursor)
      return InvalidArgument(where() + " overlap tensor " + Quoted(prev->name) + ", which ends at " +
                             std::to_string(cursor));
    if (e.begin > cursor)
      return InvalidArgument(where() + " leave a hole: data bytes [" + std::to_string(cursor) + ", " +
                             std::to_string(e.begin) + ") belong to no tensor");
    cursor = e.end;
    prev = &e;
  }
  if (cursor != data_bytes)
    return InvalidArgument("data bytes [" + std::to_string(cursor) + ", " + std::to_string(data_bytes) +
                           ") after the last tensor belong to no tensor");
  return h;
}

}  // namespace

StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> file_bytes, std::string_view file) {
  auto h = Parse(file_bytes);
  if (!h.ok()) return h.status().WithContext(file);
  return h;
}

}  // namespace tandem::model
