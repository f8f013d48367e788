// Reading the lines of a file a job's tasks can write (run_logs.h,
// rl_summary.h): a line longer than a bound is cut, not held whole.
#pragma once

#include <cstddef>
#include <istream>
#include <string>

namespace tandem::report {

inline constexpr size_t kMaxLogLineBytes = 1 << 20;

// One line into `text` (without its newline); of a line longer than
// kMaxLogLineBytes only the start is kept and `too_long` is set. False at
// the end.
inline bool ReadBoundedLine(std::istream& in, std::string& text, bool& too_long) {
  text.clear();
  too_long = false;
  std::streambuf* sb = in.rdbuf();
  bool any = false;
  for (;;) {
    const int c = sb->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      return any;
    }
    any = true;
    if (c == '\n') return true;
    if (text.size() < kMaxLogLineBytes) text.push_back(static_cast<char>(c));
    else too_long = true;
  }
}

}  // namespace tandem::report
