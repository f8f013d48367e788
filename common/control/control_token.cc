// Control tokens (control_token.h), with OpenSSL's HMAC-SHA256 and RNG.
#include "common/control/control_token.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "common/hex.h"

namespace tandem::control {

std::string ControlToken(std::string_view key, std::string_view job_id, std::string_view task_id, int launch) {
  std::string data = "tandem-control-v1\n";
  data.append(job_id).append("\n").append(task_id).append("\n").append(std::to_string(launch));
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), mac, &len);
  return HexEncode(mac, len);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = a.size();
  for (size_t i = 0; i < n; ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

StatusOr<std::string> LoadOrCreateSecret(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (st.st_mode & 077) return PermissionDenied("control secret " + path.string() + " may be read by group or others");
    std::ifstream in(path);
    std::string secret;
    std::getline(in, secret);
    if (secret.size() < 32) return DataLoss("control secret " + path.string() + " is truncated; remove it to make a new one");
    return secret;
  }
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1) return Internal("control secret: the OpenSSL RNG failed");
  const std::string secret = HexEncode(raw, sizeof raw);
  const std::filesystem::path tmp = path.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("create " + tmp.string());
  const std::string text = secret + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return ErrnoStatus("write " + tmp.string());
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename " + tmp.string());
  return secret;
}

const std::string& ControlKeys::KeyFor(const std::string& backend) const {
  auto it = backend_keys_.find(backend);
  return it == backend_keys_.end() ? secret_ : it->second;
}

}  // namespace tandem::control
