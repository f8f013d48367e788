// Implements the redis executor (redis_executor.h; docs/redis.md).
#include "backends/redis/redis_executor.h"

#include <signal.h>

#include <openssl/rand.h>

#include <algorithm>
#include <random>

#include <boost/asio/post.hpp>

#include "backends/task_env.h"
#include "common/hex.h"
#include "common/log.h"

namespace tandem::backends::redis {
namespace {

std::string NewLaunchId(const std::string& task_id) {
  unsigned char raw[8];
  if (RAND_bytes(raw, sizeof(raw)) != 1) {
    std::random_device rd;
    for (auto& b : raw) b = static_cast<unsigned char>(rd());
  }
  return task_id + "~" + HexEncode(raw, sizeof raw);
}

}  // namespace

StatusOr<std::unique_ptr<RedisExecutor>> RedisExecutor::Create(boost::asio::io_context& io, ExitCallback on_exit,
                                                               RedisExecutorOptions options) {
  if (!options.cluster_key) return InvalidArgument("redis executor: a cluster key is required (--cluster-key-file)");
  std::unique_ptr<RedisExecutor> e(new RedisExecutor(io, std::move(on_exit), std::move(options)));
  TANDEM_ASSIGN_OR_RETURN(e->conn_, RedisConn::Connect(e->options_.redis), "redis executor");
  // Read events from the newest one on; anything older is in the task hashes.
  std::string last_id = "0-0";
  TANDEM_ASSIGN_OR_RETURN(RedisReply last, e->Cmd({"XREVRANGE", e->options_.keys.events(), "+", "-", "COUNT", "1"}),
                          "redis executor: events stream");
  if (last.is_array() && !last.elements.empty() && last.elements[0].is_array() &&
      !last.elements[0].elements.empty())
    last_id = last.elements[0].elements[0].str;
  e->event_verifier_ = std::make_unique<CommandVerifier>(*e->options_.cluster_key, e->options_.keys.events(),
                                                        e->options_.max_message_age);
  RedisExecutor* self = e.get();
  e->reader_ = std::thread([self, last_id] { self->ReaderLoop(last_id); });
  log::Info("redis", "executor ready redis={} prefix={}", e->options_.redis.Describe(), e->options_.keys.prefix);
  return e;
}

RedisExecutor::~RedisExecutor() {
  stop_ = true;
  if (reader_.joinable()) reader_.join();
}

StatusOr<RedisReply> RedisExecutor::Cmd(const std::vector<std::string>& args) {
  if (!conn_ || conn_->broken()) {
    conn_.reset();
    TANDEM_ASSIGN_OR_RETURN(conn_, RedisConn::Connect(options_.redis), "reconnect");
  }
  return conn_->Command(args);
}

Status RedisExecutor::SendCommand(const std::string& node, const nlohmann::json& msg) {
  const std::string stream = options_.keys.commands(node);
  std::vector<std::string> args = {"XADD", stream, "*"};
  for (auto& f : SignCommand(*options_.cluster_key, stream, msg.dump())) args.push_back(std::move(f));
  return Cmd(args).status();
}

StatusOr<RedisExecutor::Ref> RedisExecutor::ParseRef(const TaskRef& ref) const {
  const auto& d = ref.data;
  if (ref.task_id.empty() || !d.is_object() || !d.contains("node") || !d["node"].is_string() ||
      d["node"].get<std::string>().empty() || !d.contains("key") || !d["key"].is_string())
    return InvalidArgument("redis task ref: expected data {node, key}, got " + d.dump());
  std::string launch = d.contains("launch") && d["launch"].is_string() ? d["launch"].get<std::string>() : ref.task_id;
  return Ref{d["node"].get<std::string>(), d["key"].get<std::string>(), launch};
}

StatusOr<std::vector<NodeCapacity>> RedisExecutor::ReadNodes() {
  TANDEM_ASSIGN_OR_RETURN(RedisReply names, Cmd({"SMEMBERS", options_.keys.nodes()}), "list nodes");
  std::vector<NodeCapacity> live;
  for (const auto& n : names.elements) {
    const std::string key = options_.keys.node(n.str);
    TANDEM_ASSIGN_OR_RETURN(RedisReply rec, Cmd({"GET", key}), "node record");
    if (rec.is_nil()) continue;
    auto text = OpenEnvelope(*options_.cluster_key, key, rec.str, NowMs(), options_.max_message_age);
    auto j = text.ok() ? ParseMessage(*text) : StatusOr<nlohmann::json>(text.status());
    if (!j.ok()) {
      std::string& last = refused_nodes_[n.str];
      if (last != j.status().message())
        log::Warn("redis", "ignoring node registration node={} reason={}", n.str, j.status().message());
      last = j.status().message();
      continue;
    }
    refused_nodes_.erase(n.str);
    NodeCapacity c;
    c.name = n.str;
    c.gpus = (*j).contains("gpus") && (*j)["gpus"].is_array() ? static_cast<int>((*j)["gpus"].size()) : 0;
    live.push_back(std::move(c));
  }
  std::sort(live.begin(), live.end(), [](const NodeCapacity& a, const NodeCapacity& b) { return a.name < b.name; });
  return live;
}

StatusOr<std::vector<std::string>> RedisExecutor::LiveNodes() {
  TANDEM_ASSIGN_OR_RETURN(auto nodes, ReadNodes(), "live nodes");
  std::vector<std::string> out;
  for (const auto& n : nodes) out.push_back(n.name);
  return out;
}

void RedisExecutor::Track(const std::string& launch, const Tracked& t, const NodeChoice& choice) {
  launches_[launch] = t;
  by_task_[t.task_id] = launch;
  placer_.Hold(t.job_id, t.logical, choice);
  std::lock_guard<std::mutex> lock(mu_);
  ++watched_nodes_[t.node];
}

void RedisExecutor::Report(const std::string& launch, const TaskExit& exit) {
  auto it = launches_.find(launch);
  if (it == launches_.end()) return;  // already reported (or not ours)
  const Tracked t = it->second;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (--watched_nodes_[t.node] <= 0) watched_nodes_.erase(t.node);
  }
  placer_.Release(t.job_id, t.logical, t.node);
  launches_.erase(it);
  if (auto b = by_task_.find(t.task_id); b != by_task_.end() && b->second == launch) by_task_.erase(b);
  on_exit_(t.task_id, exit);
}

StatusOr<TaskRef> RedisExecutor::Start(const LaunchRequest& request) {
  if (by_task_.count(request.task_id)) return AlreadyExists("redis: task " + request.task_id + " is already running");
  TANDEM_ASSIGN_OR_RETURN(std::vector<int> logical, ParseDeviceList(EnvValue(request.env, "TANDEM_DEVICES")),
                          "start " + request.task_id + ": TANDEM_DEVICES");
  const auto now = std::chrono::steady_clock::now();
  if (live_cache_.empty() || now - live_cache_at_ >= options_.lease_check) {
    TANDEM_ASSIGN_OR_RETURN(live_cache_, ReadNodes(), "start " + request.task_id + ": placement");
    live_cache_at_ = now;
  }
  std::vector<NodeCapacity> live = live_cache_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& n : live) n.tasks = watched_nodes_.count(n.name) ? watched_nodes_[n.name] : 0;
  }
  TANDEM_ASSIGN_OR_RETURN(NodeChoice choice, placer_.Place(request.job_id, logical, live),
                          "start " + request.task_id);
  const std::string& node = choice.node;
  const std::string launch = NewLaunchId(request.task_id);
  const std::string key = options_.keys.task(launch);
  TANDEM_RETURN_IF_ERROR(Cmd({"HSET", key, "node", node, "state", "assigned", "updated_ms", std::to_string(NowMs())})
                             .status(), "start " + request.task_id);
  nlohmann::json msg = {{"op", "start"}, {"task_id", launch}, {"request", RequestToJson(request)}};
  if (!choice.slots.empty()) msg["devices"] = choice.slots;  // the node's GPU slots; the agent maps them
  if (Status sent = SendCommand(node, msg); !sent.ok())
    // The command may be in the stream with only the reply lost: a retry under
    // a new launch could run the task twice, so this is no "retry later".
    return Internal("start " + request.task_id + ": queueing the start command for node " + node + ": " +
                    sent.ToString());
  Track(launch, {request.task_id, node, request.job_id, logical}, choice);
  log::Info("redis", "task assigned task={} launch={} node={} slots={}", request.task_id, launch, node,
            nlohmann::json(choice.slots).dump());
  TaskRef ref;
  ref.backend = "redis";
  ref.task_id = request.task_id;
  ref.data = {{"node", node}, {"key", key},         {"launch", launch},
              {"job", request.job_id}, {"logical", logical}, {"slots", choice.slots}};
  return ref;
}

Status RedisExecutor::Signal(const TaskRef& ref, int sig) {
  TANDEM_ASSIGN_OR_RETURN(Ref r, ParseRef(ref), "signal");
  TANDEM_ASSIGN_OR_RETURN(std::string state, TrustedState(r), "signal " + ref.task_id);
  if (state.empty() || state == "exited" || state == "lost") return Status::Ok();
  nlohmann::json msg = {{"op", "signal"}, {"task_id", r.launch}, {"sig", sig}};
  return SendCommand(r.node, msg).WithContext("signal");
}

Status RedisExecutor::Kill(const TaskRef& ref) {
  TANDEM_ASSIGN_OR_RETURN(Ref r, ParseRef(ref), "kill");
  TANDEM_ASSIGN_OR_RETURN(std::string state, TrustedState(r), "kill " + ref.task_id);
  if (state.empty() || state == "exited" || state == "lost") return Status::Ok();
  nlohmann::json msg = {{"op", "kill"}, {"task_id", r.launch}};
  TANDEM_RETURN_IF_ERROR(SendCommand(r.node, msg), "kill");
  const auto deadline = std::chrono::steady_clock::now() + options_.kill_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    TANDEM_ASSIGN_OR_RETURN(state, TrustedState(r), "kill " + ref.task_id);
    if (state == "exited" || state == "lost") return Status::Ok();
    TANDEM_ASSIGN_OR_RETURN(RedisReply lease, Cmd({"EXISTS", options_.keys.node(r.node)}), "kill");  // presence only
    if (lease.integer == 0) return Status::Ok();  // the agent fences itself; the task is reported lost
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return DeadlineExceeded("kill " + ref.task_id + ": node " + r.node + " did not report the task gone within " +
                          std::to_string(options_.kill_timeout.count()) + " ms");
}

StatusOr<std::string> RedisExecutor::Tail(const TaskRef& ref, const std::string& stream, size_t max_bytes,
                                          std::chrono::milliseconds timeout) {
  TANDEM_ASSIGN_OR_RETURN(Ref r, ParseRef(ref), "tail");
  if (stream != "stdout" && stream != "stderr") return InvalidArgument("tail: stream must be stdout or stderr");
  const std::string reply_key = options_.keys.prefix + ":tail:" + NewLaunchId(r.launch);
  nlohmann::json msg = {{"op", "tail"}, {"task_id", r.launch}, {"stream", stream},
                        {"max_bytes", static_cast<long long>(std::min<size_t>(max_bytes, 1 << 20))},
                        {"reply", reply_key}};
  TANDEM_RETURN_IF_ERROR(SendCommand(r.node, msg), "tail " + ref.task_id);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    TANDEM_ASSIGN_OR_RETURN(RedisReply got, Cmd({"GET", reply_key}), "tail " + ref.task_id);
    if (!got.is_nil()) {
      (void)Cmd({"DEL", reply_key});
      auto text = OpenEnvelope(*options_.cluster_key, reply_key, got.str, NowMs(), options_.max_message_age);
      if (!text.ok()) return text.status().WithContext("tail " + ref.task_id + ": reply");
      auto j = ParseMessage(*text);
      if (!j.ok()) return j.status().WithContext("tail reply");
      if (!(*j).value("ok", false)) return NotFound("tail " + ref.task_id + ": " + (*j).value("error", std::string("?")));
      return (*j).value("data", std::string());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return DeadlineExceeded("tail " + ref.task_id + ": node " + r.node + " did not answer within " +
                          std::to_string(timeout.count()) + " ms");
}

bool RedisExecutor::Alive(const TaskRef& ref) {
  auto r = ParseRef(ref);
  if (!r.ok()) return false;
  auto state = TrustedState(*r);
  if (!state.ok() || (*state != "assigned" && *state != "started")) return false;
  auto lease = Cmd({"EXISTS", options_.keys.node(r->node)});
  return lease.ok() && lease->integer == 1;
}

Status RedisExecutor::Reattach(const TaskRef& ref) {
  TANDEM_ASSIGN_OR_RETURN(Ref r, ParseRef(ref), "reattach");
  if (launches_.count(r.launch)) return Status::Ok();
  nlohmann::json signed_msg;
  TANDEM_ASSIGN_OR_RETURN(std::string state, TrustedState(r, &signed_msg), "reattach " + ref.task_id);
  const auto& d = ref.data;
  Tracked t{ref.task_id, r.node, d.value("job", std::string()), {}};
  NodeChoice choice{r.node, {}};
  if (d.contains("logical") && d["logical"].is_array() && d.contains("slots") && d["slots"].is_array() &&
      d["logical"].size() == d["slots"].size())
    for (size_t i = 0; i < d["logical"].size(); ++i)
      if (d["logical"][i].is_number_integer() && d["slots"][i].is_number_integer()) {
        t.logical.push_back(d["logical"][i].get<int>());
        choice.slots.push_back(d["slots"][i].get<int>());
      }
  Track(r.launch, t, choice);
  if (state == "assigned" || state == "started")
    return Status::Ok();  // the reader reports the exit, or the lease check reports it lost
  TaskExit x;
  x.ended_at = std::chrono::system_clock::now();
  x.status_known = false;
  if (state == "exited") {
    auto parsed = signed_msg.contains("exit") ? ExitFromJson(signed_msg["exit"])
                                              : StatusOr<TaskExit>(InvalidArgument("no exit"));
    if (parsed.ok()) x = *parsed;
    else x.detail = "exit record in redis is malformed: " + parsed.status().ToString();
  } else {
    x.detail = state == "lost" ? "node " + r.node + " lease expired: task lost"
                               : "no record of the task in redis (state '" + state + "')";
  }
  std::weak_ptr<int> alive = alive_;
  boost::asio::post(io_, [this, alive, id = r.launch, x] {
    if (alive.lock()) Report(id, x);
  });
  return Status::Ok();
}

StatusOr<std::string> RedisExecutor::TrustedState(const Ref& r, nlohmann::json* signed_msg) {
  TANDEM_ASSIGN_OR_RETURN(RedisReply h, Cmd({"HMGET", r.key, "state", "event"}), "task state");
  if (!h.is_array() || h.elements.size() != 2 || h.elements[0].is_nil()) return std::string();
  const std::string state = h.elements[0].str;
  if (state != "exited" && state != "lost") return state;
  // A terminal state ends the task for the daemon: believe it only when signed.
  auto text = h.elements[1].is_nil() ? StatusOr<std::string>(PermissionDenied("unsigned"))
                                     : OpenEnvelope(*options_.cluster_key, r.key, h.elements[1].str, 0,
                                                    std::chrono::milliseconds(0));
  auto j = text.ok() ? ParseMessage(*text) : StatusOr<nlohmann::json>(text.status());
  if (j.ok() && (*j).value("task_id", std::string()) == r.launch && (*j).value("state", std::string()) == state) {
    if (signed_msg) *signed_msg = *j;
    return state;
  }
  log::Warn("redis", "ignoring task state without a valid signature launch={} state={} reason={}", r.launch, state,
            j.ok() ? std::string("signed copy does not match") : j.status().message());
  return std::string("started");
}

void RedisExecutor::OnEvent(const StreamEntry& entry) {
  if (Status st = event_verifier_->Verify(entry, NowMs()); !st.ok()) {
    log::Warn("redis", "ignoring event entry={} reason={}", entry.id, st.message());
    return;
  }
  auto j = ParseMessage(entry.Field("msg"));
  if (!j.ok() || !(*j)["task_id"].is_string() || !(*j)["state"].is_string()) {
    log::Warn("redis", "ignoring malformed event: {}", j.ok() ? std::string("missing task_id or state") : j.status().ToString());
    return;
  }
  if ((*j)["state"] != "exited") return;
  const std::string id = (*j)["task_id"].get<std::string>();
  if (!launches_.count(id)) return;  // another daemon's, or an earlier launch's
  auto x = j->contains("exit") ? ExitFromJson((*j)["exit"]) : StatusOr<TaskExit>(InvalidArgument("no exit"));
  if (!x.ok()) {
    log::Warn("redis", "ignoring exit event with a malformed exit task={} error={}", id, x.status().ToString());
    return;
  }
  Report(id, *x);
}

void RedisExecutor::OnNodeLost(const std::string& node) {
  live_cache_.erase(std::remove_if(live_cache_.begin(), live_cache_.end(),
                                   [&](const NodeCapacity& n) { return n.name == node; }),
                    live_cache_.end());
  std::vector<std::string> lost;
  for (const auto& [id, t] : launches_)
    if (t.node == node) lost.push_back(id);
  if (lost.empty()) return;
  log::Warn("redis", "node lease expired node={}: {} task(s) lost", node, lost.size());
  for (const auto& id : lost) {
    const std::string key = options_.keys.task(id);
    const nlohmann::json ev = {{"task_id", id}, {"node", node}, {"state", "lost"}};
    (void)Cmd({"HSET", key, "state", "lost", "updated_ms", std::to_string(NowMs()), "event",
               SignEnvelope(*options_.cluster_key, key, ev.dump())});
    TaskExit x;
    x.status_known = false;
    x.detail = "node " + node + " lease expired: task lost (its agent kills it when it notices the lapse)";
    x.ended_at = std::chrono::system_clock::now();
    Report(id, x);
  }
}

void RedisExecutor::ReaderLoop(std::string last_id) {
  std::unique_ptr<RedisConn> conn;
  auto next_check = std::chrono::steady_clock::now();
  std::weak_ptr<int> alive = alive_;
  while (!stop_) {
    if (!conn || conn->broken()) {
      conn.reset();
      auto c = RedisConn::Connect(options_.redis);
      if (!c.ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        continue;
      }
      conn = std::move(c).value();
    }
    auto r = conn->Command({"XREAD", "COUNT", "256", "BLOCK", "100", "STREAMS", options_.keys.events(), last_id});
    if (!r.ok()) {
      if (!conn->broken()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    for (auto& e : ParseStreamReply(*r)) {
      last_id = e.id;
      boost::asio::post(io_, [this, alive, e] {
        if (alive.lock()) OnEvent(e);
      });
    }
    if (std::chrono::steady_clock::now() < next_check) continue;
    next_check = std::chrono::steady_clock::now() + options_.lease_check;
    std::vector<std::string> nodes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [n, c] : watched_nodes_) nodes.push_back(n);
    }
    for (const auto& n : nodes) {
      const std::string key = options_.keys.node(n);
      auto e = conn->Command({"GET", key});
      if (!e.ok()) break;  // Redis unreachable: we cannot tell, decide later
      // A record that is not signed for this node counts as no record: a forged
      // one cannot keep a dead node's tasks alive.
      if (e->is_nil() || !OpenEnvelope(*options_.cluster_key, key, e->str, NowMs(), options_.max_message_age).ok())
        boost::asio::post(io_, [this, alive, n] {
          if (alive.lock()) OnNodeLost(n);
        });
    }
  }
}

}  // namespace tandem::backends::redis
