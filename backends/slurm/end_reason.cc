// Slurm's end-of-step banners: see end_reason.h.
#include "backends/slurm/end_reason.h"

#include <fstream>

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
  constexpr std::streamoff kTail = 64 * 1024;
  for (const auto& f : files) {
    if (f.empty()) continue;
    std::ifstream in(f, std::ios::binary);
    if (!in) continue;
    in.seekg(0, std::ios::end);
    std::streamoff size = in.tellg();
    if (size <= 0) continue;
    in.seekg(size > kTail ? size - kTail : 0);
    std::string text(static_cast<size_t>(size > kTail ? kTail : size), '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    if (std::string b = BannerIn(text); !b.empty()) return b;
  }
  return "";
}

}  // namespace tandem::backends::slurm
