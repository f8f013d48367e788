// Tolerant readers of handoff.jsonl and residency.jsonl (run_logs.h).
#include "orchestrator/report/run_logs.h"

#include <cstdint>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/task_file.h"
#include "orchestrator/report/bounded_lines.h"

namespace tandem::report {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int kVersion = 1;
constexpr size_t kMaxLineBytes = kMaxLogLineBytes;
constexpr double kMaxSeconds = 1e12;  // longer lines are not ours: skipped, not held

// Each getter returns false (and names the key) when the key is missing or
// of the wrong type.
struct Fields {
  const json& j;
  std::string missing;

  bool Fail(const char* key, const char* want) {
    if (missing.empty()) missing = fmt::format("\"{}\" missing or not {}", key, want);
    return false;
  }
  bool Str(const char* key, std::string& out, bool required = true) {
    auto it = j.find(key);
    if (it == j.end()) return required ? Fail(key, "a string") : true;
    if (!it->is_string()) return Fail(key, "a string");
    out = it->get<std::string>();
    return true;
  }
  bool Int(const char* key, int& out) {
    auto it = j.find(key);
    if (it == j.end() || !FitsInt(*it)) return Fail(key, "an integer");
    out = it->get<int>();
    return true;
  }
  static bool FitsInt(const json& v) {
    if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t{INT32_MAX};
    if (!v.is_number_integer()) return false;
    const int64_t i = v.get<int64_t>();
    return i >= INT32_MIN && i <= INT32_MAX;
  }
  bool I64(const char* key, int64_t& out) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return Fail(key, "an integer");
    out = it->get<int64_t>();
    return true;
  }
  bool U64(const char* key, uint64_t& out) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_unsigned()) return Fail(key, "an integer >= 0");
    out = it->get<uint64_t>();
    return true;
  }
  // Times and durations in seconds: beyond kMaxSeconds (year 33658) a line is
  // not ours, and a clock time of it would not fit a time_t.
  bool Num(const char* key, double& out) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number() || !(it->get<double>() >= 0 && it->get<double>() <= kMaxSeconds))
      return Fail(key, "a number of seconds >= 0");
    out = it->get<double>();
    return true;
  }
  bool Gpus(std::vector<int>& out) {
    auto it = j.find("gpus");
    if (it == j.end() || !it->is_array()) return Fail("gpus", "an array of GPU ids");
    for (const json& g : *it) {
      if (!g.is_number_unsigned() || !FitsInt(g)) return Fail("gpus", "an array of GPU ids");
      out.push_back(g.get<int>());
    }
    return true;
  }
};

StatusOr<json> ParseVersioned(std::string_view text) {
  if (text.size() > kMaxLineBytes) return InvalidArgument(fmt::format("line over {} bytes", kMaxLineBytes));
  if (!JsonDepthWithin(text)) return InvalidArgument(fmt::format("nested deeper than {} levels", kMaxJsonDepth));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DataLoss("not JSON (torn line?)");
  if (!j.is_object()) return InvalidArgument("not a JSON object");
  auto v = j.find("v");
  if (v == j.end() || !v->is_number_integer()) return InvalidArgument("no version \"v\"");
  if (v->get<int64_t>() != kVersion) {
    return InvalidArgument(fmt::format("line format version {} (this tandem reads {})", v->dump(), kVersion));
  }
  return j;
}

template <typename Line, typename Parse>
Status ReadFile(const fs::path& path, const char* name, Parse parse, std::vector<Line>& out, RunLogs& logs) {
  // A task may have left a FIFO or a symlink here (common/task_file.h).
  TANDEM_ASSIGN_OR_RETURN(std::ifstream in, OpenTaskStream(path), "");
  std::string text;
  size_t line_no = 0;
  bool too_long = false;
  while (ReadBoundedLine(in, text, too_long)) {
    ++line_no;
    const bool last_unterminated = in.eof();  // the end came before a newline
    if (text.empty()) continue;
    StatusOr<Line> line = too_long ? StatusOr<Line>(InvalidArgument(fmt::format("line over {} bytes", kMaxLineBytes)))
                                   : parse(text);
    if (!line.ok()) {
      ++logs.skipped;
      if (logs.warnings.size() < RunLogs::kMaxWarnings) {
        logs.warnings.push_back(fmt::format("{}:{}: skipped: {}{}", name, line_no, line.status().message(),
                                            last_unterminated ? " (last line, no newline)" : ""));
      }
      continue;
    }
    line->line_no = line_no;
    out.push_back(std::move(*line));
  }
  if (in.bad()) return ErrnoStatus("read " + path.string());
  return Status::Ok();
}

}  // namespace

StatusOr<HandoffLine> ParseHandoffLine(std::string_view text) {
  TANDEM_ASSIGN_OR_RETURN(json j, ParseVersioned(text));
  HandoffLine l;
  Fields f{j, ""};
  bool ok = f.Str("group", l.group) && f.Str("phase", l.phase) && f.Int("step", l.step) &&
            f.Str("stage", l.stage) && f.Str("role", l.role) && f.Int("rank", l.rank) && f.Gpus(l.gpus) &&
            f.Str("command", l.command) && f.U64("bytes", l.bytes) && f.Num("start", l.start) &&
            f.Num("duration", l.duration) && f.Str("outcome", l.outcome) && f.Str("message", l.message, false);
  if (ok) {
    auto t = j.find("tag");
    if (t == j.end() || !(t->is_null() || t->is_string())) ok = f.Fail("tag", "a string or null");
    else if (t->is_string()) l.tag = t->get<std::string>();
  }
  if (ok && j.contains("version")) {
    int64_t v = 0;
    ok = f.I64("version", v);
    l.version = v;
  }
  if (!ok) return InvalidArgument(f.missing);
  return l;
}

StatusOr<ResidencyLine> ParseResidencyLine(std::string_view text) {
  TANDEM_ASSIGN_OR_RETURN(json j, ParseVersioned(text));
  ResidencyLine l;
  Fields f{j, ""};
  bool ok = f.Str("group", l.group) && f.Num("ts", l.ts) && f.Str("role", l.role) && f.Int("rank", l.rank) &&
            f.Gpus(l.gpus) && f.Str("tag", l.tag) && f.U64("bytes", l.bytes) && f.I64("delta", l.delta) &&
            f.Str("note", l.note, false);
  if (ok) {
    auto leak = j.find("leak");
    if (leak == j.end() || !leak->is_boolean()) ok = f.Fail("leak", "true or false");
    else l.leak = leak->get<bool>();
  }
  if (ok) {
    auto devices = j.find("devices");
    if (devices == j.end() || !devices->is_array()) ok = f.Fail("devices", "an array");
    for (size_t i = 0; ok && i < devices->size(); ++i) {
      const json& d = (*devices)[i];
      Fields df{d, ""};
      DeviceReading r;
      int gpu = 0;
      if (!d.is_object() || !(df.Int("gpu", gpu) && df.U64("used", r.used) && df.U64("total", r.total))) {
        ok = f.Fail("devices", "an array of {gpu, used, total}");
        break;
      }
      r.gpu = gpu;
      if (auto dw = d.find("device_wide"); dw != d.end() && dw->is_boolean()) r.device_wide = dw->get<bool>();
      l.devices.push_back(r);
    }
  }
  if (!ok) return InvalidArgument(f.missing);
  return l;
}

StatusOr<RunLogs> ReadRunLogs(const std::string& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return NotFound(run_dir + ": not a directory");
  RunLogs logs;
  logs.run_dir = run_dir;
  const fs::path handoff = fs::path(run_dir) / "handoff.jsonl";
  const fs::path residency = fs::path(run_dir) / "residency.jsonl";
  // Anything at the path counts: a FIFO or a symlink is then refused by name.
  logs.has_handoff = fs::exists(fs::symlink_status(handoff, ec));
  logs.has_residency = fs::exists(fs::symlink_status(residency, ec));
  if (!logs.has_handoff && !logs.has_residency) {
    return NotFound(run_dir + ": no handoff.jsonl or residency.jsonl (the job had no colocated handoff)");
  }
  if (logs.has_handoff) {
    TANDEM_RETURN_IF_ERROR(ReadFile(handoff, "handoff.jsonl", ParseHandoffLine, logs.handoff, logs));
  }
  if (logs.has_residency) {
    TANDEM_RETURN_IF_ERROR(ReadFile(residency, "residency.jsonl", ParseResidencyLine, logs.residency, logs));
  }
  return logs;
}

std::string WarningsText(const RunLogs& logs) {
  std::string out;
  for (const std::string& w : logs.warnings) out += w + "\n";
  if (logs.skipped > logs.warnings.size()) {
    out += fmt::format("... and {} more skipped lines\n", logs.skipped - logs.warnings.size());
  }
  return out;
}

}  // namespace tandem::report
