// Port files (port_file.h).
#include "workers/roles/port_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace tandem::roles {

StatusOr<std::vector<int>> LeasedPorts() {
  const char* env = std::getenv("TANDEM_PORTS");
  std::vector<int> ports;
  if (env == nullptr || *env == '\0') return ports;
  const std::string all(env);
  for (size_t at = 0; at <= all.size();) {
    const size_t comma = std::min(all.find(',', at), all.size());
    const std::string one = all.substr(at, comma - at);
    char* end = nullptr;
    errno = 0;
    const long port = std::strtol(one.c_str(), &end, 10);
    if (errno != 0 || end == one.c_str() || *end != '\0' || port <= 0 || port > 65535)
      return InvalidArgument("TANDEM_PORTS: '" + all + "': '" + one + "' is not a port");
    ports.push_back(static_cast<int>(port));
    at = comma + 1;
  }
  return ports;
}

StatusOr<int> FirstLeasedPort() {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<int> ports, LeasedPorts());
  return ports.empty() ? 0 : ports.front();
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
