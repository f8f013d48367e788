// The cuda-ipc messages and source URI (ipc_messages.h).
#include "workers/weights/ipc_messages.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

namespace tandem::weights::ipc {
namespace {

using nlohmann::json;

std::string Sanitize(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    const bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_';
    if (!keep) c = '_';
  }
  return out.empty() ? "_" : out;
}

// `payload` as a JSON object with exactly `keys` (all required).
StatusOr<json> Object(std::string_view payload, std::string_view what, std::initializer_list<std::string_view> keys) {
  StatusOr<json> j = ParseJsonBounded(payload);
  if (!j.ok()) return DataLoss(std::string(what) + ": " + j.status().message());
  if (!j->is_object()) return DataLoss(std::string(what) + ": expected a JSON object, got " + j->type_name());
  for (auto it = j->begin(); it != j->end(); ++it)
    if (std::find(keys.begin(), keys.end(), it.key()) == keys.end())
      return DataLoss(std::string(what) + ": unknown key \"" + it.key().substr(0, 64) + "\"");
  for (std::string_view k : keys)
    if (!j->contains(std::string(k))) return DataLoss(std::string(what) + "." + std::string(k) + ": missing");
  return j;
}

StatusOr<uint64_t> Unsigned(const json& j, std::string_view what, uint64_t max) {
  if (!j.is_number_integer() || (!j.is_number_unsigned() && j.get<int64_t>() < 0))
    return DataLoss(std::string(what) + ": expected a non-negative integer, got " + j.dump().substr(0, 40));
  const uint64_t v = j.get<uint64_t>();
  if (v > max) return DataLoss(std::string(what) + ": " + std::to_string(v) + " is above the limit " + std::to_string(max));
  return v;
}

constexpr uint64_t kMaxVersion = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

bool ValidUuid(const std::string& s) {
  if (s.size() != 36 || s.compare(0, 4, "GPU-") != 0) return false;
  return std::all_of(s.begin() + 4, s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

struct CodeName {
  StatusCode code;
  const char* name;
};
constexpr CodeName kCodes[] = {
    {StatusCode::kInvalidArgument, "invalid_argument"}, {StatusCode::kNotFound, "not_found"},
    {StatusCode::kFailedPrecondition, "failed_precondition"}, {StatusCode::kResourceExhausted, "resource_exhausted"},
    {StatusCode::kUnavailable, "unavailable"}, {StatusCode::kPermissionDenied, "permission_denied"},
    {StatusCode::kDataLoss, "data_loss"}, {StatusCode::kInternal, "internal"},
};

}  // namespace

StatusOr<IpcUri> ParseIpcUri(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("load_weights.source \"ipc:" + std::string(text.substr(0, 160)) + "\": " + why +
                           " (expected ipc:@NAME#vVERSION or ipc:/PATH#vVERSION)");
  };
  const size_t hash = text.rfind("#v");
  if (hash == std::string_view::npos) return bad("no #v<version>");
  const std::string_view digits = text.substr(hash + 2);
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return bad("the version after #v is not a decimal number of at most 18 digits");
  if (digits.size() > 1 && digits[0] == '0') return bad("the version has a leading zero");
  IpcUri uri;
  uri.version = std::stoll(std::string(digits));
  StatusOr<SocketAddress> a = ParseSocketAddress(text.substr(0, hash));
  if (!a.ok()) return bad(a.status().message());
  uri.address = *a;
  return uri;
}

std::string FormatIpcUri(const IpcUri& uri) {
  return "ipc:" + uri.address.ToString() + "#v" + std::to_string(uri.version);
}

StatusOr<SocketAddress> PublisherAddress(std::string_view job, std::string_view task, std::string_view dir) {
  const std::string name = "tandem-" + Sanitize(job) + "-" + Sanitize(task);
  if (dir.empty()) return ParseSocketAddress("@" + name.substr(0, 100));
  std::string path(dir);
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return ParseSocketAddress(path + "/" + name + ".sock");
}

std::vector<uint64_t> IpcBufferOffsets(const WeightManifest& m, uint64_t* end) {
  std::vector<uint64_t> out;
  uint64_t at = 0;
  for (const WeightManifest::Buffer& b : m.buffers) {
    out.push_back(at);
    at += (b.bytes + kIpcBufferAlign - 1) / kIpcBufferAlign * kIpcBufferAlign;
  }
  if (end) *end = at;
  return out;
}

std::string EncodeOffer(const IpcOffer& o) {
  const json j = {{"version", o.version},
                  {"sealed", o.sealed},
                  {"device_uuid", o.device_uuid},
                  {"allocation_bytes", o.allocation_bytes},
                  {"publisher_pid", o.publisher_pid},
                  {"manifest", ToJson(o.manifest)}};
  return DumpJson(j);
}

StatusOr<IpcOffer> ParseOffer(std::string_view payload, int64_t requested_version) {
  TANDEM_ASSIGN_OR_RETURN(
      json j, Object(payload, "offer",
                     {"version", "sealed", "device_uuid", "allocation_bytes", "publisher_pid", "manifest"}));
  IpcOffer o;
  TANDEM_ASSIGN_OR_RETURN(uint64_t v, Unsigned(j["version"], "offer.version", kMaxVersion));
  o.version = static_cast<int64_t>(v);
  if (o.version != requested_version)
    return DataLoss("offer.version: " + std::to_string(o.version) + ", the reader asked for " +
                    std::to_string(requested_version));
  if (!j["sealed"].is_boolean()) return DataLoss("offer.sealed: expected true or false");
  o.sealed = j["sealed"].get<bool>();
  if (!o.sealed) return DataLoss("offer.sealed: false (the publisher has not finished writing the version)");
  if (!j["device_uuid"].is_string() || !ValidUuid(j["device_uuid"].get<std::string>()))
    return DataLoss("offer.device_uuid: expected \"GPU-\" and 32 lowercase hex digits");
  o.device_uuid = j["device_uuid"].get<std::string>();
  TANDEM_ASSIGN_OR_RETURN(o.allocation_bytes, Unsigned(j["allocation_bytes"], "offer.allocation_bytes", kMaxAllocationBytes));
  if (o.allocation_bytes == 0) return DataLoss("offer.allocation_bytes: 0");
  TANDEM_ASSIGN_OR_RETURN(uint64_t pid, Unsigned(j["publisher_pid"], "offer.publisher_pid", uint64_t{1} << 31));
  o.publisher_pid = static_cast<int64_t>(pid);
  StatusOr<WeightManifest> m = WeightManifestFromJson(j["manifest"]);
  if (!m.ok()) return DataLoss("offer.manifest: " + m.status().message());
  o.manifest = std::move(*m);
  if (o.manifest.version != o.version)
    return DataLoss("offer.manifest.version: " + std::to_string(o.manifest.version) + ", the offer is of version " +
                    std::to_string(o.version));
  uint64_t end = 0;
  IpcBufferOffsets(o.manifest, &end);
  if (end > o.allocation_bytes)
    return DataLoss("offer: the manifest's buffers end at byte " + std::to_string(end) + ", the allocation has " +
                    std::to_string(o.allocation_bytes) + " (truncated)");
  return o;
}

std::string EncodeVersionMessage(int64_t version) { return DumpJson(json{{"version", version}}); }

StatusOr<int64_t> ParseVersionMessage(std::string_view payload, std::string_view what) {
  TANDEM_ASSIGN_OR_RETURN(json j, Object(payload, what, {"version"}));
  TANDEM_ASSIGN_OR_RETURN(uint64_t v, Unsigned(j["version"], std::string(what) + ".version", kMaxVersion));
  return static_cast<int64_t>(v);
}

std::string EncodeAcked(const IpcAcked& a) {
  return DumpJson(json{{"version", a.version}, {"acks", a.acks}, {"expected", a.expected}, {"freed", a.freed}});
}

StatusOr<IpcAcked> ParseAcked(std::string_view payload) {
  TANDEM_ASSIGN_OR_RETURN(json j, Object(payload, "acked", {"version", "acks", "expected", "freed"}));
  IpcAcked a;
  TANDEM_ASSIGN_OR_RETURN(uint64_t v, Unsigned(j["version"], "acked.version", kMaxVersion));
  a.version = static_cast<int64_t>(v);
  TANDEM_ASSIGN_OR_RETURN(uint64_t acks, Unsigned(j["acks"], "acked.acks", 1u << 30));
  TANDEM_ASSIGN_OR_RETURN(uint64_t expected, Unsigned(j["expected"], "acked.expected", 1u << 30));
  a.acks = static_cast<uint32_t>(acks);
  a.expected = static_cast<uint32_t>(expected);
  if (!j["freed"].is_boolean()) return DataLoss("acked.freed: expected true or false");
  a.freed = j["freed"].get<bool>();
  return a;
}

std::string EncodeError(const Status& st) {
  std::string code = "internal";
  for (const CodeName& c : kCodes)
    if (c.code == st.code()) code = c.name;
  return DumpJson(json{{"code", code}, {"message", st.message()}});
}

Status ParseError(std::string_view payload) {
  StatusOr<json> j = Object(payload, "error", {"code", "message"});
  if (!j.ok()) return j.status();
  if (!(*j)["code"].is_string() || !(*j)["message"].is_string())
    return DataLoss("error: code and message must be strings");
  const std::string code = (*j)["code"].get<std::string>();
  const std::string message = (*j)["message"].get<std::string>().substr(0, 4096);
  for (const CodeName& c : kCodes)
    if (code == c.name) return Status(c.code, "the publisher says: " + message);
  return DataLoss("error: unknown code \"" + code.substr(0, 40) + "\" (" + message.substr(0, 200) + ")");
}

}  // namespace tandem::weights::ipc
