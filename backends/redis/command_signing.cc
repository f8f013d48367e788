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

namespace tandem::backends::redis {
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = d[p[i] >> 4];
    out[2 * i + 1] = d[p[i] & 15];
  }
  return out;
}

}  // namespace

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
  return Hex(mac, len);
}

std::vector<std::string> SignCommand(const ClusterKey& key, const std::string& stream, const std::string& msg) {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof(raw)) != 1) {
    // The RNG failing is not expected; fall back to a clock-derived nonce, still unique per process.
    static long long counter = 0;
    std::string s = std::to_string(NowMs()) + ":" + std::to_string(++counter);
    for (size_t i = 0; i < sizeof(raw); ++i) raw[i] = static_cast<unsigned char>(i < s.size() ? s[i] : 0);
  }
  const std::string nonce = Hex(raw, sizeof(raw));
  const long long ts = NowMs();
  return {"msg", msg, "ts", std::to_string(ts), "nonce", nonce, "sig", CommandMac(key, stream, ts, nonce, msg)};
}

Status CommandVerifier::Verify(const StreamEntry& entry, long long now_ms) {
  const std::string msg = entry.Field("msg"), ts_text = entry.Field("ts"), nonce = entry.Field("nonce"),
                    sig = entry.Field("sig");
  if (sig.empty() || nonce.empty() || ts_text.empty()) return PermissionDenied("unsigned command");
  long long ts = 0;
  try {
    size_t used = 0;
    ts = std::stoll(ts_text, &used);
    if (used != ts_text.size()) return PermissionDenied("bad timestamp");
  } catch (...) {
    return PermissionDenied("bad timestamp");
  }
  const std::string want = CommandMac(key_, stream_, ts, nonce, msg);
  if (want.size() != sig.size() || CRYPTO_memcmp(want.data(), sig.data(), want.size()) != 0)
    return PermissionDenied("bad signature");
  if (ts < now_ms - max_age_.count() || ts > now_ms + max_age_.count())
    return PermissionDenied("stale command: signed " + std::to_string(now_ms - ts) + " ms ago, limit " +
                            std::to_string(max_age_.count()) + " ms");
  // Forget nonces that would be refused as stale anyway.
  for (auto it = seen_.begin(); it != seen_.end();)
    it = it->second.second < now_ms - 2 * max_age_.count() ? seen_.erase(it) : std::next(it);
  auto it = seen_.find(nonce);
  if (it != seen_.end() && it->second.first != entry.id)
    return PermissionDenied("replayed command: nonce first seen in entry " + it->second.first);
  seen_[nonce] = {entry.id, ts};
  return Status::Ok();
}

}  // namespace tandem::backends::redis
