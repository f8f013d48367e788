// The native workers of this build (native_workers.h).
#include "common/native_workers.h"

#include <array>

namespace tandem {
namespace {

// One row per subcommand of tandem-worker (workers/tandem_worker_main.cc).
constexpr std::array<NativeWorker, 6> kNativeWorkers = {{
    {"probe", "allocate tagged pools, fill them, obey the control protocol, verify after resume"},
    {"sft", "train a small model (from scratch or an HF directory) on a data set's reference solutions"},
    {"rollout", "serve generation from an HF model directory over SGLang's native HTTP API"},
    {"teacher", "score token sequences (per-token and top-k log-probs) with an HF model over HTTP"},
    {"actor", "train with GRPO-family RL on rollouts' samples, driving the job's phases and publishing weights"},
    {"proxy", "serve the OpenAI API (chat, completions, tool calls) in front of rollouts, recording each session's tokens"},
}};

}  // namespace

std::span<const NativeWorker> NativeWorkers() { return kNativeWorkers; }

std::vector<std::string> NativeWorkerNames() {
  std::vector<std::string> out;
  for (const NativeWorker& w : kNativeWorkers) out.emplace_back(w.name);
  return out;
}

}  // namespace tandem
