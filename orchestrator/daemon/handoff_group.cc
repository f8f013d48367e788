// One colocation group's handoff executor (handoff_group.h).
#include "orchestrator/daemon/handoff_group.h"

#include <chrono>

#include <fmt/format.h>

#include "common/log.h"
#include "orchestrator/handoff/event_codec.h"
#include "orchestrator/handoff/state_codec.h"

namespace tandem::daemon {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;
using namespace tandem::handoff;

json TagList(const TagSet& tags) {
  json out = json::array();
  for (Tag t : tags) out.push_back(TagName(t));
  return out;
}

std::string DurableWeights(const fs::path& run_dir, int64_t version) {
  return "file:" + (run_dir / "weights" / fmt::format("v{}", version)).string();
}
}  // namespace

json CommandLine(const SendCommand& c, int64_t wire_id, const WeightSources& sources) {
  json line = {{"type", CommandKindName(c.kind)}, {"id", wire_id}};
  switch (c.kind) {
    case CommandKind::kPause: line["mode"] = "retract"; break;  // docs/control-protocol.md "Pause modes"
    case CommandKind::kRelease:
    case CommandKind::kResume: line["tags"] = TagList(c.tags); break;
    case CommandKind::kPublishWeights:
      line["version"] = c.version;
      if (!sources.run_dir.empty()) line["durable"] = DurableWeights(sources.run_dir, c.version);
      break;
    case CommandKind::kLoadWeights: {
      line["version"] = c.version;
      // A reader brought back by recovery loads after the exports of that
      // version may have been freed (release_exports ends every SYNC): it
      // is sent to the durable copy, never to ipc:.
      const std::string* published = nullptr;
      if (sources.published) {
        if (auto it = sources.published->find(c.version); it != sources.published->end()) published = &it->second;
      }
      if (sources.recovering && !sources.run_dir.empty()) {
        line["source"] = DurableWeights(sources.run_dir, c.version);
      } else {
        line["source"] = published ? *published : fmt::format("ipc:v{}", c.version);
      }
      break;
    }
    case CommandKind::kContinue: break;
  }
  line["phase"] = PhaseName(c.phase);
  return line;
}

double HandoffGroup::Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

HandoffGroup::HandoffGroup(boost::asio::io_context& io, std::string name, uint32_t epoch, Host& host)
    : io_(io), name_(std::move(name)), epoch_(epoch), host_(host) {}

HandoffGroup::~HandoffGroup() = default;

StatusOr<std::unique_ptr<HandoffGroup>> HandoffGroup::Open(boost::asio::io_context& io, std::string name,
                                                           std::shared_ptr<const GroupConfig> config,
                                                           const fs::path& journal_dir, const fs::path& run_dir,
                                                           LogContext log_context, uint32_t epoch, Host& host,
                                                           uint64_t compact_every) {
  std::unique_ptr<HandoffGroup> g(new HandoffGroup(io, std::move(name), epoch, host));
  g->state_ = InitialState(std::move(config));
  g->journal_dir_ = journal_dir;
  g->compact_every_ = compact_every;
  store::Recovered rec;
  TANDEM_ASSIGN_OR_RETURN(g->journal_, store::DurableLog::Open(io, journal_dir, &rec), "handoff journal");
  if (!rec.snapshot.is_null()) TANDEM_RETURN_IF_ERROR(g->Restore(rec.snapshot), "handoff journal snapshot");
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  TANDEM_ASSIGN_OR_RETURN(g->logs_, LogWriter::Open(run_dir.string(), std::move(log_context)), "handoff logs");
  g->run_dir_ = run_dir;
  for (const auto& w : rec.warnings) log::Warn("handoff", "group={} journal: {}", g->name_, w);
  size_t replayed = 0;
  for (const json& r : rec.records) {
    ++g->events_;  // a skipped record keeps its number: the logs' "event" stay aligned
    auto ev = EventFromJson(r);
    if (!ev.ok()) {
      log::Warn("handoff", "group={} journal record skipped: {}", g->name_, ev.status().message());
      continue;
    }
    ApplyResult res = Apply(g->state_, *ev);
    g->state_ = std::move(res.state);
    // Lines of events journaled just before a crash may be missing; the
    // writer adds exactly those (log_writer.h).
    if (Status st = g->logs_->WriteAll(res.actions, g->events_); !st.ok()) {
      log::Error("handoff", "group={} {}", g->name_, st.ToString());
    }
    for (const Action& a : res.actions) {
      if (const auto* s = std::get_if<SendCommand>(&a)) g->sent_[s->command_id] = *s;
    }
    ++replayed;
  }
  g->DropAnswered();
  g->TrackPeaks();
  if (replayed > 0) {
    log::Info("handoff", "group={} replayed events={} mode={} phase={} outstanding={}", g->name_, replayed,
              ModeName(g->state_.mode), PhaseName(g->state_.phase), g->state_.outstanding.size());
    // Outstanding commands wait for their workers' hello (sent again then);
    // their timeouts run from now. Workers that were down are restarted again.
    for (const auto& [id, cmd] : g->sent_) g->ArmTimer(id, cmd.timeout_s);
    for (const WorkerId& w : g->state_.down) host.RestartWorker(w, "restarted daemon: the worker was being restarted");
    if (g->state_.mode == Mode::kFailed) host.GroupFailed(g->state_.fault);
  }
  return g;
}

bool HandoffGroup::Outstanding(const WorkerId& w) const {
  for (const handoff::Outstanding& o : state_.outstanding) {
    if (o.worker == w) return true;
  }
  return false;
}

void HandoffGroup::Feed(const Event& e) {
  ++events_;
  journal_->Append(EventToJson(e));
  ApplyResult res = Apply(state_, e);
  state_ = std::move(res.state);
  Perform(res.actions);
  MaybeCompact();
}

// Compacts only a settled group: its snapshot then has no outstanding
// command and no worker down, so nothing but the state needs restoring.
void HandoffGroup::MaybeCompact() {
  if (!journal_ || journal_->records_since_compaction() < compact_every_ || state_.mode != Mode::kSettled ||
      !state_.outstanding.empty() || !state_.down.empty()) {
    return;
  }
  json peaks = json::array();
  for (const auto& [gpu, p] : peak_) peaks.push_back({{"gpu", gpu}, {"bytes", p.first}, {"at", p.second}});
  const json snapshot = {{"events", events_}, {"state", StateToJson(state_)}, {"peaks", peaks}};
  if (Status st = journal_->Compact(snapshot); !st.ok()) {
    log::Error("handoff", "group={} journal compaction: {}", name_, st.ToString());
    return;
  }
  log::Debug("handoff", "group={} journal compacted at event {}", name_, events_);
}

Status HandoffGroup::Restore(const json& snapshot) {
  if (!snapshot.is_object() || !snapshot.contains("events") || !snapshot["events"].is_number_unsigned() ||
      !snapshot.contains("state")) {
    return DataLoss("not a handoff group snapshot");
  }
  TANDEM_ASSIGN_OR_RETURN(state_, StateFromJson(snapshot["state"], state_.config));
  events_ = snapshot["events"].get<uint64_t>();
  for (const json& p : snapshot.value("peaks", json::array())) {
    peak_[p.value("gpu", 0)] = {p.value("bytes", uint64_t{0}), p.value("at", 0.0)};
  }
  log::Info("handoff", "group={} restored snapshot at event {} mode={} phase={}", name_, events_,
            ModeName(state_.mode), PhaseName(state_.phase));
  return Status::Ok();
}

void HandoffGroup::OnHello(const Hello& h) {
  Feed(handoff::Event{h});
  for (const auto& [id, cmd] : sent_) {
    if (cmd.worker == h.worker) Send(cmd, /*retry=*/true);
  }
  if (!held_.empty() && AllSaidHello()) {
    hold_timer_.reset();
    auto held = std::move(held_);
    held_.clear();
    for (auto& [phase, cb] : held) RequestPhase(phase, std::move(cb));
  }
}

void HandoffGroup::OnAnswer(const WorkerId& w, int64_t wire_id, std::map<Tag, uint64_t> resident,
                            std::vector<DeviceMemory> devices, const std::optional<std::string>& error,
                            const std::string& source) {
  if ((wire_id >> 32) != static_cast<int64_t>(epoch_)) {
    log::Info("handoff", "group={} worker={} answer to id {} of an earlier daemon ignored", name_, w.ToString(), wire_id);
    return;
  }
  const uint64_t id = static_cast<uint64_t>(wire_id & 0xffffffff);
  const double now = Now();
  if (auto sent = sent_.find(id); !error && !source.empty() && sent != sent_.end() &&
                                  sent->second.kind == CommandKind::kPublishWeights) {
    published_[sent->second.version] = source;
    while (published_.size() > 4) published_.erase(published_.begin());
  }
  if (error) {
    Feed(handoff::Event{WorkerError{w, id, *error, std::move(resident), std::move(devices), now}});
  } else {
    Feed(handoff::Event{Ack{w, id, std::move(resident), std::move(devices), now}});
  }
}

bool HandoffGroup::AllSaidHello() const {
  for (const auto& [w, ws] : state_.workers) {
    if (!ws.hello) return false;
  }
  return true;
}

std::string HandoffGroup::MissingHello() const {
  std::string out;
  for (const auto& [w, ws] : state_.workers) {
    if (!ws.hello) out += (out.empty() ? "" : ", ") + w.ToString();
  }
  return out;
}

void HandoffGroup::RequestPhase(const Phase& p, PhaseCallback done) {
  if (state_.mode == Mode::kSettled && !AllSaidHello()) {
    held_.emplace_back(p, std::move(done));
    if (!hold_timer_) {
      hold_timer_ = std::make_unique<boost::asio::steady_timer>(io_);
      hold_timer_->expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(state_.config->choreography.timeout_s)));
      hold_timer_->async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        hold_timer_.reset();
        auto held = std::move(held_);
        held_.clear();
        for (auto& [phase, cb] : held) cb(DeadlineExceeded("no hello from " + MissingHello() + " in time"));
      });
    }
    return;
  }
  waiters_.emplace_back(p, std::move(done));
  Feed(handoff::Event{handoff::RequestPhase{p, Now()}});
}

void HandoffGroup::Perform(std::vector<Action>& actions) {
  if (Status st = logs_->WriteAll(actions, events_); !st.ok()) log::Error("handoff", "group={} {}", name_, st.ToString());
  bool residency_changed = false;
  for (Action& a : actions) {
    if (auto* c = std::get_if<SendCommand>(&a)) {
      sent_[c->command_id] = *c;
      Send(*c, /*retry=*/false);
      ArmTimer(c->command_id, c->timeout_s);
    } else if (auto* r = std::get_if<ResidencyRecord>(&a)) {
      residency_changed = true;
      if (r->leak) log::Warn("handoff", "group={} worker={} leak: {}", name_, r->worker.ToString(), r->note);
    } else if (auto* p = std::get_if<PhaseReached>(&a)) {
      log::Info("handoff", "group={} phase reached {}", name_, PhaseName(p->phase));
      Answer(p->phase, json{{"phase", PhaseName(p->phase)}});
    } else if (auto* refused = std::get_if<PhaseRefused>(&a)) {
      log::Warn("handoff", "group={} phase {} refused: {}", name_, PhaseName(refused->phase), refused->reason);
      Answer(refused->phase, refused->transient ? Unavailable(refused->reason) : FailedPrecondition(refused->reason));
    } else if (auto* w = std::get_if<RestartWorker>(&a)) {
      log::Warn("handoff", "group={} restarting worker={}: {}", name_, w->worker.ToString(), w->cause);
      host_.RestartWorker(w->worker, w->cause);
    } else if (auto* f = std::get_if<GroupFailed>(&a)) {
      log::Error("handoff", "group={} failed: {}", name_, f->cause);
      auto waiters = std::move(waiters_);
      waiters_.clear();
      for (auto& [phase, cb] : waiters) cb(FailedPrecondition("the group failed: " + f->cause));
      host_.GroupFailed(f->cause);
    }
  }
  DropAnswered();
  if (residency_changed) TrackPeaks();
}

void HandoffGroup::DropAnswered() {
  std::erase_if(sent_, [&](const auto& kv) {
    for (const handoff::Outstanding& o : state_.outstanding) {
      if (o.command_id == kv.first) return false;
    }
    timers_.erase(kv.first);  // no longer outstanding: no timer
    return true;
  });
}

void HandoffGroup::Send(const SendCommand& c, bool retry) {
  const WeightSources sources{run_dir_, state_.mode == Mode::kRecovering, &published_};
  if (!host_.Send(c.worker, CommandLine(c, WireId(c.command_id), sources))) {
    log::Info("handoff", "group={} worker={} not connected; {} {} waits for its hello", name_, c.worker.ToString(),
              CommandKindName(c.kind), c.command_id);
  } else if (retry) {
    log::Info("handoff", "group={} worker={} {} id={} sent again", name_, c.worker.ToString(), CommandKindName(c.kind),
              c.command_id);
  }
}

void HandoffGroup::ArmTimer(uint64_t command_id, double timeout_s) {
  if (timeout_s <= 0) return;
  auto timer = std::make_unique<boost::asio::steady_timer>(io_);
  const auto half = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_s / 2));
  timer->expires_after(half);
  boost::asio::steady_timer* raw = timer.get();
  timer->async_wait([this, command_id, raw, half](boost::system::error_code ec) {
    if (ec || !sent_.count(command_id)) return;
    Send(sent_.at(command_id), /*retry=*/true);  // one retry of the same id
    raw->expires_after(half);
    raw->async_wait([this, command_id](boost::system::error_code ec2) {
      if (ec2 || !sent_.count(command_id)) return;
      const WorkerId w = sent_.at(command_id).worker;
      Feed(handoff::Event{Timeout{w, command_id, Now()}});
    });
  });
  timers_[command_id] = std::move(timer);
}

void HandoffGroup::Answer(const Phase& p, const StatusOr<json>& result) {
  std::vector<PhaseCallback> due;
  std::erase_if(waiters_, [&](auto& w) {
    if (!(w.first == p)) return false;
    due.push_back(std::move(w.second));
    return true;
  });
  for (auto& cb : due) cb(result);
}

void HandoffGroup::TrackPeaks() {
  const double now = Now();
  for (const auto& [gpu, g] : state_.ledger.gpus()) {
    const uint64_t resident = state_.ledger.Resident(gpu);
    auto& [bytes, at] = peak_[gpu];
    if (resident > bytes || at == 0) {
      bytes = std::max(bytes, resident);
      at = now;
    }
  }
}

json HandoffGroup::ResidencyJson() const {
  const Ledger& ledger = state_.ledger;
  json gpus = json::array();
  for (const auto& [gpu, g] : ledger.gpus()) {
    json holders = json::array();
    for (const auto& [w, ws] : state_.workers) {
      const auto& placed = ledger.WorkerGpus(w);
      if (std::find(placed.begin(), placed.end(), gpu) == placed.end()) continue;
      for (const auto& [tag, size] : ws.tag_sizes) {
        holders.push_back({{"role", w.role}, {"rank", w.rank}, {"tag", TagName(tag)}, {"bytes", ledger.Bytes(w, tag)},
                           {"size", size}});
      }
    }
    json entry = {{"gpu", gpu}, {"capacity", g.capacity}, {"resident", ledger.Resident(gpu)}, {"holders", holders}};
    if (g.reading) entry["device"] = {{"used", g.reading->used}, {"total", g.reading->total}};
    if (auto it = peak_.find(gpu); it != peak_.end()) {
      entry["peak"] = it->second.first;
      entry["peak_at"] = it->second.second;
    }
    gpus.push_back(std::move(entry));
  }
  json workers = json::array();
  for (const auto& [w, ws] : state_.workers) {
    workers.push_back({{"role", w.role}, {"rank", w.rank}, {"kind", RoleKindName(ws.kind)}, {"hello", ws.hello},
                       {"running", ws.running}, {"loaded_version", ws.loaded_version},
                       {"down", state_.down.count(w) > 0}});
  }
  json out = {{"group", name_},
              {"phase", PhaseName(state_.phase)},
              {"mode", ModeName(state_.mode)},
              {"published_version", state_.published_version},
              {"gpus", gpus},
              {"workers", workers}};
  if (state_.mode != Mode::kSettled) out["target"] = PhaseName(state_.target);
  if (!state_.fault.empty()) out["fault"] = state_.fault;
  return out;
}

void HandoffGroup::RemoveJournal() {
  timers_.clear();
  if (journal_) (void)journal_->Flush();
  journal_.reset();
  std::error_code ec;
  fs::remove_all(journal_dir_, ec);
}

}  // namespace tandem::daemon
