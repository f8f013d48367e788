// `tandem-worker probe` (issue #3 part 5): the control protocol's reference
// worker. It allocates the given tags from tagged memory pools, fills them
// with a pattern, answers every command of schemas/control.schema.json, and
// after each resume checks that backed-up tags came back byte-exact
// (a mismatch is answered with error{code: data_loss}). With `controller` it
// drives `cycles` RL-like cycles itself by sending request_phase for each of
// `phases`. Without an endpoint it runs the cycles locally (release all,
// resume all, verify) and prints one JSON summary line. A probe outlives a
// daemon restart by default: it reconnects (backing off) and says hello again,
// and a controller asks again for the phase it was waiting for.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/control/control_messages.h"
#include "workers/runtime/tagged_memory.h"

namespace tandem::worker {

struct ProbeOptions {
  std::vector<memory::TagSpec> tags;
  std::optional<control::Endpoint> endpoint;  // none: local cycles only
  std::string backend = "auto";               // cpu | cuda | auto
  int device = 0;
  uint64_t cpu_capacity = 0;                  // 0: MemTotal
  bool controller = false;
  int cycles = 3;
  std::vector<std::string> phases = {"rollout", "train", "sync"};
  std::chrono::milliseconds phase_timeout{60'000};
  std::chrono::milliseconds connect_timeout{10'000};
  // After a lost connection (the daemon died or restarted), reconnect within
  // this window, re-sending hello with the same token; 0: exit 1 instead.
  std::chrono::milliseconds reconnect_window{60'000};
  control::Hello hello;                           // role/rank/...; tags filled in
  bool start_released = false;  // release every tag after filling it, before hello (the group starts empty)
  std::string corrupt_tag;  // fault injection for tests: flip a byte before each release of this tag
};

// Runs the probe; returns the process exit status (0: shut down cleanly or
// cycles done; 1: control or memory failure, logged).
int RunProbe(const ProbeOptions& options);

}  // namespace tandem::worker
