// The native workers this build's `tandem-worker` has: one table, read by
// tandem-worker's main (its subcommands) and by the job spec parser (a role's
// "worker" must name one of them; docs/jobspec.md "Native workers"). The
// spec's format knows more worker kinds (schemas/jobspec.schema.json: the
// LibTorch actor, rollout and teacher) than a build may have; this table is
// what the binary built beside the daemon can run. common/tests/
// native_workers_test.cc runs `tandem-worker --list-workers` and checks the
// two agree.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

struct NativeWorker {
  std::string_view name;     // the subcommand: `tandem-worker NAME ARGS...`
  std::string_view summary;  // one line, for --help
};

// In tandem-worker's subcommand order.
std::span<const NativeWorker> NativeWorkers();

// The names alone, in the same order.
std::vector<std::string> NativeWorkerNames();

}  // namespace tandem
