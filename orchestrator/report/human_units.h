// Numbers for people in the report commands (docs/cli.md): bytes in binary
// units, durations, wall-clock times. One definition so `tandem residency`,
// `tandem events --handoff` and the timeline agree.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::report {

// 0 -> "0 B", 1536 -> "1.5 KiB", 30 -> "30 B", 3221225472 -> "3.0 GiB".
std::string HumanBytes(uint64_t bytes);
// 0.0004 -> "0.4 ms", 0.5 -> "500 ms", 2.25 -> "2.25 s", 125 -> "2m05s".
std::string HumanDuration(double seconds);
// Seconds since the epoch -> local "HH:MM:SS.mmm".
std::string ClockTime(double epoch_s);

}  // namespace tandem::report
