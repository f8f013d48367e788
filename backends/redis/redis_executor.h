// The redis executor (issue #6 part 2; docs/redis.md): the daemon's side of
// the Redis backend, behind the Executor interface (executor.h).
//
// Start() picks a live node (its signed registration exists, as seen at
// most lease_check ago) and queues a start command on that node's stream;
// the agent starts the task with the local backend. Placement
// (node_placement.h): each node advertises its GPUs; a task's logical
// devices (TANDEM_DEVICES) are bound to one node and to GPU slots of that
// node that no other held device uses, and the start command carries the
// slots ("devices"), which the agent maps onto its physical ids. A task
// without devices goes to the live node with the fewest tasks.
// TaskRef.data: {node, key (the task hash), launch, job, logical, slots};
// Reattach takes the bindings back from it.
//
// Launches. A task id comes back for every restart of a task, so each Start
// names a launch: "<task_id>~<16 hex digits>". The launch, not the task id,
// is what the agent knows, what the task hash (<p>:task:<launch>) and the
// events stream are keyed by, and what signal/kill commands name: a late
// event of an earlier launch (a fenced node reporting after its partition
// healed) can never end, or be mistaken for, the launch running now.
//
// Every command is signed (command_signing.h); agents run nothing else.
// What agents write is signed too, and the daemon trusts nothing else: an
// event on the events stream that is unsigned, wrongly signed, stale or
// replayed is dropped and logged; a node record that is not signed for its
// key does not count as a live node; a terminal state in a task hash
// ("exited", "lost") counts only with its signed copy (field "event").
//
// Exits come from the agents' events stream, read by a dedicated thread that
// posts them to the io_context. The same thread checks the lease of every
// node that has tasks; when a lease key is gone the node's tasks are reported
// lost (status_known=false, detail "node <n> lease expired ...") and their
// hash says state=lost. Each ExitCallback fires exactly once.
//
// Threading: Start/Signal/Kill/Alive/Reattach make short Redis round trips
// on the calling (io) thread through their own connection, bounded by
// RedisConfig::timeout; Kill() additionally waits (bounded by kill_timeout)
// for the agent to report the task gone, as its contract requires. Blocking
// reads (XREAD BLOCK) never run on the io thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>

#include "backends/executor.h"
#include "backends/redis/command_signing.h"
#include "backends/redis/node_placement.h"
#include "backends/redis/redis_conn.h"
#include "backends/redis/redis_protocol.h"

namespace tandem::backends::redis {

struct RedisExecutorOptions {
  RedisConfig redis;
  Keys keys;
  std::chrono::milliseconds kill_timeout{5000};
  // How often node leases are checked for nodes with tasks.
  std::chrono::milliseconds lease_check{250};
  // Required: every command for an agent is signed with it (command_signing.h).
  std::optional<ClusterKey> cluster_key;
  // Events and node records signed further than this from our clock are refused.
  std::chrono::milliseconds max_message_age{60000};
};

class RedisExecutor final : public Executor {
 public:
  // Connects (Unavailable when Redis is down) and starts the reader thread.
  static StatusOr<std::unique_ptr<RedisExecutor>> Create(boost::asio::io_context& io, ExitCallback on_exit,
                                                         RedisExecutorOptions options);
  // Stops the reader thread; tasks keep running (a later executor can Reattach).
  ~RedisExecutor() override;

  std::string_view kind() const override { return "redis"; }
  // Unavailable when no node holds a live lease, ResourceExhausted (naming
  // each node's free/advertised GPUs) when none has room for the task's
  // devices; nothing is queued or written then, and the daemon retries
  // later (IsRetryableStart, executor.h; docs/redis.md "Waiting for capacity").
  StatusOr<TaskRef> Start(const LaunchRequest& request) override;
  Status Signal(const TaskRef& ref, int sig) override;
  Status Kill(const TaskRef& ref) override;
  Status Reattach(const TaskRef& ref) override;
  bool Alive(const TaskRef& ref) override;

  // The last `max_bytes` (at most 1 MiB) of a launch's stdout or stderr, read
  // by the agent on its node (for run directories the nodes do not share).
  // Blocks the caller up to `timeout`; DeadlineExceeded when the agent does
  // not answer in time, NotFound when it has no record of the launch.
  StatusOr<std::string> Tail(const TaskRef& ref, const std::string& stream, size_t max_bytes,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));

  // Names of nodes whose lease is live now (and whose record is signed).
  StatusOr<std::vector<std::string>> LiveNodes();

 private:
  struct Ref {
    std::string node;
    std::string key;
    std::string launch;
  };
  struct Tracked {
    std::string task_id;
    std::string node;
    std::string job_id;
    std::vector<int> logical;
  };
  RedisExecutor(boost::asio::io_context& io, ExitCallback on_exit, RedisExecutorOptions options)
      : io_(io), on_exit_(std::move(on_exit)), options_(std::move(options)) {}
  StatusOr<Ref> ParseRef(const TaskRef& ref) const;
  StatusOr<RedisReply> Cmd(const std::vector<std::string>& args);
  // XADDs `msg` to `node`'s command stream, signed under the cluster key.
  Status SendCommand(const std::string& node, const nlohmann::json& msg);
  // The live nodes with their advertised GPUs (signed records only).
  StatusOr<std::vector<NodeCapacity>> ReadNodes();
  void Track(const std::string& launch, const Tracked& t, const NodeChoice& choice);
  void Report(const std::string& launch, const TaskExit& exit);  // io thread
  void OnEvent(const StreamEntry& entry);                          // io thread
  // The task hash's state; a terminal one only when its signed copy says so
  // (otherwise "started"). `signed_msg` gets the signed event, if any.
  StatusOr<std::string> TrustedState(const Ref& r, nlohmann::json* signed_msg = nullptr);
  void OnNodeLost(const std::string& node);                        // io thread
  void ReaderLoop(std::string last_id);

  boost::asio::io_context& io_;
  ExitCallback on_exit_;
  RedisExecutorOptions options_;
  std::unique_ptr<RedisConn> conn_;           // io thread
  // Placement's view of the live nodes, refreshed at most every lease_check
  // (io thread): a burst of Starts costs two round trips each, not 2 + nodes.
  std::vector<NodeCapacity> live_cache_;
  std::chrono::steady_clock::time_point live_cache_at_{};
  NodePlacer placer_;                          // io thread
  std::map<std::string, std::string> refused_nodes_;  // node -> why its record was refused (logged once)
  std::unique_ptr<CommandVerifier> event_verifier_;   // io thread
  std::map<std::string, Tracked> launches_;     // supervised launch -> task (io thread)
  std::map<std::string, std::string> by_task_;  // task id -> its supervised launch (io thread)

  std::mutex mu_;
  std::map<std::string, int> watched_nodes_;  // node -> supervised task count; guarded by mu_

  std::atomic<bool> stop_{false};
  std::thread reader_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // posted handlers hold a weak_ptr
};

}  // namespace tandem::backends::redis
