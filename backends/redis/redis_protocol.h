// The Redis layout and messages shared by the node agent (agent.h) and the
// redis executor (redis_executor.h); docs/redis.md "Keys and streams" is the
// reference. Every key starts with a prefix (default "tandem"), so several
// clusters or test runs can share one Redis.
//
//   <p>:nodes                set of node names ever registered
//   <p>:node:<name>          string, the node's JSON record; expires with the
//                            node's lease (PX), renewed by the agent's heartbeat
//   <p>:agent:<name>:cmds    stream of commands for that node's agent,
//                            consumer group "agent"; field "msg" = JSON
//                            {"op":"start","task_id","request":{...},"devices"?:[slot...]} |
//                            {"op":"signal","task_id","sig"} | {"op":"kill","task_id"}
//   <p>:task:<task_id>       hash: node, state (assigned|started|exited|lost),
//                            pid, exit (TaskExit JSON), updated_ms
//   <p>:events               stream of task state changes from all agents;
//                            field "msg" = {"task_id","node","state","pid"|"exit"}
//   <p>:groups               hash: placement group -> node (written by older daemons;
//                            placement now lives in task refs, node_placement.h)
//   <p>:node:<name>:tasks    hash: task_id -> local TaskRef JSON of tasks the
//                            agent runs (so a restarted agent can kill leftovers)
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "backends/executor.h"
#include "common/status.h"

namespace tandem::backends::redis {

struct Keys {
  std::string prefix = "tandem";
  std::string nodes() const { return prefix + ":nodes"; }
  std::string node(const std::string& n) const { return prefix + ":node:" + n; }
  std::string node_tasks(const std::string& n) const { return prefix + ":node:" + n + ":tasks"; }
  std::string commands(const std::string& n) const { return prefix + ":agent:" + n + ":cmds"; }
  std::string task(const std::string& id) const { return prefix + ":task:" + id; }
  std::string events() const { return prefix + ":events"; }
  std::string groups() const { return prefix + ":groups"; }
};

inline constexpr const char* kAgentGroup = "agent";
inline constexpr const char* kVersion = "0.1.0";

inline long long NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// LaunchRequest <-> JSON (the "request" of a start command).
nlohmann::json RequestToJson(const LaunchRequest& r);
StatusOr<LaunchRequest> RequestFromJson(const nlohmann::json& j);

// TaskExit <-> JSON (TaskExit::ToJson's shape).
StatusOr<TaskExit> ExitFromJson(const nlohmann::json& j);

// Sets the launch's control token (common/control/control_token.h) in
// r.env, derived on the node under the cluster key `key` so that it never
// crosses Redis: when r.env has TANDEM_CONTROL, TANDEM_JOB_ID, TANDEM_TASK_ID
// and TANDEM_CONTROL_LAUNCH. Any TANDEM_CONTROL_TOKEN the request carried is
// dropped.
void AddControlToken(LaunchRequest& r, std::string_view key);

// Parses a stream entry's "msg" field: an object, or InvalidArgument saying why not.
StatusOr<nlohmann::json> ParseMessage(const std::string& text);

}  // namespace tandem::backends::redis
