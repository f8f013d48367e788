// Slurm's end-of-step banners: see end_reason.h.
#include "backends/slurm/end_reason.h"

#include "common/task_file.h"

namespace tandem::backends::slurm {

std::string BannerIn(const std::string& text) {
  size_t end = text.rfind(" ***");
  while (end != std::string::npos) {
    size_t line_start = text.rfind('\n', end);
    line_start = line_start == std::string::npos ? 0 : line_start + 1;
    size_t open = text.find("*** ", line_start);
    if (open != std::string::npos && open + 4 <= end) {
      std::string inner = text.substr(open + 4, end - open - 4);
      if (inner.find("CANCELLED") != std::string::npos || inner.find("DUE TO") != std::string::npos ||
          inner.find("PREEMPT") != std::string::npos)
        return inner;
    }
    if (line_start == 0) break;
    end = text.rfind(" ***", line_start - 1);
  }
  return "";
}

std::string BannerInFiles(const std::vector<std::filesystem::path>& files) {
  constexpr size_t kTail = 64 * 1024;
  for (const auto& f : files) {
    if (f.empty()) continue;
    // The step's stderr is the task's: it may be anything (task_file.h).
    auto text = ReadTaskFileTail(f, kTail);
    if (!text.ok()) continue;
    if (std::string b = BannerIn(*text); !b.empty()) return b;
  }
  return "";
}

}  // namespace tandem::backends::slurm
