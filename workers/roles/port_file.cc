// Port files (port_file.h).
#include "workers/roles/port_file.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace tandem::roles {

StatusOr<int> FirstLeasedPort() {
  const char* env = std::getenv("TANDEM_PORTS");
  if (env == nullptr || *env == '\0') return 0;
  std::string first(env);
  first = first.substr(0, first.find(','));
  char* end = nullptr;
  errno = 0;
  const long port = std::strtol(first.c_str(), &end, 10);
  if (errno != 0 || end == first.c_str() || *end != '\0' || port <= 0 || port > 65535)
    return InvalidArgument("TANDEM_PORTS: '" + std::string(env) + "' does not start with a port");
  return static_cast<int>(port);
}

Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  const char* job = std::getenv("TANDEM_JOB_ID");
  {
    std::ofstream out(tmp);
    out << port << "\n" << (job != nullptr ? job : "") << "\n";
    if (!out.flush()) return Internal("port file " + path + ": cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return Internal("port file " + path + ": rename: " + std::string(std::strerror(errno)));
  return Status::Ok();
}

StatusOr<std::optional<int>> ReadPortFile(const std::string& path, const std::string& job, std::string* seen_job) {
  std::ifstream f(path);
  long port = 0;
  if (!(f >> port)) return std::optional<int>();
  if (port < 1 || port > 65535) return InvalidArgument(path + " holds no port");
  std::string named;
  f >> named;
  if (!job.empty() && named != job) {
    *seen_job = named;
    return std::optional<int>();
  }
  return std::optional<int>(static_cast<int>(port));
}

}  // namespace tandem::roles
