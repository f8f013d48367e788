// Human units (human_units.h).
#include "orchestrator/report/human_units.h"

#include <cmath>
#include <ctime>

#include <fmt/format.h>

namespace tandem::report {

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, kUnits[u]);
}

std::string HumanDuration(double s) {
  if (s < 0.001) return fmt::format("{:.1f} ms", s * 1000);
  if (s < 1) return fmt::format("{:.0f} ms", s * 1000);
  if (s < 60) return fmt::format("{:.2f} s", s);
  const long total = std::lround(s);
  if (total < 3600) return fmt::format("{}m{:02}s", total / 60, total % 60);
  return fmt::format("{}h{:02}m{:02}s", total / 3600, (total / 60) % 60, total % 60);
}

std::string ClockTime(double epoch_s) {
  const double whole = std::floor(epoch_s);
  std::time_t t = static_cast<std::time_t>(whole);
  int ms = static_cast<int>(std::lround((epoch_s - whole) * 1000));
  if (ms == 1000) {
    ++t;
    ms = 0;
  }
  std::tm tm{};
  localtime_r(&t, &tm);
  return fmt::format("{:02}:{:02}:{:02}.{:03}", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

}  // namespace tandem::report
