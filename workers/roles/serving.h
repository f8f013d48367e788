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
#include "workers/roles/engine_control.h"
#include "workers/roles/serve_options.h"
#include "workers/runtime/role_host.h"

namespace tandem::roles {

// The port to listen on: o.port, else the first of $TANDEM_PORTS, else 0
// (any free port). InvalidArgument for a $TANDEM_PORTS that does not start
// with a port.
StatusOr<int> ListenPort(const ServeOptions& o);

// Blocks SIGTERM and SIGINT in the calling thread (call before starting any
// thread, so that only WaitForStop receives them) and returns the set.
sigset_t BlockStopSignals();

// Joins tandemd when the flag or $TANDEM_CONTROL names an endpoint (else
// null). A worker in a handoff starts paused, as the daemon assumes of a
// worker that said hello (docs/control-protocol.md): requests are accepted
// and wait for the daemon's first continue. With o.start_released its tags
// are released too. Then the hello from the environment (role
// `default_role` when $TANDEM_ROLE is unset) with the memory's tags, its
// residency, the control handlers of engine_control.h, the reconnect window.
StatusOr<std::unique_ptr<control::RoleHost>> JoinDaemon(const ServeOptions& o, const std::string& default_role,
                                                        EngineParts parts);

// Writes the bound port to o.port_file (when set), atomically.
void WritePortFile(const ServeOptions& o, int port);

// Until a stop signal (Ok) or the end of the control loop (the daemon's
// shutdown: Ok; a daemon gone for good: its error).
Status WaitForStop(const sigset_t& stop_signals, control::RoleHost* host, const std::string& component);

}  // namespace tandem::roles
