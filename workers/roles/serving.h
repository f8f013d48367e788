// What the serving roles share (the rollout, rollout_role.h, and the
// teacher, teacher_role.h) at run time: the port they listen on, joining
// tandemd's control channel, and the wait for a stop signal or the daemon's
// shutdown. Their common flags are serve_options.h's.
#pragma once

#include <signal.h>

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "workers/inference/tagged_model.h"
#include "workers/roles/engine_control.h"
#include "workers/roles/serve_options.h"
#include "workers/runtime/role_host.h"

namespace tandem::roles {

// The start both roles share: checks --model; blocks SIGTERM and SIGINT
// before any thread starts (LibTorch's, the engine's), so that only
// WaitForStop receives them; sets LibTorch's threads; resolves the port;
// loads the model into tagged memory on --device (CPU fp32, CUDA bf16).
struct ServeStart {
  sigset_t stop_signals;
  int port = 0;
  inference::TaggedModel placed;              // its model moved to `model`
  std::shared_ptr<model::Transformer> model;
};
StatusOr<ServeStart> StartServing(const ServeOptions& o, const inference::TaggedModelOptions& memory);

// Joins tandemd when the flag or $TANDEM_CONTROL names an endpoint (else
// null). A worker in a handoff starts paused, as the daemon assumes of a
// worker that said hello (docs/control-protocol.md): requests are accepted
// and wait for the daemon's first continue. With o.start_released its tags
// are released too. Then the hello from the environment (role
// `default_role` when $TANDEM_ROLE is unset) with the memory's tags, its
// residency, the control handlers of engine_control.h, the reconnect window.
StatusOr<std::unique_ptr<control::RoleHost>> JoinDaemon(const ServeOptions& o, const std::string& default_role,
                                                        EngineParts parts);

// o.port_file with every "{rank}" replaced by $TANDEM_RANK (0 when unset):
// each replica of a role writes its own file.
std::string ExpandRank(std::string path);
// Writes the bound port to ExpandRank(o.port_file) (when set): port_file.h.
void WritePortFile(const ServeOptions& o, int port);

// Until a stop signal (Ok) or the end of the control loop (the daemon's
// shutdown: Ok; a daemon gone for good: its error).
Status WaitForStop(const sigset_t& stop_signals, control::RoleHost* host, const std::string& component);

}  // namespace tandem::roles
