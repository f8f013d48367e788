// Implements command_signing.h with OpenSSL's HMAC-SHA256 and RNG.
#include "backends/redis/command_signing.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "backends/redis/redis_protocol.h"
#include "common/bounded_json.h"
#include "common/hex.h"

namespace tandem::backends::redis {

StatusOr<ClusterKey> ClusterKey::FromFile(const std::string& path) {
  if (path.empty()) return InvalidArgument("cluster key: no key file given (--cluster-key-file)");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return NotFound("cluster key: cannot read '" + path + "'");
  if (st.st_mode & 077)
    return PermissionDenied("cluster key: '" + path + "' may be read by group or others; chmod 600 it");
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cluster key: cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r' || bytes.back() == ' ' || bytes.back() == '\t'))
    bytes.pop_back();
  if (bytes.size() < 16) return InvalidArgument("cluster key: '" + path + "' holds fewer than 16 bytes");
  return ClusterKey(std::move(bytes));
}

std::string CommandMac(const ClusterKey& key, const std::string& stream, long long ts_ms, const std::string& nonce,
                       const std::string& msg) {
  const std::string data = "tandem-cmd-v1\n" + stream + "\n" + std::to_string(ts_ms) + "\n" + nonce + "\n" + msg;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.bytes().data(), static_cast<int>(key.bytes().size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return HexEncode(mac, len);
}

namespace {
std::string NewNonce() {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof(raw)) != 1) {
    // The RNG failing is not expected; fall back to a clock-derived nonce, still unique per process.
    static long long counter = 0;
    std::string s = std::to_string(NowMs()) + ":" + std::to_string(++counter);
    for (size_t i = 0; i < sizeof(raw); ++i) raw[i] = static_cast<unsigned char>(i < s.size() ? s[i] : 0);
  }
  return HexEncode(raw, sizeof(raw));
}

// The checks shared by commands and envelopes: signature, then age.
Status CheckSigned(const ClusterKey& key, const std::string& domain, const std::string& msg,
                   const std::string& ts_text, const std::string& nonce, const std::string& sig, long long now_ms,
                   std::chrono::milliseconds max_age, long long* ts_out) {
  if (sig.empty() || nonce.empty() || ts_text.empty()) return PermissionDenied("unsigned");
  long long ts = 0;
  try {
    size_t used = 0;
    ts = std::stoll(ts_text, &used);
    if (used != ts_text.size()) return PermissionDenied("bad timestamp");
  } catch (...) {
    return PermissionDenied("bad timestamp");
  }
  const std::string want = CommandMac(key, domain, ts, nonce, msg);
  if (want.size() != sig.size() || CRYPTO_memcmp(want.data(), sig.data(), want.size()) != 0)
    return PermissionDenied("bad signature");
  if (max_age.count() > 0 && (ts < now_ms - max_age.count() || ts > now_ms + max_age.count())) {
    long long ago = 0;  // a key holder may sign any timestamp: no overflow in saying how far off it is
    const std::string when = __builtin_sub_overflow(now_ms, ts, &ago)
                                 ? "at " + std::to_string(ts) + " ms"
                                 : std::to_string(ago) + " ms ago";
    return PermissionDenied("stale: signed " + when + ", limit " + std::to_string(max_age.count()) + " ms");
  }
  *ts_out = ts;
  return Status::Ok();
}
}  // namespace

std::vector<std::string> SignCommand(const ClusterKey& key, const std::string& stream, const std::string& msg) {
  const std::string nonce = NewNonce();
  const long long ts = NowMs();
  return {"msg", msg, "ts", std::to_string(ts), "nonce", nonce, "sig", CommandMac(key, stream, ts, nonce, msg)};
}

std::string SignEnvelope(const ClusterKey& key, const std::string& domain, const std::string& msg) {
  const std::string nonce = NewNonce();
  const long long ts = NowMs();
  nlohmann::json env = {{"msg", msg}, {"ts", ts}, {"nonce", nonce}, {"sig", CommandMac(key, domain, ts, nonce, msg)}};
  return env.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

StatusOr<std::string> OpenEnvelope(const ClusterKey& key, const std::string& domain, const std::string& text,
                                   long long now_ms, std::chrono::milliseconds max_age) {
  // Anyone who can write to Redis chooses `text`: bounded nesting.
  auto parsed = ParseJsonBounded(text);
  if (!parsed.ok()) return PermissionDenied("unsigned");
  const nlohmann::json& j = *parsed;
  if (!j.is_object() || !j.contains("msg") || !j["msg"].is_string() || !j.contains("ts") ||
      !j["ts"].is_number_integer() || !j.contains("nonce") || !j["nonce"].is_string() || !j.contains("sig") ||
      !j["sig"].is_string())
    return PermissionDenied("unsigned");
  long long ts = 0;
  const std::string msg = j["msg"].get<std::string>();
  TANDEM_RETURN_IF_ERROR(CheckSigned(key, domain, msg, std::to_string(j["ts"].get<long long>()),
                                     j["nonce"].get<std::string>(), j["sig"].get<std::string>(), now_ms, max_age, &ts),
                         domain);
  return msg;
}

Status CommandVerifier::UseJournal(std::unique_ptr<NonceJournal> journal, long long now_ms) {
  TANDEM_ASSIGN_OR_RETURN(auto entries, journal->Load(now_ms - 2 * max_age_.count()), "nonce memory");
  for (auto& e : entries) seen_[e.nonce] = {e.entry_id, e.ts_ms};
  journal_ = std::move(journal);
  return Status::Ok();
}

Status CommandVerifier::Verify(const StreamEntry& entry, long long now_ms) {
  long long ts = 0;
  const std::string nonce = entry.Field("nonce");
  Status st = CheckSigned(key_, stream_, entry.Field("msg"), entry.Field("ts"), nonce, entry.Field("sig"), now_ms,
                          max_age_, &ts);
  if (!st.ok()) {
    const std::string& m = st.message();
    if (m == "unsigned") return PermissionDenied("unsigned command");
    if (m.rfind("stale", 0) == 0) return PermissionDenied("stale command" + m.substr(5));
    return st;
  }
  // Forget nonces that would be refused as stale anyway.
  for (auto it = seen_.begin(); it != seen_.end();)
    it = it->second.second < now_ms - 2 * max_age_.count() ? seen_.erase(it) : std::next(it);
  auto it = seen_.find(nonce);
  if (it != seen_.end() && it->second.first != entry.id)
    return PermissionDenied("replayed command: nonce first seen in entry " + it->second.first);
  if (it == seen_.end() && journal_) unflushed_.push_back({nonce, entry.id, ts});
  seen_[nonce] = {entry.id, ts};
  return Status::Ok();
}

Status CommandVerifier::Flush() {
  if (!journal_ || unflushed_.empty()) return Status::Ok();
  std::vector<NonceJournal::Entry> live;
  live.reserve(seen_.size());
  for (const auto& [nonce, v] : seen_) live.push_back({nonce, v.first, v.second});
  Status st = journal_->Append(unflushed_, live);
  unflushed_.clear();
  return st;
}

}  // namespace tandem::backends::redis
