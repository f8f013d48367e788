// Waiting for a model directory (model_wait.h).
#include "workers/roles/model_wait.h"

#include <chrono>
#include <filesystem>
#include <thread>

#include "common/log.h"

namespace tandem::roles {

Status WaitForModelDir(const std::string& dir, double timeout_s, const std::string& component) {
  namespace fs = std::filesystem;
  const fs::path config = fs::path(dir) / "config.json";
  std::error_code ec;
  if (timeout_s <= 0 || fs::exists(config, ec)) return Status::Ok();
  log::Info(component, "waiting up to {:.0f} s for the model {} (another task makes it)", timeout_s, dir);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!fs::exists(config, ec)) {
    if (std::chrono::steady_clock::now() >= deadline)
      return DeadlineExceeded("--model " + dir + ": no config.json after " + std::to_string(static_cast<int64_t>(timeout_s)) +
                              " s (--wait-for-model)");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  log::Info(component, "the model {} is there", dir);
  return Status::Ok();
}

}  // namespace tandem::roles
