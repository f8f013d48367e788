// One JSON object per line, flushed at once, appended to a file or written
// to stdout (the roles' logs and metrics: sft's log, the actor's
// metrics.jsonl). Copies share the file.
#pragma once

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/status.h"

namespace tandem::roles {

class JsonLog {
 public:
  static StatusOr<JsonLog> Open(const std::string& path) {
    JsonLog log;
    if (!path.empty()) {
      log.file_ = std::make_shared<std::ofstream>(path, std::ios::app);
      if (!*log.file_) return ErrnoStatus("open log " + path);
    }
    return log;
  }
  void Write(const nlohmann::json& j) const {
    const std::string line = DumpJson(j) + "\n";
    if (file_) {
      *file_ << line << std::flush;
    } else {
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fflush(stdout);
    }
  }

 private:
  std::shared_ptr<std::ofstream> file_;
};

}  // namespace tandem::roles
