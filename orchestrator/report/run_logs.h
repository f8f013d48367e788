// Reading a run directory's handoff and residency logs (docs/handoff.md
// "Reading the logs"; the line formats are schemas/handoff.schema.json and
// schemas/residency.schema.json, version 1).
//
// Reading is tolerant: a line that is not JSON (a torn last line after a
// crash), of another version than 1 (a newer tandem), or missing a required
// key is skipped and counted as a warning, never an error. The job's tasks
// can write these files, so every field is type-checked, a line over 1 MiB or
// nested deeper than kMaxJsonDepth (common/bounded_json.h) is skipped too,
// and no input makes a reader throw. Only a run dir with neither log file is
// an error (NotFound).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::report {

// One line of handoff.jsonl: one command of a handoff step, for one tag.
struct HandoffLine {
  std::string group;
  std::string phase;    // "ROLLOUT", "TEACHER(0)", "TRAIN", "SYNC(3)", ...
  int step = 0;
  std::string stage;    // "release_inference", ...
  std::string role;
  int rank = 0;
  std::vector<int> gpus;  // logical GPU ids
  std::string command;  // "pause", "release", ...
  std::string tag;      // "" when the line's tag is null (pause, continue, ...)
  std::optional<int64_t> version;
  uint64_t bytes = 0;
  double start = 0;     // seconds since the epoch
  double duration = 0;  // seconds
  std::string outcome;  // "ok", "error", "timeout", "died", "refused"
  std::string message;
  size_t line_no = 0;   // 1-based line in the file
};

struct DeviceReading {
  int gpu = 0;
  uint64_t used = 0;
  uint64_t total = 0;
  bool device_wide = true;  // false: the worker's own accounting, not the whole device
};

// One line of residency.jsonl: what a worker holds for one tag changed.
struct ResidencyLine {
  std::string group;
  double ts = 0;
  std::string role;
  int rank = 0;
  std::vector<int> gpus;
  std::string tag;
  uint64_t bytes = 0;   // now resident, per GPU of the worker
  int64_t delta = 0;
  std::vector<DeviceReading> devices;
  bool leak = false;
  std::string note;
  size_t line_no = 0;
};

struct RunLogs {
  std::string run_dir;
  bool has_handoff = false;    // handoff.jsonl exists
  bool has_residency = false;  // residency.jsonl exists
  std::vector<HandoffLine> handoff;      // in file order
  std::vector<ResidencyLine> residency;  // in file order
  // "residency.jsonl:12: not JSON (torn line?)", ...; at most kMaxWarnings
  // kept, `skipped` counts all skipped lines.
  std::vector<std::string> warnings;
  size_t skipped = 0;
  static constexpr size_t kMaxWarnings = 20;
};

// One line; the error says why it cannot be used.
StatusOr<HandoffLine> ParseHandoffLine(std::string_view text);
StatusOr<ResidencyLine> ParseResidencyLine(std::string_view text);

// Reads <run_dir>/handoff.jsonl and <run_dir>/residency.jsonl. NotFound when
// `run_dir` is not a directory or holds neither file; other I/O errors as
// errors; bad lines as warnings.
StatusOr<RunLogs> ReadRunLogs(const std::string& run_dir);

// The warnings, for a person: one per line, and "... and N more".
std::string WarningsText(const RunLogs& logs);

}  // namespace tandem::report
