// Logger set-up; see log.h.
#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>
#include <string>

namespace tandem::log {

void Init(std::string_view level) {
  std::string lv(level);
  if (const char* env = std::getenv("TANDEM_LOG_LEVEL"); env && *env) lv = env;
  static bool once = [] {
    auto logger = spdlog::stderr_logger_mt("tandem");
    spdlog::set_default_logger(logger);
    return true;
  }();
  (void)once;
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(lv));
}

}  // namespace tandem::log
