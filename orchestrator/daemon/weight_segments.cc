// Removing a finished job's shm weight segments (weight_segments.h).
#include "orchestrator/daemon/weight_segments.h"

#include <algorithm>
#include <cctype>
#include <system_error>

namespace tandem::daemon {
namespace {

std::string Sanitize(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_';
    if (!ok) c = '_';
  }
  return out.empty() ? "_" : out;
}

}  // namespace

std::string WeightSegmentPrefix(std::string_view job_id, std::string_view task_id) {
  return "tandem-" + Sanitize(job_id) + "-" + Sanitize(task_id) + "-v";
}

size_t RemoveJobWeightSegments(const Job& job, const std::filesystem::path& shm_dir) {
  std::vector<std::string> prefixes;
  for (const Task& t : job.tasks) prefixes.push_back(WeightSegmentPrefix(job.id, t.id));
  size_t removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(shm_dir, ec)) {
    const std::string name = entry.path().filename().string();
    for (const std::string& p : prefixes) {
      if (name.size() <= p.size() || name.compare(0, p.size(), p) != 0) continue;
      if (!std::all_of(name.begin() + static_cast<std::ptrdiff_t>(p.size()), name.end(),
                       [](unsigned char c) { return std::isdigit(c); }))
        continue;
      std::error_code rm;
      if (std::filesystem::remove(entry.path(), rm)) ++removed;
    }
  }
  return removed;
}

}  // namespace tandem::daemon
