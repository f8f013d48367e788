// Human logs: one line per event, `[subsystem] message key=value`, with a level
// (docs/architecture.md). Machine-readable logs (handoff, residency, journal) are
// JSON lines with schemas in schemas/, written elsewhere.
#pragma once

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <string_view>

namespace tandem::log {

// Sets the level ("trace".."error", "off") and the line pattern. Safe to call
// more than once. TANDEM_LOG_LEVEL overrides `level` when set.
void Init(std::string_view level = "info");

template <typename... A>
void Debug(std::string_view sub, fmt::format_string<A...> f, A&&... a) {
  if (spdlog::should_log(spdlog::level::debug))
    spdlog::debug("[{}] {}", sub, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A>
void Info(std::string_view sub, fmt::format_string<A...> f, A&&... a) {
  if (spdlog::should_log(spdlog::level::info))
    spdlog::info("[{}] {}", sub, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A>
void Warn(std::string_view sub, fmt::format_string<A...> f, A&&... a) {
  spdlog::warn("[{}] {}", sub, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A>
void Error(std::string_view sub, fmt::format_string<A...> f, A&&... a) {
  spdlog::error("[{}] {}", sub, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace tandem::log
