// Writers for <run_dir>/handoff.jsonl and <run_dir>/residency.jsonl
// (docs/handoff.md "Logs"; schemas/handoff.schema.json and
// schemas/residency.schema.json are the line formats; docs/handoff.md shows
// an example of each).
//
// handoff.jsonl: one line per command and tag (a command without tags, e.g.
// pause, is one line with "tag": null). residency.jsonl: one line per change
// of a (worker, tag). Both carry the allocator configuration of the line's
// role (PYTORCH_CUDA_ALLOC_CONF and the other allocator variables, as the
// task's environment has them after env overrides). Each line is written
// with one write(2) on an O_APPEND descriptor, so a crash leaves whole lines.
//
// Every line carries "event": the number (1-based) of the group journal's
// event that produced it. A daemon killed between journaling an event and
// writing its lines replays the journal on restart and hands every replayed
// event's actions to WriteAll again: the writer skips the events each file
// already holds (the last "event" of the group found at Open), so after a
// restart each file has every event's lines exactly once.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "orchestrator/handoff/types.h"

namespace tandem::handoff {

using EnvMap = std::map<std::string, std::string>;

// The allocator variables of a task's final environment:
// PYTORCH_CUDA_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF,
// PYTORCH_NO_CUDA_MEMORY_CACHING, TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT,
// CUDA_MODULE_LOADING, and any variable whose name contains "ALLOC".
EnvMap AllocatorConfig(const EnvMap& env);

// What every line of a group carries besides its record.
struct LogContext {
  std::string group;                              // the colocation group (its owner role)
  std::map<std::string, EnvMap> allocator;        // role name -> its AllocatorConfig
  std::map<WorkerId, std::vector<int>> gpus;      // worker -> its logical GPU ids (the job's namespace)

  const EnvMap& AllocatorOf(const std::string& role) const;
  const std::vector<int>& GpusOf(const WorkerId& w) const;
};

// The lines, as JSON values (one per tag for HandoffLines).
std::vector<nlohmann::json> HandoffLines(const LogContext& ctx, const HandoffRecord& r);
nlohmann::json ResidencyLine(const LogContext& ctx, const ResidencyRecord& r);

class LogWriter {
 public:
  // Opens (creating, appending) both files under `run_dir`.
  static StatusOr<std::unique_ptr<LogWriter>> Open(const std::string& run_dir, LogContext ctx);
  ~LogWriter();
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  // Writes the records among `actions` (others are skipped), produced by
  // the group's event number `event`, one write(2) per file; a file that
  // already holds lines of `event` or a later event gets nothing.
  Status WriteAll(const std::vector<Action>& actions, uint64_t event);

 private:
  LogWriter(int handoff_fd, int residency_fd, LogContext ctx);

  int handoff_fd_;
  int residency_fd_;
  LogContext ctx_;
  uint64_t handoff_logged_ = 0;    // last event with lines in handoff.jsonl
  uint64_t residency_logged_ = 0;  // same for residency.jsonl
};

}  // namespace tandem::handoff
