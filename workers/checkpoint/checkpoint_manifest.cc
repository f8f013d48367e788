// The checkpoint manifest (see checkpoint_manifest.h for the contract).
#include "workers/checkpoint/checkpoint_manifest.h"

#include <algorithm>
#include <optional>
#include <unordered_set>
#include <utility>

#include "common/bounded_json.h"
#include "common/json_repeated_key.h"
#include "workers/checkpoint/checkpoint_digest.h"

namespace tandem::checkpoint {
namespace {

using nlohmann::json;

std::string Quoted(std::string_view s) { return DumpJson(json(std::string(s))); }


// A JSON non-negative integer no larger than `max`, or an error naming `field`.
StatusOr<uint64_t> U64Field(const json& v, std::string_view field, uint64_t max) {
  uint64_t u = 0;
  if (v.is_number_unsigned()) u = v.get<uint64_t>();
  else if (v.is_number_integer() && v.get<int64_t>() >= 0) u = static_cast<uint64_t>(v.get<int64_t>());
  else return InvalidArgument(std::string(field) + " is " + DumpJson(v) + ", expected a non-negative integer");
  if (u > max)
    return InvalidArgument(std::string(field) + " is " + std::to_string(u) + ", above the limit " +
                           std::to_string(max));
  return u;
}

// Refuses keys of `obj` outside `allowed` and reports the first missing one.
Status CheckKeys(const json& obj, std::initializer_list<std::string_view> allowed, std::string_view where) {
  for (const auto& [k, v] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
      return InvalidArgument(std::string(where) + "unknown field " + Quoted(k));
  }
  for (const std::string_view k : allowed) {
    if (!obj.contains(k)) return InvalidArgument(std::string(where) + "missing field " + Quoted(k));
  }
  return Status::Ok();
}

// Duplicates, and a file whose path is a directory of another file.
Status CheckPathSet(const std::vector<ManifestFile>& files) {
  std::unordered_set<std::string_view> paths;
  for (size_t i = 0; i < files.size(); ++i) {
    if (!paths.insert(files[i].path).second)
      return InvalidArgument("files[" + std::to_string(i) + "].path " + Quoted(files[i].path) + " appears twice");
  }
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string_view p = files[i].path;
    for (size_t slash = p.find('/'); slash != std::string_view::npos; slash = p.find('/', slash + 1)) {
      if (paths.contains(p.substr(0, slash)))
        return InvalidArgument("files[" + std::to_string(i) + "].path " + Quoted(p) + " lies under " +
                               Quoted(p.substr(0, slash)) + ", which is listed as a file");
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateRelativePath(std::string_view path) {
  if (path.empty()) return InvalidArgument("empty path");
  if (path.size() > kMaxPathBytes)
    return InvalidArgument("path of " + std::to_string(path.size()) + " bytes, above the limit " +
                           std::to_string(kMaxPathBytes));
  if (path.front() == '/') return InvalidArgument("absolute path " + Quoted(path));
  for (const char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return InvalidArgument("control character in path " + Quoted(path));
    if (c == '\\') return InvalidArgument("backslash in path " + Quoted(path));
  }
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(path.find('/', begin), path.size());
    const std::string_view part = path.substr(begin, end - begin);
    if (part.empty()) return InvalidArgument("empty component in path " + Quoted(path));
    if (part == "." || part == "..")
      return InvalidArgument("component " + Quoted(part) + " in path " + Quoted(path));
    if (part.size() > kMaxPathComponentBytes)
      return InvalidArgument("component of " + std::to_string(part.size()) + " bytes in path " + Quoted(path));
    if (end == path.size()) break;
    begin = end + 1;
  }
  if (path == kManifestFileName) return InvalidArgument("path " + Quoted(path) + " is the manifest's own");
  return Status::Ok();
}

StatusOr<Manifest> ParseManifest(std::string_view text) {
  if (text.size() > kMaxManifestBytes)
    return InvalidArgument("manifest of " + std::to_string(text.size()) + " bytes, above the limit " +
                           std::to_string(kMaxManifestBytes));
  TANDEM_ASSIGN_OR_RETURN(json j, ParseJsonBounded(text), "manifest");
  if (const std::optional<RepeatedKey> twice = FindRepeatedKey(text))
    return InvalidArgument("manifest: key " + Quoted(twice->key) + " appears twice in one object");
  if (!j.is_object()) return InvalidArgument("manifest: not a JSON object");
  TANDEM_RETURN_IF_ERROR(
      CheckKeys(j, {"format", "format_version", "step", "weight_version", "digest", "files", "metadata"}, ""),
      "manifest");
  if (j["format"] != kManifestFormat)
    return InvalidArgument("manifest: format is " + DumpJson(j["format"]) + ", expected " + Quoted(kManifestFormat));
  if (!j["format_version"].is_number_integer() || j["format_version"].get<int64_t>() != kManifestFormatVersion)
    return InvalidArgument("manifest: format_version is " + DumpJson(j["format_version"]) + ", this build reads " +
                           std::to_string(kManifestFormatVersion));
  if (j["digest"] != kDigestAlgorithm)
    return InvalidArgument("manifest: digest is " + DumpJson(j["digest"]) + ", expected " + Quoted(kDigestAlgorithm));
  Manifest m;
  TANDEM_ASSIGN_OR_RETURN(m.step, U64Field(j["step"], "step", kMaxStep), "manifest");
  TANDEM_ASSIGN_OR_RETURN(m.weight_version, U64Field(j["weight_version"], "weight_version", kMaxStep), "manifest");
  if (!j["metadata"].is_object()) return InvalidArgument("manifest: metadata is not an object");
  const json& files = j["files"];
  if (!files.is_array()) return InvalidArgument("manifest: files is not an array");
  if (files.size() > kMaxFiles)
    return InvalidArgument("manifest: " + std::to_string(files.size()) + " files, above the limit " +
                           std::to_string(kMaxFiles));
  m.files.reserve(files.size());
  uint64_t total = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string at = "manifest: files[" + std::to_string(i) + "]";
    const json& f = files[i];
    if (!f.is_object()) return InvalidArgument(at + " is not an object");
    TANDEM_RETURN_IF_ERROR(CheckKeys(f, {"path", "bytes", "xxh64"}, ""), at);
    if (!f["path"].is_string()) return InvalidArgument(at + ".path is not a string");
    ManifestFile mf;
    mf.path = f["path"].get<std::string>();
    TANDEM_RETURN_IF_ERROR(ValidateRelativePath(mf.path), at + ".path");
    TANDEM_ASSIGN_OR_RETURN(mf.bytes, U64Field(f["bytes"], "bytes", kMaxFileBytes), at);
    const json& d = f["xxh64"];
    std::optional<uint64_t> digest;
    if (d.is_string()) digest = ParseXxh64Hex(d.get_ref<const std::string&>());
    if (!digest) return InvalidArgument(at + ".xxh64 is " + DumpJson(d) + ", expected 16 lowercase hex digits");
    mf.digest = *digest;
    total += mf.bytes;  // each <= 2^50, at most 10^5 of them: no overflow
    if (total > kMaxTotalBytes)
      return InvalidArgument(at + ": the files add up to more than " + std::to_string(kMaxTotalBytes) + " bytes");
    m.files.push_back(std::move(mf));
  }
  TANDEM_RETURN_IF_ERROR(CheckPathSet(m.files), "manifest");
  m.metadata = std::move(j["metadata"]);
  return m;
}

StatusOr<std::string> ManifestJson(const Manifest& manifest) {
  if (!manifest.metadata.is_object()) return InvalidArgument("manifest: metadata is not an object");
  if (manifest.step > kMaxStep || manifest.weight_version > kMaxStep)
    return InvalidArgument("manifest: step or weight_version above " + std::to_string(kMaxStep));
  if (manifest.files.size() > kMaxFiles) return InvalidArgument("manifest: too many files");
  std::vector<ManifestFile> files = manifest.files;
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  uint64_t total = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    TANDEM_RETURN_IF_ERROR(ValidateRelativePath(files[i].path), "manifest: files[" + std::to_string(i) + "].path");
    if (files[i].bytes > kMaxFileBytes)
      return InvalidArgument("manifest: file " + Quoted(files[i].path) + " above " + std::to_string(kMaxFileBytes) +
                             " bytes");
    total += files[i].bytes;
  }
  if (total > kMaxTotalBytes) return InvalidArgument("manifest: the files add up to too many bytes");
  TANDEM_RETURN_IF_ERROR(CheckPathSet(files), "manifest");
  json j = json::object();
  j["format"] = kManifestFormat;
  j["format_version"] = kManifestFormatVersion;
  j["step"] = manifest.step;
  j["weight_version"] = manifest.weight_version;
  j["digest"] = kDigestAlgorithm;
  json arr = json::array();
  for (const auto& f : files) arr.push_back({{"path", f.path}, {"bytes", f.bytes}, {"xxh64", Xxh64Hex(f.digest)}});
  j["files"] = std::move(arr);
  j["metadata"] = manifest.metadata;
  // Invalid UTF-8 in metadata strings becomes U+FFFD rather than throwing;
  // the text then parses back (to the replaced strings).
  std::string text = DumpJson(j, 2) + "\n";
  if (!JsonDepthWithin(text)) return InvalidArgument("manifest: metadata nested deeper than the limit");
  if (text.size() > kMaxManifestBytes) return InvalidArgument("manifest: above the size limit");
  return text;
}

}  // namespace tandem::checkpoint
