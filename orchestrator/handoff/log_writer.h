// Writers for <run_dir>/handoff.jsonl and <run_dir>/residency.jsonl
// (DESIGN.md "Residency ledger and logs"; schemas/handoff.schema.json and
// schemas/residency.schema.json are the line formats; docs/handoff.md shows
// an example of each).
//
// handoff.jsonl: one line per command and tag (a command without tags, e.g.
// pause, is one line with "tag": null). residency.jsonl: one line per change
// of a (worker, tag). Both carry the allocator configuration of the line's
// role (PYTORCH_CUDA_ALLOC_CONF and the other allocator variables, as the
// task's environment has them after env overrides). Each line is written
// with one write(2) on an O_APPEND descriptor, so a crash leaves whole lines.
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

// The lines, as JSON values (one per tag for HandoffLines).
std::vector<nlohmann::json> HandoffLines(const std::string& group, const HandoffRecord& r,
                                         const EnvMap& allocator);
nlohmann::json ResidencyLine(const std::string& group, const ResidencyRecord& r, const EnvMap& allocator);

class LogWriter {
 public:
  // Opens (creating, appending) both files under `run_dir`. `allocator` maps
  // a role name to its AllocatorConfig.
  static StatusOr<std::unique_ptr<LogWriter>> Open(const std::string& run_dir, std::string group,
                                                   std::map<std::string, EnvMap> allocator);
  ~LogWriter();
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  Status Write(const HandoffRecord& r);
  Status Write(const ResidencyRecord& r);
  // Writes the records among `actions` (others are skipped).
  Status WriteAll(const std::vector<Action>& actions);

 private:
  LogWriter(int handoff_fd, int residency_fd, std::string group, std::map<std::string, EnvMap> allocator);
  const EnvMap& AllocatorOf(const std::string& role) const;

  int handoff_fd_;
  int residency_fd_;
  std::string group_;
  std::map<std::string, EnvMap> allocator_;
};

}  // namespace tandem::handoff
