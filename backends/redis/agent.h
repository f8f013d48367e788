// The node agent, `tandem-agent` (issue #6 part 1; docs/redis.md): one per
// machine. It registers the node in Redis under a lease it renews by
// heartbeat, takes start/signal/kill commands from its own stream through a
// consumer group, runs tasks with the local backend (LocalExecutor, so the
// environment the daemon built by BuildTaskEnvironment, the device variables
// and the exec shim are exactly the local path's), and streams state changes
// back (started with pid, exited with its TaskExit).
//
// Threads. The agent's state (its task table, the LocalExecutor) lives on one
// io_context. All Redis I/O happens on a dedicated thread, which posts
// commands to the io_context and sends what the io_context queued (events,
// acks) — no blocking hiredis call runs on the io thread.
//
// Acknowledgement. A start command is XACKed only after the task was started
// and its "started" state written, so an agent that dies in between gets the
// command again (pending entries are read first on every (re)connect); a
// start for a task the agent already knows, or whose hash is no longer
// "assigned", is acknowledged without starting anything.
//
// Fencing. The lease is renewed every lease/3. When no renewal has succeeded
// for `lease` (measured from when the last successful renewal was sent, so it
// happens no later than the key expires in Redis), the agent kills every task
// by itself: the daemon already counts them lost. After Redis is back the
// agent registers again and takes new work. Its killed tasks are reported as
// exited (SIGKILL, detail "fenced: ...") once Redis is reachable.
//
// Signatures. Every command must carry a valid HMAC under the cluster key,
// be fresh and not a replay (command_signing.h); anything else is logged
// ("agent refusing command ... reason=...") and acknowledged, never run.
// Log tails. A signed {"op":"tail","task_id":launch,"stream":"stdout"|"stderr",
// "max_bytes":N,"reply":"<p>:tail:..."} makes the agent read the last N
// bytes (at most 1 MiB) of that launch's output file on this node and SET
// them at the reply key (expiring after 30 s); the daemon polls for it
// (RedisExecutor::Tail). The agent remembers the files of its last 4096 launches.
//
// Devices. A start command names the node-local GPU slots the daemon chose
// ("devices", node_placement.h); the agent maps them through its own --gpus
// list and sets CUDA_VISIBLE_DEVICES to those physical ids (the last layer
// of task_env.h, as the local path does). A slot the node does not have is
// refused (the task exits 127 with the reason).
//
// Signed writes. Everything the daemon trusts is signed under the cluster
// key: the node record (an envelope for its key), events (stream entries
// like commands), the signed copy of a task's state in its hash, tail
// replies, and the node's task list (which a restarted agent kills from).
//
// Replay memory. The nonces of accepted commands are kept in
// <state_dir>/<prefix>.<name>.nonces (nonce_journal.h), written before the
// commands run, so a replay is refused after an agent restart too.
//
// Run root. With run_root set, paths under the job's run directory
// (TANDEM_RUN_DIR) — cwd, stdout/stderr, the exit record and TANDEM_RUN_DIR
// itself — are moved to <run_root>/<job id> on this node, for nodes that do
// not share the daemon's file system; log tails read them there.
//
// Malformed commands are logged and acknowledged, never fatal.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "backends/local/local_executor.h"
#include "backends/redis/agent_watchdog.h"
#include "backends/redis/command_signing.h"
#include "backends/redis/redis_conn.h"
#include "backends/redis/redis_protocol.h"

namespace tandem::backends::redis {

struct AgentOptions {
  std::string name;     // node name, unique in the cluster
  std::string address;  // how other nodes reach this one (recorded, informative)
  RedisConfig redis;
  Keys keys;
  std::chrono::milliseconds lease{3000};
  std::vector<int> gpus;  // physical GPU ids on this node; slot i of a start command is gpus[i]
  int cpus = 0;           // 0: detected
  long long memory_bytes = 0;  // 0: detected
  LocalExecutorOptions local;
  // Required: commands not signed under this key are refused (command_signing.h).
  std::optional<ClusterKey> cluster_key;
  // Signed commands older (or further in the future) than this are refused as stale.
  std::chrono::milliseconds max_message_age{60000};
  // Where the nonce memory lives; "" keeps it in memory only.
  std::string state_dir;
  // "" runs tasks at the paths the daemon gave; else under <run_root>/<job id>.
  std::string run_root;
};

// The default state directory: $XDG_STATE_HOME/tandem-agent, else
// $HOME/.local/state/tandem-agent, else /var/tmp/tandem-agent-<uid>.
std::string DefaultAgentStateDir();

class Agent {
 public:
  // Creates the local executor; nothing touches Redis until Start().
  static StatusOr<std::unique_ptr<Agent>> Create(boost::asio::io_context& io, AgentOptions options);
  ~Agent();

  // Hands the agent its watchdog (agent_watchdog.h), told of every task
  // start and end from now on. Optional; call before Start().
  void SetWatchdog(AgentWatchdog watchdog) { watchdog_ = std::move(watchdog); }

  // Starts the Redis thread (it connects with backoff; Redis may be down).
  void Start();
  // Kills every task, reports their exits (best effort, bounded), removes the
  // node's registration and stops the Redis thread. Call on the io thread.
  void Shutdown();

  // The node's registration record.
  nlohmann::json NodeRecord() const;
  size_t task_count() const { return tasks_.size(); }

 private:
  struct Outgoing {
    nlohmann::json event;       // written to the task hash and the events stream; null for none
    std::string ack_id;         // command entry to XACK after the event; "" for none
    std::string reply_key;      // a log tail's reply: SET reply_key reply PX 30000; "" for none
    std::string reply;
  };

  Agent(boost::asio::io_context& io, AgentOptions options) : io_(io), options_(std::move(options)) {}

  // io thread
  void OnCommand(const std::string& entry_id, const std::string& text);
  void HandleStart(const std::string& entry_id, const nlohmann::json& msg);
  // Maps the start's GPU slots and run root onto this node; InvalidArgument when it cannot.
  Status Localize(const nlohmann::json& msg, LaunchRequest* req) const;
  void HandleTail(const std::string& entry_id, const std::string& launch, const nlohmann::json& msg);
  void OnLocalExit(const std::string& task_id, const TaskExit& exit);
  void Fence();
  void Queue(Outgoing out);

  // Redis thread
  void RedisLoop();
  bool EnsureConnected();
  bool Register();
  // Sends the outbox in order; false on a Redis error. Returns early (true)
  // once the lease renewal is due, so that a long outbox cannot let it lapse.
  bool Flush();
  void ReadCommands();
  void KillLeftovers();

  boost::asio::io_context& io_;
  AgentOptions options_;
  std::unique_ptr<LocalExecutor> local_;
  std::map<std::string, TaskRef> tasks_;  // running, by task id (io thread)
  std::set<std::string> known_;           // every task id ever started here (io thread)
  std::set<std::string> fenced_;          // killed by fencing (io thread)
  // Output files of the latest launches (running or ended), for log tails (io thread).
  std::map<std::string, std::pair<std::string, std::string>> outputs_;
  std::deque<std::string> outputs_order_;
  bool leftovers_checked_ = false;        // io thread
  AgentWatchdog watchdog_;                // io thread

  std::mutex mu_;
  std::deque<Outgoing> outbox_;  // guarded by mu_
  std::vector<std::pair<std::string, std::string>> leftovers_;  // guarded by mu_: task id, local ref

  std::atomic<bool> stop_{false};
  std::thread thread_;
  // Redis thread only
  std::unique_ptr<RedisConn> conn_;
  std::unique_ptr<CommandVerifier> verifier_;
  bool reading_pending_ = true;
  bool fenced_now_ = false;
  std::chrono::steady_clock::time_point last_renew_sent_{};
  std::chrono::steady_clock::time_point next_heartbeat_{};
  std::chrono::milliseconds backoff_{100};
  std::chrono::steady_clock::time_point next_connect_{};
  std::chrono::steady_clock::time_point busy_until_{};  // short read blocks until then
};

}  // namespace tandem::backends::redis
