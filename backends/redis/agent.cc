// Implements the node agent (agent.h; docs/redis.md "Agents", "Leases and fencing").
#include "backends/redis/agent.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <boost/asio/post.hpp>

#include "common/log.h"
#include "common/task_file.h"

namespace tandem::backends::redis {
namespace {

long long DetectMemoryBytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<long long>(pages) * size : 0;
}

void SetEnv(std::vector<std::string>* env, const std::string& key, const std::string& value) {
  for (auto& kv : *env)
    if (kv.rfind(key + "=", 0) == 0) {
      kv = key + "=" + value;
      return;
    }
  env->push_back(key + "=" + value);
  std::sort(env->begin(), env->end());
}

std::string EnvOf(const std::vector<std::string>& env, const std::string& key) {
  for (const auto& kv : env)
    if (kv.rfind(key + "=", 0) == 0) return kv.substr(key.size() + 1);
  return "";
}

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

std::string DefaultAgentStateDir() {
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) return std::string(x) + "/tandem-agent";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/state/tandem-agent";
  return "/var/tmp/tandem-agent-" + std::to_string(::getuid());
}

StatusOr<std::unique_ptr<Agent>> Agent::Create(boost::asio::io_context& io, AgentOptions options) {
  if (options.name.empty()) options.name = HostName();
  if (options.address.empty()) options.address = HostName();
  if (options.cpus <= 0) options.cpus = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  if (options.memory_bytes <= 0) options.memory_bytes = DetectMemoryBytes();
  if (options.lease < std::chrono::milliseconds(300)) return InvalidArgument("agent: lease must be at least 300 ms");
  if (!options.cluster_key) return InvalidArgument("agent: a cluster key is required (--cluster-key-file)");
  std::unique_ptr<Agent> agent(new Agent(io, std::move(options)));
  Agent* self = agent.get();
  auto local = LocalExecutor::Create(
      io, [self](const std::string& id, const TaskExit& x) { self->OnLocalExit(id, x); }, agent->options_.local);
  if (!local.ok()) return local.status().WithContext("agent: local backend");
  agent->local_ = std::move(local).value();
  agent->verifier_ = std::make_unique<CommandVerifier>(*agent->options_.cluster_key,
                                                       agent->options_.keys.commands(agent->options_.name),
                                                       agent->options_.max_message_age);
  if (!agent->options_.state_dir.empty()) {
    const std::filesystem::path file = std::filesystem::path(agent->options_.state_dir) /
                                       (agent->options_.keys.prefix + "." + agent->options_.name + ".nonces");
    TANDEM_ASSIGN_OR_RETURN(auto journal, NonceJournal::Open(file), "agent: --state-dir");
    TANDEM_RETURN_IF_ERROR(agent->verifier_->UseJournal(std::move(journal), NowMs()), "agent: " + file.string());
    log::Info("redis", "agent nonce memory file={}", file.string());
  }
  return agent;
}

Agent::~Agent() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

nlohmann::json Agent::NodeRecord() const {
  return {{"name", options_.name},   {"address", options_.address}, {"gpus", options_.gpus},
          {"run_root", options_.run_root},
          {"cpus", options_.cpus},   {"memory_bytes", options_.memory_bytes},
          {"version", kVersion},     {"pid", ::getpid()},
          {"lease_ms", options_.lease.count()}, {"renewed_ms", NowMs()}};
}

void Agent::Start() {
  log::Info("redis", "agent starting node={} redis={} lease_ms={}", options_.name, options_.redis.Describe(),
            options_.lease.count());
  thread_ = std::thread([this] { RedisLoop(); });
}

void Agent::Shutdown() {
  for (auto& [id, ref] : std::map<std::string, TaskRef>(tasks_)) {
    fenced_.insert(id);
    (void)local_->Kill(ref);
  }
  // Let the LocalExecutor report the exits, then give the Redis thread a moment to send them.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (!tasks_.empty() && std::chrono::steady_clock::now() < deadline) {
    io_.restart();
    io_.run_one_for(std::chrono::milliseconds(10));
  }
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (outbox_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  watchdog_.Release();
  if (auto c = RedisConn::Connect(options_.redis); c.ok()) {
    (void)(*c)->Command({"DEL", options_.keys.node(options_.name)});
  }
  log::Info("redis", "agent stopped node={}", options_.name);
}

// ---- io thread --------------------------------------------------------------

void Agent::Queue(Outgoing out) {
  std::lock_guard<std::mutex> lock(mu_);
  outbox_.push_back(std::move(out));
}

void Agent::OnCommand(const std::string& entry_id, const std::string& text) {
  auto msg = ParseMessage(text);
  std::string op = msg.ok() && (*msg)["op"].is_string() ? (*msg)["op"].get<std::string>() : "";
  std::string task_id = msg.ok() && (*msg)["task_id"].is_string() ? (*msg)["task_id"].get<std::string>() : "";
  if (!msg.ok() || op.empty() || task_id.empty()) {
    log::Warn("redis", "agent ignoring malformed command node={} entry={} error={}", options_.name, entry_id,
              msg.ok() ? std::string("missing op or task_id") : msg.status().ToString());
    Queue({nullptr, entry_id});
    return;
  }
  if (op == "start") {
    HandleStart(entry_id, *msg);
    return;
  }
  if (op == "tail") {
    HandleTail(entry_id, task_id, *msg);
    return;
  }
  Queue({nullptr, entry_id});  // signal and kill are done once handled here
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;  // already ended (or never here): nothing to do
  if (op == "signal") {
    int sig = (*msg)["sig"].is_number_integer() ? (*msg)["sig"].get<int>() : 0;
    if (sig <= 0 || sig >= NSIG) {
      log::Warn("redis", "agent ignoring signal command with bad sig task={}", task_id);
      return;
    }
    if (auto st = local_->Signal(it->second, sig); !st.ok())
      log::Warn("redis", "signal failed task={} error={}", task_id, st.ToString());
  } else if (op == "kill") {
    if (auto st = local_->Kill(it->second); !st.ok())
      log::Warn("redis", "kill failed task={} error={}", task_id, st.ToString());
  } else {
    log::Warn("redis", "agent ignoring unknown command op={} task={}", op, task_id);
  }
}

void Agent::HandleStart(const std::string& entry_id, const nlohmann::json& msg) {
  const std::string task_id = msg["task_id"].get<std::string>();
  if (known_.count(task_id)) {  // delivered again (pending after a reconnect)
    Queue({nullptr, entry_id});
    return;
  }
  auto req = msg.contains("request") ? RequestFromJson(msg["request"]) : StatusOr<LaunchRequest>(InvalidArgument("no request"));
  // task_id names the launch ("<request.task_id>~<id>", redis_executor.h);
  // the local backend knows the task by its launch, so restarts never collide.
  if (req.ok() && req->task_id != task_id && task_id.rfind(req->task_id + "~", 0) != 0)
    req = InvalidArgument("task_id is not a launch of request.task_id");
  if (req.ok()) req->task_id = task_id;
  if (req.ok())
    if (Status st = Localize(msg, &*req); !st.ok()) req = st;
  known_.insert(task_id);
  if (!req.ok()) {
    log::Warn("redis", "agent refusing malformed start task={} error={}", task_id, req.status().ToString());
    TaskExit x;
    x.exit_code = 127;
    x.detail = "start refused by agent " + options_.name + ": " + req.status().ToString();
    x.ended_at = std::chrono::system_clock::now();
    Queue({{{"task_id", task_id}, {"node", options_.name}, {"state", "exited"}, {"exit", x.ToJson()}}, entry_id});
    return;
  }
  AddControlToken(*req, options_.cluster_key->bytes());
  auto ref = local_->Start(*req);
  if (!ref.ok()) {
    TaskExit x;
    x.exit_code = 127;
    x.detail = "start failed on node " + options_.name + ": " + ref.status().ToString();
    x.ended_at = std::chrono::system_clock::now();
    log::Warn("redis", "task start failed task={} error={}", task_id, ref.status().ToString());
    Queue({{{"task_id", task_id}, {"node", options_.name}, {"state", "exited"}, {"exit", x.ToJson()}}, entry_id});
    return;
  }
  tasks_[task_id] = *ref;
  watchdog_.TaskStarted(task_id, *ref);
  outputs_[task_id] = {req->stdout_path.string(), req->stderr_path.string()};
  outputs_order_.push_back(task_id);
  if (outputs_order_.size() > 4096) {
    outputs_.erase(outputs_order_.front());
    outputs_order_.pop_front();
  }
  int pid = ref->data.value("pid", 0);
  log::Info("redis", "task started task={} pid={} node={}", task_id, pid, options_.name);
  Queue({{{"task_id", task_id}, {"node", options_.name}, {"state", "started"}, {"pid", pid},
          {"local_ref", ref->ToJson()}},
         entry_id});
}

Status Agent::Localize(const nlohmann::json& msg, LaunchRequest* req) const {
  if (msg.contains("devices")) {
    const auto& d = msg["devices"];
    if (!d.is_array()) return InvalidArgument("'devices' must be a list of GPU slots");
    std::string physical;
    for (const auto& slot : d) {
      if (!slot.is_number_integer() || slot.get<long long>() < 0 ||
          slot.get<long long>() >= static_cast<long long>(options_.gpus.size()))
        return InvalidArgument("GPU slot " + slot.dump() + " does not exist on node " + options_.name + " (it has " +
                               std::to_string(options_.gpus.size()) + " GPUs)");
      physical += (physical.empty() ? "" : ",") + std::to_string(options_.gpus[slot.get<size_t>()]);
    }
    SetEnv(&req->env, "CUDA_VISIBLE_DEVICES", physical);
  }
  if (options_.run_root.empty()) return Status::Ok();
  const std::string run_dir = EnvOf(req->env, "TANDEM_RUN_DIR");
  if (run_dir.empty()) return Status::Ok();
  if (req->job_id.empty() || req->job_id.find('/') != std::string::npos || req->job_id == "." || req->job_id == "..")
    return InvalidArgument("job id '" + req->job_id + "' cannot name a directory under --run-root");
  const std::filesystem::path from = std::filesystem::path(run_dir).lexically_normal();
  const std::filesystem::path to = std::filesystem::path(options_.run_root) / req->job_id;
  auto move = [&](std::filesystem::path* p) {
    const auto rel = p->lexically_normal().lexically_relative(from);
    if (!rel.empty() && *rel.begin() != "..") *p = (to / rel).lexically_normal();
  };
  for (auto* p : {&req->cwd, &req->stdout_path, &req->stderr_path, &req->exit_path}) move(p);
  SetEnv(&req->env, "TANDEM_RUN_DIR", to.string());
  std::error_code ec;
  for (const auto& p : {req->cwd, req->stdout_path.parent_path(), req->stderr_path.parent_path(),
                        req->exit_path.parent_path()})
    if (!p.empty()) std::filesystem::create_directories(p, ec);
  return Status::Ok();
}

void Agent::HandleTail(const std::string& entry_id, const std::string& launch, const nlohmann::json& msg) {
  const std::string reply_key = msg.contains("reply") && msg["reply"].is_string() ? msg["reply"].get<std::string>() : "";
  const std::string stream = msg.contains("stream") && msg["stream"].is_string() ? msg["stream"].get<std::string>() : "stdout";
  long long max_bytes = msg.contains("max_bytes") && msg["max_bytes"].is_number_integer() ? msg["max_bytes"].get<long long>() : 65536;
  max_bytes = std::clamp<long long>(max_bytes, 0, 1 << 20);
  if (reply_key.rfind(options_.keys.prefix + ":tail:", 0) != 0 || (stream != "stdout" && stream != "stderr")) {
    log::Warn("redis", "agent ignoring malformed tail command task={}", launch);
    Queue({nullptr, entry_id, "", ""});
    return;
  }
  nlohmann::json reply = {{"ok", false}};
  auto it = outputs_.find(launch);
  if (it == outputs_.end()) {
    reply["error"] = "node " + options_.name + " has no record of " + launch;
  } else {
    const std::string& path = stream == "stdout" ? it->second.first : it->second.second;
    bool truncated = false;  // the task may have left anything there (common/task_file.h)
    auto data = ReadTaskFileTail(path, static_cast<size_t>(max_bytes), &truncated);
    if (!data.ok())
      reply["error"] = "cannot read " + path + " on node " + options_.name + ": " + data.status().message();
    else
      reply = {{"ok", true}, {"data", std::move(data).value()}, {"truncated", truncated}};
  }
  Queue({nullptr, entry_id, reply_key,
         SignEnvelope(*options_.cluster_key, reply_key,
                      reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))});
}

void Agent::OnLocalExit(const std::string& task_id, const TaskExit& exit) {
  if (tasks_.erase(task_id)) watchdog_.TaskEnded(task_id);
  TaskExit x = exit;
  if (fenced_.erase(task_id)) x.detail = "fenced: killed by agent " + options_.name + (x.detail.empty() ? "" : "; " + x.detail);
  log::Info("redis", "task exited task={} code={} signal={} node={}", task_id, x.exit_code, x.signal, options_.name);
  Queue({{{"task_id", task_id}, {"node", options_.name}, {"state", "exited"}, {"exit", x.ToJson()}}, ""});
}

void Agent::Fence() {
  log::Warn("redis", "lease lapsed node={}: fencing, killing {} task(s)", options_.name, tasks_.size());
  for (auto& [id, ref] : std::map<std::string, TaskRef>(tasks_)) {
    fenced_.insert(id);
    if (auto st = local_->Kill(ref); !st.ok()) log::Error("redis", "fencing kill failed task={} error={}", id, st.ToString());
  }
}

// ---- Redis thread -----------------------------------------------------------

bool Agent::EnsureConnected() {
  if (conn_ && !conn_->broken()) return true;
  conn_.reset();
  auto now = std::chrono::steady_clock::now();
  if (now < next_connect_) return false;
  RedisConfig cfg = options_.redis;
  cfg.timeout = std::min(cfg.timeout, options_.lease / 3);
  auto c = RedisConn::Connect(cfg);
  if (!c.ok()) {
    log::Warn("redis", "agent cannot reach redis node={} error={} retry_ms={}", options_.name, c.status().ToString(),
              backoff_.count());
    next_connect_ = now + backoff_;
    // Capped at a third of the lease, so a node is back soon after Redis is.
    backoff_ = std::min(backoff_ * 2, std::max(std::chrono::milliseconds(100), options_.lease / 3));
    return false;
  }
  conn_ = std::move(c).value();
  backoff_ = std::chrono::milliseconds(100);
  reading_pending_ = true;
  auto g = conn_->Command({"XGROUP", "CREATE", options_.keys.commands(options_.name), kAgentGroup, "0", "MKSTREAM"});
  if (!g.ok() && g.status().message().find("BUSYGROUP") == std::string::npos) {
    log::Warn("redis", "agent cannot create its consumer group: {}", g.status().ToString());
    conn_.reset();
    return false;
  }
  log::Info("redis", "agent connected node={} redis={}", options_.name, options_.redis.Describe());
  if (!leftovers_checked_) {
    leftovers_checked_ = true;
    auto left = conn_->Command({"HGETALL", options_.keys.node_tasks(options_.name)});
    if (left.ok() && left->is_array() && !left->elements.empty()) {
      std::vector<std::pair<std::string, std::string>> items;
      for (size_t i = 0; i + 1 < left->elements.size(); i += 2)
        items.emplace_back(left->elements[i].str, left->elements[i + 1].str);
      boost::asio::post(io_, [this, items] {
        const std::string list_key = options_.keys.node_tasks(options_.name);
        for (const auto& [id, envelope] : items) {
          if (tasks_.count(id)) continue;
          auto text = OpenEnvelope(*options_.cluster_key, list_key, envelope, 0, std::chrono::milliseconds(0));
          if (!text.ok()) {
            log::Warn("redis", "not killing an unsigned entry of the node's task list task={} reason={}", id,
                      text.status().message());
            continue;
          }
          auto j = ParseMessage(*text);
          auto ref = j.ok() ? TaskRef::FromJson(*j) : StatusOr<TaskRef>(j.status());
          if (ref.ok()) (void)local_->Kill(*ref);
          log::Warn("redis", "killed task left over from an earlier agent run task={}", id);
          TaskExit x;
          x.status_known = false;
          x.signal = SIGKILL;
          x.detail = "killed by restarted agent " + options_.name + ": left over from an earlier agent run";
          x.ended_at = std::chrono::system_clock::now();
          Queue({{{"task_id", id}, {"node", options_.name}, {"state", "exited"}, {"exit", x.ToJson()}}, ""});
        }
      });
    }
  }
  return true;
}

bool Agent::Register() {
  auto sent = std::chrono::steady_clock::now();
  // Listed before the lease key exists: whoever sees the lease finds the node in the set.
  if (!conn_->Command({"SADD", options_.keys.nodes(), options_.name}).ok()) return false;
  const std::string key = options_.keys.node(options_.name);
  auto r = conn_->Command({"SET", key, SignEnvelope(*options_.cluster_key, key, NodeRecord().dump()), "PX",
                           std::to_string(options_.lease.count())});
  if (!r.ok()) return false;
  last_renew_sent_ = sent;
  if (fenced_now_) log::Info("redis", "lease regained node={}", options_.name);
  fenced_now_ = false;
  return true;
}

bool Agent::Flush() {
  while (true) {
    // A burst of task events (a few commands each) must not hold back the
    // lease renewal: past the heartbeat, the loop renews and comes back.
    if (std::chrono::steady_clock::now() >= next_heartbeat_) return true;
    Outgoing out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (outbox_.empty()) return true;
      out = outbox_.front();
    }
    if (!out.event.is_null()) {
      const std::string id = out.event["task_id"].get<std::string>();
      const std::string state = out.event["state"].get<std::string>();
      nlohmann::json ev = out.event;
      ev.erase("local_ref");
      const std::string task_key = options_.keys.task(id);
      std::vector<std::string> hset = {"HSET", task_key, "node", options_.name, "state", state,
                                       "updated_ms", std::to_string(NowMs()), "event",
                                       SignEnvelope(*options_.cluster_key, task_key, ev.dump())};
      if (out.event.contains("pid")) hset.insert(hset.end(), {"pid", std::to_string(out.event["pid"].get<int>())});
      if (out.event.contains("exit")) hset.insert(hset.end(), {"exit", out.event["exit"].dump()});
      // The node's task list first: whoever sees the pid can rely on a
      // restarted agent finding the task (and killing it as a leftover).
      const std::string list_key = options_.keys.node_tasks(options_.name);
      if (state == "started" &&
          !conn_->Command({"HSET", list_key, id,
                           SignEnvelope(*options_.cluster_key, list_key, out.event["local_ref"].dump())}).ok())
        return false;
      if (!conn_->Command(hset).ok()) return false;
      if (state != "started" && !conn_->Command({"HDEL", options_.keys.node_tasks(options_.name), id}).ok())
        return false;
      std::vector<std::string> xadd = {"XADD", options_.keys.events(), "MAXLEN", "~", "100000", "*"};
      for (auto& f : SignCommand(*options_.cluster_key, options_.keys.events(), ev.dump())) xadd.push_back(std::move(f));
      if (!conn_->Command(xadd).ok()) return false;
    }
    if (!out.reply_key.empty() && !conn_->Command({"SET", out.reply_key, out.reply, "PX", "30000"}).ok())
      return false;
    if (!out.ack_id.empty() &&
        !conn_->Command({"XACK", options_.keys.commands(options_.name), kAgentGroup, out.ack_id}).ok())
      return false;
    std::lock_guard<std::mutex> lock(mu_);
    outbox_.pop_front();
  }
}

void Agent::ReadCommands() {
  // A blocked read cannot be woken to send what the io thread queued, so
  // right after activity the agent polls in short blocks (started/exited
  // events leave within ~5 ms), and idles in blocks of up to 100 ms.
  bool queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued = !outbox_.empty();
  }
  const auto now = std::chrono::steady_clock::now();
  if (queued) busy_until_ = now + std::chrono::seconds(1);
  const long long block = now < busy_until_ ? 5 : std::min<long long>(100, options_.lease.count() / 6);
  auto r = conn_->Command({"XREADGROUP", "GROUP", kAgentGroup, options_.name, "COUNT", "32", "BLOCK",
                           std::to_string(block), "STREAMS", options_.keys.commands(options_.name),
                           reading_pending_ ? "0" : ">"});
  if (!r.ok()) {
    if (!conn_->broken()) {  // e.g. NOGROUP after Redis lost its data: recreate on reconnect
      log::Warn("redis", "agent read failed: {}", r.status().ToString());
      conn_.reset();
    }
    return;
  }
  auto entries = ParseStreamReply(*r);
  if (!entries.empty()) busy_until_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  if (reading_pending_ && entries.empty()) reading_pending_ = false;
  std::vector<std::pair<std::string, std::string>> accepted;
  for (auto& e : entries) {
    std::string text = e.Field("msg");
    if (auto st = verifier_->Verify(e, NowMs()); !st.ok()) {
      log::Warn("redis", "agent refusing command node={} entry={} reason={}", options_.name, e.id, st.message());
      (void)conn_->Command({"XACK", options_.keys.commands(options_.name), kAgentGroup, e.id});
      continue;
    }
    if (reading_pending_) {
      // A start delivered before a crash or reconnect: start it only if still assigned.
      auto msg = ParseMessage(text);
      if (msg.ok() && (*msg)["op"] == "start" && (*msg)["task_id"].is_string()) {
        auto state = conn_->Command({"HGET", options_.keys.task((*msg)["task_id"].get<std::string>()), "state"});
        if (state.ok() && !state->is_nil() && state->str != "assigned") {
          (void)conn_->Command({"XACK", options_.keys.commands(options_.name), kAgentGroup, e.id});
          continue;
        }
      }
    }
    accepted.emplace_back(e.id, std::move(text));
  }
  // The nonces reach the disk before anything runs (a crash in between
  // means the command is delivered again, as a pending entry, not replayed).
  if (Status st = verifier_->Flush(); !st.ok())
    log::Error("redis", "agent cannot persist its nonce memory node={} error={}", options_.name, st.ToString());
  for (auto& [id, text] : accepted)
    boost::asio::post(io_, [this, id = id, text = std::move(text)] { OnCommand(id, text); });
  // Pending entries come back until acked; move on to new ones once all were handed over.
  if (reading_pending_) reading_pending_ = false;
}

void Agent::RedisLoop() {
  const auto heartbeat = options_.lease / 3;
  while (!stop_) {
    auto now = std::chrono::steady_clock::now();
    if (!fenced_now_ && last_renew_sent_.time_since_epoch().count() != 0 && now - last_renew_sent_ >= options_.lease) {
      fenced_now_ = true;
      boost::asio::post(io_, [this] { Fence(); });
    }
    if (!EnsureConnected()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (now >= next_heartbeat_) {
      if (Register()) {
        next_heartbeat_ = now + heartbeat;
      } else {
        log::Warn("redis", "lease renewal failed node={}", options_.name);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
    }
    if (!Flush()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    ReadCommands();
  }
}

}  // namespace tandem::backends::redis
