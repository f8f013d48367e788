// The handoff service (handoff_service.h).
#include "orchestrator/daemon/handoff_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "common/log.h"
#include "orchestrator/handoff/event_codec.h"
#include "orchestrator/spec/colocation.h"

namespace tandem::daemon {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;
using namespace tandem::handoff;
using ConnectionPtr = control::ControlServer::ConnectionPtr;

using control::ErrorLine;

// The known tags of a residency report (unknown names are not the engine's).
std::map<Tag, uint64_t> TagBytes(const std::map<std::string, uint64_t>& tags) {
  std::map<Tag, uint64_t> out;
  for (const auto& [name, bytes] : tags) {
    if (auto t = ParseTag(name)) out[*t] = bytes;
  }
  return out;
}

// Reads, increments and durably writes the daemon's epoch (a counter of
// daemon lives on this state dir), which keeps wire command ids unique.
StatusOr<uint32_t> NextEpoch(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return ErrnoStatus("create " + dir.string(), ec.value());
  uint32_t epoch = 0;
  std::ifstream(dir / "epoch") >> epoch;
  ++epoch;
  if (epoch >= (1u << 20)) epoch = 1;  // wire ids stay below 2^52 (exact in every JSON reader)
  const fs::path tmp = dir / "epoch.tmp";
  const std::string text = std::to_string(epoch) + "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("open " + tmp.string());
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return ErrnoStatus("write " + tmp.string());
  fs::rename(tmp, dir / "epoch", ec);
  if (ec) return ErrnoStatus("rename " + tmp.string(), ec.value());
  return epoch;
}

StatusOr<Choreography> ChoreographyOf(const spec::HandoffSpec& h) {
  Choreography c = DefaultChoreography();
  c.timeout_s = h.timeout_s;
  c.on_fault = h.on_fault == "restart" ? OnFault::kRestart : OnFault::kFail;
  c.on_refusal = h.on_fault == "fail" ? OnRefusal::kFail : OnRefusal::kGoOn;
  static const std::map<std::string, PhaseKind> kPhases = {
      {"rollout", PhaseKind::kRollout}, {"teacher", PhaseKind::kTeacher},
      {"train", PhaseKind::kTrain}, {"sync", PhaseKind::kSync}};
  for (const auto& [name, ps] : h.phases) {
    auto kind = kPhases.find(name);
    if (kind == kPhases.end()) return InvalidArgument("handoff.phases: unknown phase " + name);
    PhasePlan plan;
    plan.timeout_s = ps.timeout_s;
    for (const auto& [which, src] : {std::pair{&plan.release, &ps.release}, {&plan.resume, &ps.resume}}) {
      for (const auto& [kind_name, tags] : *src) {
        auto rk = ParseRoleKind(kind_name);
        if (!rk) return InvalidArgument("handoff.phases." + name + ": unknown role kind " + kind_name);
        TagSet set;
        for (const std::string& t : tags) {
          auto tag = ParseTag(t);
          if (!tag) return InvalidArgument("handoff.phases." + name + ": unknown tag " + t);
          set.insert(*tag);
        }
        (*which)[*rk] = std::move(set);
      }
    }
    c.phases[kind->second] = std::move(plan);
  }
  return c;
}

}  // namespace

// ------------------------------------------------------------------ groups

class HandoffService::GroupHost : public HandoffGroup::Host {
 public:
  GroupHost(HandoffService& s, std::string job, std::string group) : s_(s), job_(std::move(job)), group_(std::move(group)) {}
  bool Send(const WorkerId& w, const json& line) override {
    auto it = s_.connection_of_.find({job_, w});
    if (it == s_.connection_of_.end()) return false;
    auto peer = s_.peers_.find(it->second);
    if (peer == s_.peers_.end()) return false;
    auto c = peer->second.conn.lock();
    if (!c || c->closed()) return false;
    c->Send(line);
    return true;
  }
  void RestartWorker(const WorkerId& w, const std::string& cause) override {
    const std::string task = w.role + "." + std::to_string(w.rank);
    if (s_.in_exit_ && s_.exiting_task_ == task) return;  // it is ending already; its exit restarts it
    if (Status st = s_.jobs_.KillTask(job_, task); !st.ok()) {
      log::Warn("handoff", "restart of {}/{} ({}): kill failed: {}", job_, task, cause, st.ToString());
    }
  }
  void GroupFailed(const std::string& cause) override {
    const std::string reason = fmt::format("handoff group {} failed: {}", group_, cause);
    if (s_.in_exit_) {
      s_.exit_failure_ = reason;
      return;
    }
    // Not from inside a job manager callback: fail the job on the next turn.
    boost::asio::post(s_.io_, [&s = s_, job = job_, reason] { s.jobs_.FailJob(job, reason); });
  }

 private:
  HandoffService& s_;
  std::string job_, group_;
};

struct HandoffService::JobGroups {
  std::map<std::string, std::unique_ptr<GroupHost>> hosts;
  std::map<std::string, std::unique_ptr<HandoffGroup>> groups;  // by owner role name
  std::map<std::string, std::string> group_of_role;            // handoff roles only
  std::string controller;
};

HandoffService::HandoffService(boost::asio::io_context& io, JobManager& jobs, fs::path state_dir,
                               uint64_t compact_every)
    : io_(io), jobs_(jobs), state_dir_(std::move(state_dir)), compact_every_(compact_every) {}

HandoffService::~HandoffService() { Stop(); }

Status HandoffService::Start(const fs::path& socket, const std::string& tcp_listen) {
  TANDEM_ASSIGN_OR_RETURN(epoch_, NextEpoch(state_dir_ / "handoff"), "handoff epoch");
  for (const Job& job : jobs_.table().jobs) {
    if (IsTerminal(job.state)) continue;
    auto g = GroupsOf(job);
    if (!g.ok()) log::Error("handoff", "job={} groups not restored: {}", job.id, g.status().ToString());
  }
  TANDEM_ASSIGN_OR_RETURN(server_, control::ControlServer::Listen(io_, socket, *this), "control socket");
  if (!tcp_listen.empty()) TANDEM_RETURN_IF_ERROR(server_->ListenTcp(tcp_listen), "--control-listen");
  return Status::Ok();
}

std::string HandoffService::endpoint() const { return server_ ? "unix:" + server_->path().string() : ""; }

std::string HandoffService::tcp_endpoint() const {
  const std::string a = server_ ? server_->tcp_address() : "";
  return a.empty() ? "" : "tcp:" + a;
}

void HandoffService::Stop() {
  if (server_) server_->Close();
  server_.reset();
}

StatusOr<HandoffService::JobGroups*> HandoffService::GroupsOf(const Job& job) {
  if (auto it = groups_.find(job.id); it != groups_.end()) return it->second.get();
  const spec::JobSpec& sp = jobs_.SpecOf(job);
  auto jg = std::make_unique<JobGroups>();
  jg->controller = sp.handoff.controller;
  std::vector<spec::SpecError> errors;
  const spec::Colocation col = spec::ResolveColocation(sp.roles, &errors);
  if (!errors.empty()) return InvalidArgument("colocation: " + errors.front().ToString());
  TANDEM_ASSIGN_OR_RETURN(Choreography chor, ChoreographyOf(sp.handoff), "job " + job.id);
  for (const spec::ColocationGroup& cg : col.groups) {
    auto config = std::make_shared<GroupConfig>();
    config->choreography = chor;
    LogContext ctx;
    ctx.group = sp.roles[static_cast<size_t>(cg.owner)].name;
    for (int ri : cg.members) {
      const spec::RoleSpec& role = sp.roles[static_cast<size_t>(ri)];
      const std::string kind = sp.handoff.KindOf(role);
      if (kind.empty()) continue;
      GroupRole gr{role.name, *ParseRoleKind(kind), {}};
      for (const Task& t : job.tasks) {
        if (t.role != role.name) continue;
        if (gr.gpus.size() <= static_cast<size_t>(t.rank)) gr.gpus.resize(static_cast<size_t>(t.rank) + 1);
        gr.gpus[static_cast<size_t>(t.rank)] = t.logical_devices;
        ctx.gpus[WorkerId{role.name, t.rank}] = t.logical_devices;
        if (sp.handoff.gpu_memory > 0) {
          for (int g : t.logical_devices) config->capacity[g] = sp.handoff.gpu_memory;
        }
      }
      std::map<std::string, std::string> env = sp.env;
      for (const auto& [k, v] : role.env) env[k] = v;
      ctx.allocator[role.name] = AllocatorConfig(env);
      config->roles.push_back(std::move(gr));
      jg->group_of_role[role.name] = ctx.group;
    }
    if (config->roles.empty()) continue;
    const std::string name = ctx.group;
    auto host = std::make_unique<GroupHost>(*this, job.id, name);
    auto group = HandoffGroup::Open(io_, name, config, state_dir_ / "handoff" / job.id / name, job.run_dir,
                                    std::move(ctx), epoch_, *host, compact_every_);
    if (!group.ok()) return group.status().WithContext("handoff group " + name);
    jg->hosts[name] = std::move(host);
    jg->groups[name] = std::move(group).value();
  }
  return groups_.emplace(job.id, std::move(jg)).first->second.get();
}

HandoffGroup* HandoffService::FindGroup(const std::string& job_id, const WorkerId& w) {
  auto it = groups_.find(job_id);
  if (it == groups_.end()) return nullptr;
  auto g = it->second->group_of_role.find(w.role);
  if (g == it->second->group_of_role.end()) return nullptr;
  auto group = it->second->groups.find(g->second);
  return group == it->second->groups.end() ? nullptr : group->second.get();
}

std::vector<DeviceMemory> HandoffService::Devices(const Task& task, const std::optional<control::Residency>& r) const {
  std::vector<DeviceMemory> out;
  if (!r || !r->has_device) return out;
  const control::DeviceMemory& d = r->device;
  if (d.index < 0 || static_cast<size_t>(d.index) >= task.logical_devices.size()) return out;
  out.push_back({task.logical_devices[static_cast<size_t>(d.index)], d.used, d.total, d.source == "cuda"});
  return out;
}

// ------------------------------------------------------------------ control connections

StatusOr<std::pair<const Job*, const Task*>> HandoffService::Admit(const ConnectionPtr& c, const control::Hello& hello) {
  const std::string& job_id = hello.job_id;
  const std::string& task_id = hello.task_id;
  const bool tcp = c->transport() == control::Transport::kTcp;
  // Nothing about jobs is said before the token checks out: every refusal
  // until then reads "unauthenticated"; the log says why. Over the unix
  // socket too: its mode keeps other users out, not the other processes of
  // this user (a task's own children, other jobs' tasks).
  auto refuse = [&](const Status& why) -> Status {
    log::Warn("control", "unauthenticated hello refused transport={} peer={} pid={} job={} task={}: {}",
              tcp ? "tcp" : "unix", c->peer(), c->peer_pid(), job_id, task_id, why.message());
    return PermissionDenied("hello: not admitted (a hello needs the launch's TANDEM_CONTROL_TOKEN)");
  };
  if (hello.token.empty()) return refuse(PermissionDenied("no token"));
  const Job* job = jobs_.Find(job_id);
  if (!job) return refuse(NotFound("no job \"" + job_id + "\" (TANDEM_JOB_ID)"));
  if (IsTerminal(job->state)) return refuse(FailedPrecondition("job " + job_id + " has ended"));
  const Task* task = job->FindTask(task_id);
  if (!task) return refuse(NotFound("no task \"" + task_id + "\" in job " + job_id));
  if (!keys_.Verify(job->backend, job->id, task->id, task->launches, hello.token)) {
    return refuse(PermissionDenied(fmt::format("wrong control token for task {} launch {}", task->id, task->launches)));
  }
  // Past the token: the worker is that launch of that task.
  if (task->role != hello.role || task->rank != hello.rank) {
    return InvalidArgument(fmt::format("hello: task \"{}\" of job {} is not role {} rank {}", task_id, job_id,
                                       hello.role, hello.rank));
  }
  if (task->state != TaskState::kRunning) return FailedPrecondition("hello: task " + task_id + " is not running");
  return std::pair{job, task};
}

StatusOr<json> HandoffService::OnHello(const ConnectionPtr& c, const control::Hello& hello) {
  TANDEM_ASSIGN_OR_RETURN(auto admitted, Admit(c, hello));
  const Job* job = admitted.first;
  const Task* task = admitted.second;
  const std::string job_id = job->id;
  TANDEM_RETURN_IF_ERROR(GroupsOf(*job).status(), "hello");
  const WorkerId w{task->role, task->rank};
  HandoffGroup* group = FindGroup(job_id, w);
  // A new connection of the same worker (a reconnect) replaces the old one.
  // The old peer is forgotten first, so closing it is not taken for the
  // worker's death (its OnClosed finds no peer), and nothing is erased twice.
  if (auto old = connection_of_.find({job_id, w}); old != connection_of_.end()) {
    const uint64_t old_id = old->second;
    connection_of_.erase(old);
    if (auto peer = peers_.find(old_id); peer != peers_.end()) {
      auto oc = peer->second.conn.lock();
      peers_.erase(peer);
      log::Info("control", "job={} worker={} reconnected: connection {} replaces {}", job_id, w.ToString(), c->id(),
                old_id);
      if (oc) oc->Close();
    }
  }
  peers_[c->id()] = Peer{job_id, w, group ? group->name() : "", c};
  connection_of_[{job_id, w}] = c->id();
  const double timeout_s = group ? group->state().config->choreography.timeout_s : 0;
  log::Info("control", "hello job={} worker={} peer={} pid={} group={}", job_id, w.ToString(), c->peer(), c->peer_pid(),
            group ? group->name() : "(none: plain task)");
  if (group) {
    Hello h{w, {}, {}, {}, HandoffGroup::Now()};
    for (const control::TagInfo& t : hello.tags) {
      if (auto tag = ParseTag(t.name)) h.tag_sizes[*tag] = t.bytes;
    }
    if (hello.residency) h.resident = TagBytes(hello.residency->tags);
    h.devices = Devices(*task, hello.residency);
    // After the welcome is on its way: commands may follow at once.
    boost::asio::post(io_, [this, job_id, h, cid = c->id()] {
      auto peer = peers_.find(cid);
      if (peer == peers_.end()) return;
      if (HandoffGroup* g = FindGroup(job_id, h.worker)) g->OnHello(h);
    });
  }
  json welcome = {{"session", job_id + "/" + w.ToString()},
                  {"handoff", group != nullptr},
                  {"command_timeout_ms", static_cast<int64_t>(timeout_s * 1000)}};
  // What a restarted controller must publish past (docs/control-protocol.md "Handshake").
  if (group) welcome["published_version"] = group->state().published_version;
  return welcome;
}

void HandoffService::OnMessage(const ConnectionPtr& c, const control::ParsedObject& msg) {
  auto it = peers_.find(c->id());
  if (it == peers_.end()) return;
  const Peer peer = it->second;
  const std::string& type = msg.type;
  const std::optional<int64_t> id = msg.id;
  HandoffGroup* group = FindGroup(peer.job, peer.worker);
  if (type == "ack" || type == "error") {
    auto answer = control::DecodeAnswer(msg);
    if (!answer.ok()) return c->Send(ErrorLine(id, "malformed", answer.status().message()));
    if (answer->command == "shutdown" || !group) return;
    if (!answer->id) {
      log::Warn("control", "worker={} {} without an id: {}", peer.worker.ToString(), type, answer->message);
      return;
    }
    const Job* job = jobs_.Find(peer.job);
    const Task* task = job ? job->FindTask(peer.worker.role + "." + std::to_string(peer.worker.rank)) : nullptr;
    if (!task) return;
    auto resident = answer->residency ? TagBytes(answer->residency->tags) : std::map<Tag, uint64_t>{};
    std::optional<std::string> error;
    if (answer->error) error = answer->code + ": " + answer->message;
    group->OnAnswer(peer.worker, *answer->id, std::move(resident), Devices(*task, answer->residency), error,
                    answer->source);
    return;
  }
  if (type == "request_phase") return OnPhaseRequest(c, peer, msg);
  if (type == "metrics") {
    auto m = control::DecodeMetrics(msg);
    if (!m.ok()) return c->Send(ErrorLine(id, "malformed", m.status().message()));
    log::Info("control", "metrics job={} worker={} {}", peer.job, peer.worker.ToString(), control::DumpLine(m->values));
    if (worker_metrics_) worker_metrics_->Record(peer.job, peer.worker.ToString(), m->step, m->values);
    return;
  }
  if (type == "hello") return c->Send(ErrorLine(id, "failed_precondition", "hello was already said on this connection"));
  c->Send(ErrorLine(id, "unknown_command", "unknown message type \"" + type + "\""));
}

void HandoffService::OnPhaseRequest(const ConnectionPtr& c, const Peer& peer, const control::ParsedObject& msg) {
  auto req = control::DecodePhaseRequest(msg);
  if (!req.ok()) return c->Send(ErrorLine(msg.id, "malformed", req.status().message()));
  const int64_t id = req->id;
  HandoffGroup* group = FindGroup(peer.job, peer.worker);
  if (!group) {
    return c->Send(ErrorLine(id, "failed_precondition",
                             "role " + peer.worker.role + " takes no part in handoffs (see the spec's handoff.roles)"));
  }
  // Only the spec's controller drives the group; other workers are driven.
  auto jg = groups_.find(peer.job);
  const std::string controller = jg == groups_.end() ? "" : jg->second->controller;
  if (peer.worker.role != controller) {
    log::Warn("control", "job={} worker={} asked for phase {}: refused, not the controller", peer.job,
              peer.worker.ToString(), req->phase);
    return c->Send(ErrorLine(id, "permission_denied",
                             controller.empty()
                                 ? "the spec names no handoff.controller: phases are requested through the API"
                                 : "only the controller role (" + controller + ") may request phases, not " +
                                       peer.worker.role));
  }
  auto phase = ParsePhaseRequest(req->phase, req->version.value_or(0), *group->state().config);
  if (!phase.ok()) return c->Send(ErrorLine(id, "invalid_argument", phase.status().message()));
  const auto start = std::chrono::steady_clock::now();
  std::weak_ptr<control::ControlConnection> weak = c;
  group->RequestPhase(*phase, [weak, id, start](StatusOr<json> r) {
    auto conn = weak.lock();
    if (!conn || conn->closed()) return;
    if (!r.ok()) return conn->Send(ErrorLine(id, control::ErrorCodeFor(r.status().code()), r.status().message()));
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
    const json& reached = (*r)["phase"];
    conn->Send(control::MakePhaseDone(id, reached.is_string() ? reached.get<std::string>() : "", us.count()));
  });
}

void HandoffService::OnClosed(const ConnectionPtr& c) {
  auto it = peers_.find(c->id());
  if (it == peers_.end()) return;
  const Peer peer = it->second;
  peers_.erase(it);
  if (auto cur = connection_of_.find({peer.job, peer.worker}); cur != connection_of_.end() && cur->second == c->id()) {
    connection_of_.erase(cur);
  }
  HandoffGroup* group = FindGroup(peer.job, peer.worker);
  if (!group || closing_.count(peer.job)) return;
  if (group->Outstanding(peer.worker)) {
    group->Feed(handoff::Event{WorkerDied{peer.worker, "control connection closed while a command was outstanding",
                                 HandoffGroup::Now()}});
  } else {
    log::Info("control", "job={} worker={} disconnected while idle", peer.job, peer.worker.ToString());
  }
}

// ------------------------------------------------------------------ tasks and jobs

TaskObserver::Verdict HandoffService::OnTaskExit(const Job& job, const Task& task, const backends::TaskExit& exit,
                                                 std::string* reason) {
  if (closing_.count(job.id)) return Verdict::kDefault;
  const WorkerId w{task.role, task.rank};
  HandoffGroup* group = FindGroup(job.id, w);
  if (!group) return Verdict::kDefault;
  if (exit.succeeded() && !group->Outstanding(w) && !group->state().down.count(w)) {
    log::Info("handoff", "job={} worker={} left cleanly", job.id, w.ToString());
    boost::asio::post(io_, [this, id = job.id] {
      if (const Job* j = jobs_.Find(id)) MaybeShutdownGroup(*j);
    });
    return Verdict::kDefault;
  }
  in_exit_ = true;
  exiting_task_ = task.name;
  exit_failure_.clear();
  group->Feed(handoff::Event{WorkerDied{w, ExitDetail(exit), HandoffGroup::Now()}});
  in_exit_ = false;
  exiting_task_.clear();
  if (!exit_failure_.empty()) {
    *reason = exit_failure_;
    return Verdict::kFailJob;
  }
  return group->state().down.count(w) ? Verdict::kRestartNow : Verdict::kDefault;
}

void HandoffService::MaybeShutdownGroup(const Job& job) {
  auto it = groups_.find(job.id);
  if (it == groups_.end() || it->second->controller.empty() || closing_.count(job.id)) return;
  const std::string& controller = it->second->controller;
  for (const Task& t : job.tasks) {
    if (t.role == controller && t.state != TaskState::kSucceeded) return;
  }
  closing_.insert(job.id);
  log::Info("handoff", "job={} controller {} finished: shutting the workers down", job.id, controller);
  int64_t id = (static_cast<int64_t>(epoch_) << 32) | 0xfffffff0;  // outside the engine's ids
  for (auto& [cid, peer] : peers_) {
    if (peer.job != job.id || peer.worker.role == controller) continue;
    if (auto c = peer.conn.lock()) c->Send({{"type", "shutdown"}, {"id", id++}, {"reason", "the controller finished"}});
  }
}

void HandoffService::OnJobEnded(const Job& job) {
  DropJob(job.id, /*remove_journals=*/true);
  if (worker_metrics_) worker_metrics_->Forget(job.id);
}

void HandoffService::DropJob(const std::string& job_id, bool remove_journals) {
  auto it = groups_.find(job_id);
  if (it != groups_.end()) {
    if (remove_journals) {
      for (auto& [name, g] : it->second->groups) g->RemoveJournal();
      std::error_code ec;
      fs::remove_all(state_dir_ / "handoff" / job_id, ec);
    }
    // Destroyed on the next turn: this may run inside one of the group's own callbacks.
    boost::asio::post(io_, [jg = std::shared_ptr<JobGroups>(std::move(it->second))] {});
    groups_.erase(it);
  }
  std::erase_if(peers_, [&](const auto& kv) { return kv.second.job == job_id; });
  std::erase_if(connection_of_, [&](const auto& kv) { return kv.first.first == job_id; });
  closing_.erase(job_id);
}

// ------------------------------------------------------------------ API

void HandoffService::RequestPhase(const std::string& job_id, const std::string& group_name, const std::string& phase,
                                  int64_t version, PhaseCallback done) {
  const Job* job = jobs_.Find(job_id);
  if (!job) return done(NotFound("no job " + job_id));
  if (IsTerminal(job->state)) return done(FailedPrecondition("job " + job_id + " has ended"));
  auto jg = GroupsOf(*job);
  if (!jg.ok()) return done(jg.status());
  auto& groups = (*jg)->groups;
  if (groups.empty()) return done(FailedPrecondition("job " + job_id + " has no handoff roles (see the spec's handoff section)"));
  HandoffGroup* group = nullptr;
  if (group_name.empty()) {
    if (groups.size() > 1) {
      std::string names;
      for (const auto& [n, g] : groups) names += (names.empty() ? "" : ", ") + n;
      return done(InvalidArgument("the job has several handoff groups (" + names + "): name one with \"group\""));
    }
    group = groups.begin()->second.get();
  } else if (auto it = groups.find(group_name); it != groups.end()) {
    group = it->second.get();
  } else {
    return done(NotFound("no handoff group " + group_name + " in job " + job_id));
  }
  auto p = ParsePhaseRequest(phase, version, *group->state().config);
  if (!p.ok()) return done(p.status());
  const auto start = std::chrono::steady_clock::now();
  group->RequestPhase(*p, [done = std::move(done), start, name = group->name()](StatusOr<json> r) {
    if (!r.ok()) return done(r.status());
    json out = *r;
    out["group"] = name;
    out["duration_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    done(out);
  });
}

StatusOr<json> HandoffService::Residency(const std::string& job_id) {
  const Job* job = jobs_.Find(job_id);
  if (!job) return NotFound("no job " + job_id);
  json groups = json::array();
  if (!IsTerminal(job->state)) {
    TANDEM_ASSIGN_OR_RETURN(JobGroups * jg, GroupsOf(*job), "residency");
    for (const auto& [name, g] : jg->groups) {
      json group = g->ResidencyJson();
      for (json& w : group["workers"]) {  // the live connection of each worker, and its pid
        auto c = connection_of_.find({job_id, WorkerId{w["role"].get<std::string>(), w["rank"].get<int>()}});
        auto peer = c == connection_of_.end() ? peers_.end() : peers_.find(c->second);
        auto conn = peer == peers_.end() ? nullptr : peer->second.conn.lock();
        w["connected"] = conn && !conn->closed();
        if (w["connected"].get<bool>()) w["pid"] = conn->peer_pid();
      }
      groups.push_back(std::move(group));
    }
  }
  return json{{"job", job_id}, {"state", ToString(job->state)}, {"run_dir", job->run_dir}, {"groups", groups}};
}

}  // namespace tandem::daemon
