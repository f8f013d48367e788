// Test-only helpers for the local backend: where the built shim and helper
// binaries are, and the ExecutorHarness for the shared suite.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "backends/local/local_executor.h"
#include "backends/tests/executor_test_fixture.h"

namespace tandem::backends::testing {

// $TANDEM_BIN_DIR/tandem-exec (set by ctest), else the build's bin/ next to tests/.
inline std::filesystem::path ShimPath() {
  if (const char* d = std::getenv("TANDEM_BIN_DIR")) return std::filesystem::path(d) / "tandem-exec";
  return std::filesystem::path(TANDEM_TASK_HELPER).parent_path().parent_path() / "bin" / "tandem-exec";
}

inline std::string HelperPath() { return TANDEM_TASK_HELPER; }

inline ExecutorHarness LocalHarness(LocalExecutorOptions options = {}) {
  return {"local", [options](boost::asio::io_context& io, Executor::ExitCallback cb)
                       -> StatusOr<std::unique_ptr<Executor>> {
            LocalExecutorOptions o = options;
            if (o.exec_shim.empty()) o.exec_shim = ShimPath();
            auto e = LocalExecutor::Create(io, std::move(cb), o);
            if (!e.ok()) return e.status();
            return std::unique_ptr<Executor>(std::move(e).value());
          }};
}

}  // namespace tandem::backends::testing
