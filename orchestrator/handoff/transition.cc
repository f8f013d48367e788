// The pure transition function of the handoff engine (transition.h).
//
// Branches, with the ids the Promela model (model/handoff.pml) carries:
//   T1  a phase request is accepted: the transition starts (first stage sent)
//   T2  a request for the phase the group is in or already entering: no-op
//   T3  a request is refused (busy, faulted, unknown teacher, stale version,
//       a worker has not said hello)
//   T4  an ack of an outstanding command; the stage still waits for others
//   T5  the last ack of a stage: the next stage's commands are sent
//   T6  the last stage is done: the phase is reached
//   T7  a duplicate or late ack/error/timeout: nothing changes
//   T8  an error or timeout of an outstanding command: FAULTED
//   T9  a worker died: FAULTED
//   T10 on_fault=fail: the group fails
//   T11 on_fault=restart: the faulted worker's task is restarted
//   T12 a restarted worker says hello: once all are back and nothing is in
//       flight, recovery resumes what they held and reloads the last version
//   T13 recovery is done: the interrupted transition runs again from its start
//   T14 a hello from a worker (first or reconnect): its tag sizes are recorded
//       and the ledger takes over the residency it reports
//   T15 the ledger refuses a resume (it would not fit): the request is
//       refused; by the job's on_fault (OnRefusal) the group fails, or
//       settles in no phase (INIT) and the job goes on; during recovery the
//       group fails whatever on_fault says (restarted workers cannot get
//       their memory back)
//   T16 an event for an unknown worker, or after the group failed: ignored
#include "orchestrator/handoff/transition.h"

#include <algorithm>

#include <fmt/format.h>

namespace tandem::handoff {
namespace {

struct Ctx {
  GroupState s;
  std::vector<Action> actions;
  std::vector<std::string_view> ids;
  double now = 0;
};

const std::vector<Stage>& RecoveryStages() {
  static const std::vector<Stage> stages = [] {
    std::vector<Stage> out;
    for (Stage st : StageOrder()) {
      if (st == Stage::kResumeActor || st == Stage::kResumeInference || st == Stage::kLoadWeights ||
          st == Stage::kResumeGraphs) {
        out.push_back(st);
      }
    }
    return out;
  }();
  return stages;
}

const std::vector<Stage>& StagesFor(Mode m) {
  return m == Mode::kRecovering ? RecoveryStages() : StageOrder();
}

double TimeoutFor(const GroupConfig& cfg, PhaseKind k) {
  auto it = cfg.choreography.phases.find(k);
  if (it != cfg.choreography.phases.end() && it->second.timeout_s > 0) return it->second.timeout_s;
  return cfg.choreography.timeout_s;
}

// Is this worker the one doing the work of `p`?
bool ActiveIn(const GroupConfig& cfg, const WorkerId& w, RoleKind kind, const Phase& p) {
  switch (p.kind) {
    case PhaseKind::kRollout: return kind == RoleKind::kRollout;
    case PhaseKind::kTeacher: return kind == RoleKind::kTeacher && w.role == cfg.TeacherName(p.teacher);
    case PhaseKind::kTrain: return kind == RoleKind::kActor;
    case PhaseKind::kInit:
    case PhaseKind::kSync: return false;
  }
  return false;
}

// The tags `w` should release / resume on entering `p`, per the choreography.
TagSet PlannedTags(const GroupConfig& cfg, const WorkerId& w, RoleKind kind, const Phase& p, bool release) {
  auto it = cfg.choreography.phases.find(p.kind);
  if (it == cfg.choreography.phases.end()) return {};
  const auto& by_kind = release ? it->second.release : it->second.resume;
  auto jt = by_kind.find(kind);
  if (jt == by_kind.end()) return {};
  if (p.kind == PhaseKind::kTeacher && kind == RoleKind::kTeacher) {
    const bool chosen = w.role == cfg.TeacherName(p.teacher);
    if (release == chosen) return {};  // others release, the chosen one resumes
  }
  return jt->second;
}

TagSet Minus(TagSet a, const TagSet& b) {
  for (Tag t : b) a.erase(t);
  return a;
}
TagSet Only(const TagSet& a, const TagSet& keep) {
  TagSet out;
  for (Tag t : a) {
    if (keep.count(t)) out.insert(t);
  }
  return out;
}

// The command `w` gets in stage `st`, if any.
std::optional<Outstanding> CommandFor(const GroupState& s, const WorkerId& w, const WorkerState& ws, Stage st) {
  const GroupConfig& cfg = *s.config;
  const bool inference = IsInference(ws.kind);
  const TagSet resident = s.ledger.ResidentTags(w);
  Outstanding o{.worker = w, .stage = st};
  auto with_tags = [&](CommandKind k, TagSet tags) -> std::optional<Outstanding> {
    if (tags.empty()) return std::nullopt;
    o.kind = k;
    o.tags = std::move(tags);
    return o;
  };
  if (s.mode == Mode::kRecovering) {
    if (ws.restore.empty()) return std::nullopt;
    const TagSet want = Minus(ws.restore, resident);
    switch (st) {
      case Stage::kResumeActor:
        return inference ? std::nullopt : with_tags(CommandKind::kResume, want);
      case Stage::kResumeInference:
        return inference ? with_tags(CommandKind::kResume, Minus(want, {Tag::kCudaGraph})) : std::nullopt;
      case Stage::kLoadWeights:
        if (ws.kind != RoleKind::kRollout || !ws.restore.count(Tag::kWeights) || s.published_version == 0 ||
            ws.loaded_version >= s.published_version) {
          return std::nullopt;
        }
        o.kind = CommandKind::kLoadWeights;
        o.version = s.published_version;
        return o;
      case Stage::kResumeGraphs:
        return inference ? with_tags(CommandKind::kResume, Only(want, {Tag::kCudaGraph})) : std::nullopt;
      default: return std::nullopt;
    }
  }
  const Phase& p = s.target;
  TagSet managed;  // a worker is only asked about the tags it said it manages
  for (const auto& [t, size] : ws.tag_sizes) managed.insert(t);
  const TagSet release = Only(PlannedTags(cfg, w, ws.kind, p, true), resident);
  const TagSet resume = Only(Minus(PlannedTags(cfg, w, ws.kind, p, false), resident), managed);
  const bool active = ActiveIn(cfg, w, ws.kind, p);
  switch (st) {
    case Stage::kPause:
      if (!ws.running || active) return std::nullopt;
      o.kind = CommandKind::kPause;
      return o;
    case Stage::kReleaseInference:
      return inference ? with_tags(CommandKind::kRelease, release) : std::nullopt;
    case Stage::kReleaseActor:
      return inference ? std::nullopt : with_tags(CommandKind::kRelease, Minus(release, {Tag::kIpcExports}));
    case Stage::kPublish:
      if (inference || p.kind != PhaseKind::kSync || s.published_version >= p.version) return std::nullopt;
      o.kind = CommandKind::kPublishWeights;
      o.version = p.version;
      return o;
    case Stage::kResumeActor:
      return inference ? std::nullopt : with_tags(CommandKind::kResume, resume);
    case Stage::kResumeInference:
      return inference ? with_tags(CommandKind::kResume, Minus(resume, {Tag::kCudaGraph})) : std::nullopt;
    case Stage::kLoadWeights:
      if (ws.kind != RoleKind::kRollout || p.kind != PhaseKind::kSync || ws.loaded_version >= p.version) {
        return std::nullopt;
      }
      o.kind = CommandKind::kLoadWeights;
      o.version = p.version;
      return o;
    case Stage::kReleaseExports:
      return inference ? std::nullopt : with_tags(CommandKind::kRelease, Only(release, {Tag::kIpcExports}));
    case Stage::kResumeGraphs:
      return inference ? with_tags(CommandKind::kResume, Only(resume, {Tag::kCudaGraph})) : std::nullopt;
    case Stage::kContinue:
      if (ws.running || !active) return std::nullopt;
      o.kind = CommandKind::kContinue;
      return o;
  }
  return std::nullopt;
}

void Fail(Ctx& c, std::string cause) {
  c.s.mode = Mode::kFailed;
  c.s.fault = cause;
  c.actions.push_back(GroupFailed{std::move(cause)});
}

// Runs stages from stage_index+1 until one has commands (sent) or none is
// left (the phase is reached, or recovery ends and the transition re-runs).
void Advance(Ctx& c) {
  GroupState& s = c.s;
  for (;;) {
    const std::vector<Stage>& stages = StagesFor(s.mode);
    if (++s.stage_index >= static_cast<int>(stages.size())) {
      if (s.mode == Mode::kRecovering) {
        c.ids.push_back("T13");
        for (auto& [w, ws] : s.workers) ws.restore.clear();
        s.mode = Mode::kTransition;
        s.fault.clear();
        s.stage_index = -1;
        continue;
      }
      c.ids.push_back("T6");
      s.mode = Mode::kSettled;
      s.phase = s.target;
      s.stage_index = -1;
      c.actions.push_back(PhaseReached{s.phase});
      return;
    }
    const Stage st = stages[s.stage_index];
    std::vector<Outstanding> cmds;
    for (const auto& [w, ws] : s.workers) {
      if (auto o = CommandFor(s, w, ws, st)) cmds.push_back(std::move(*o));
    }
    if (cmds.empty()) continue;
    std::vector<Ledger::Planned> planned;
    for (const Outstanding& o : cmds) {
      if (o.kind != CommandKind::kResume) continue;
      const WorkerState& ws = s.workers.at(o.worker);
      for (Tag t : o.tags) {
        auto it = ws.tag_sizes.find(t);
        planned.push_back({o.worker, t, it == ws.tag_sizes.end() ? 0 : it->second});
      }
    }
    if (Status fits = s.ledger.CheckFits(planned); !fits.ok()) {
      c.ids.push_back("T15");
      for (const Outstanding& o : cmds) {
        if (o.kind != CommandKind::kResume) continue;
        c.actions.push_back(HandoffRecord{.phase = s.target, .step = s.step + 1,
                                          .stage = std::string(StageName(st)), .worker = o.worker,
                                          .command = o.kind, .tags = o.tags, .start = c.now,
                                          .outcome = "refused", .message = fits.message()});
      }
      c.actions.push_back(PhaseRefused{s.target, fits.message()});
      // During recovery restarted workers cannot get their memory back.
      if (s.mode == Mode::kRecovering || s.config->choreography.on_refusal == OnRefusal::kFail) {
        Fail(c, fmt::format("phase {} refused: {}", PhaseName(s.target), fits.message()));
        return;
      }
      // The job goes on. The group settles in no phase (INIT):
      // what the transition released stays released and the next request,
      // whatever phase it names, runs a whole transition from here.
      s.mode = Mode::kSettled;
      s.phase = Phase{};
      s.target = s.phase;
      s.stage_index = -1;
      return;
    }
    ++s.step;
    const double timeout = TimeoutFor(*s.config, s.target.kind);
    for (Outstanding& o : cmds) {
      o.command_id = s.next_command_id++;
      o.step = s.step;
      o.sent_at = c.now;
      c.actions.push_back(SendCommand{.command_id = o.command_id, .worker = o.worker, .kind = o.kind,
                                      .tags = o.tags, .version = o.version, .phase = s.target,
                                      .step = s.step, .stage = std::string(StageName(st)),
                                      .timeout_s = timeout});
      s.outstanding.push_back(std::move(o));
    }
    return;
  }
}

// Starts recovery when every faulted worker is back and nothing is in flight.
void MaybeRecover(Ctx& c) {
  GroupState& s = c.s;
  if (s.mode != Mode::kFaulted || !s.down.empty() || !s.outstanding.empty()) return;
  s.mode = Mode::kRecovering;
  s.stage_index = -1;
  Advance(c);
}

std::string DescribeFault(const WorkerId& w, std::string_view what) {
  return fmt::format("{}: {}", w.ToString(), what);
}

// A worker failed (error, timeout, death): FAULTED, then the job's policy.
void Fault(Ctx& c, const WorkerId& w, const std::string& cause) {
  GroupState& s = c.s;
  WorkerState& ws = s.workers.at(w);
  // What it held, less what it was releasing: what it should get back.
  TagSet releasing;
  for (const Outstanding& o : s.outstanding) {
    if (o.worker == w && o.kind == CommandKind::kRelease) releasing.insert(o.tags.begin(), o.tags.end());
  }
  // Exports are not restored: they are recreated by publishing again. A
  // worker that faults again before its recovery finished keeps what it was
  // still owed (found by the spin model: assigning here lost it).
  for (Tag t : Minus(Minus(s.ledger.ResidentTags(w), releasing), {Tag::kIpcExports})) ws.restore.insert(t);
  if (ws.kind == RoleKind::kActor && s.mode != Mode::kSettled && s.target.kind == PhaseKind::kSync) {
    s.published_version = s.published_before;  // its exports are gone: publish again
  }
  ws.hello = false;
  ws.running = false;
  ws.loaded_version = 0;
  std::erase_if(s.outstanding, [&](const Outstanding& o) { return o.worker == w; });
  for (ResidencyRecord& r : s.ledger.Forget(w, c.now)) c.actions.push_back(std::move(r));
  if (s.mode == Mode::kSettled) s.target = s.phase;
  s.fault = s.fault.empty() ? cause : s.fault + "; " + cause;
  if (s.config->choreography.on_fault == OnFault::kFail) {
    c.ids.push_back("T10");
    Fail(c, s.fault);
    return;
  }
  c.ids.push_back("T11");
  s.mode = Mode::kFaulted;
  s.down.insert(w);
  c.actions.push_back(RestartWorker{w, cause});
}

std::map<Tag, uint64_t> BytesMoved(const GroupState& before, const Outstanding& o,
                                   const std::map<Tag, uint64_t>& after) {
  std::map<Tag, uint64_t> moved;
  for (Tag t : o.tags) {
    const uint64_t b = before.ledger.Bytes(o.worker, t);
    const auto it = after.find(t);
    const uint64_t a = it == after.end() ? 0 : it->second;
    moved[t] = b > a ? b - a : a - b;
  }
  return moved;
}

HandoffRecord RecordFor(const GroupState& s, const Outstanding& o, double at, std::string outcome) {
  return HandoffRecord{.phase = s.target, .step = o.step, .stage = std::string(StageName(o.stage)),
                       .worker = o.worker, .command = o.kind, .tags = o.tags, .version = o.version,
                       .start = o.sent_at, .duration = std::max(0.0, at - o.sent_at),
                       .outcome = std::move(outcome)};
}

void OnRequest(Ctx& c, const RequestPhase& e) {
  GroupState& s = c.s;
  const GroupConfig& cfg = *s.config;
  auto refuse = [&](std::string why, bool transient = false) {
    c.ids.push_back("T3");
    c.actions.push_back(PhaseRefused{e.phase, std::move(why), transient});
  };
  if (s.mode == Mode::kFailed) return refuse("the group failed: " + s.fault);
  if (s.mode != Mode::kSettled) {
    if (e.phase == s.target) {
      c.ids.push_back("T2");
      return;
    }
    return refuse(fmt::format("busy: the group is {} entering {}", ModeName(s.mode), PhaseName(s.target)), true);
  }
  if (e.phase == s.phase && s.phase.kind != PhaseKind::kInit) {
    c.ids.push_back("T2");
    c.actions.push_back(PhaseReached{s.phase});
    return;
  }
  if (e.phase.kind == PhaseKind::kInit) return refuse("INIT is not a phase one can request");
  if (e.phase.kind == PhaseKind::kTeacher && (e.phase.teacher < 0 || e.phase.teacher >= cfg.TeacherCount())) {
    return refuse(fmt::format("no teacher {} in the group (it has {})", e.phase.teacher, cfg.TeacherCount()));
  }
  if (e.phase.kind == PhaseKind::kSync && e.phase.version <= s.published_version) {
    return refuse(fmt::format("version {} is not newer than the published version {}", e.phase.version,
                              s.published_version));
  }
  for (const auto& [w, ws] : s.workers) {
    if (!ws.hello) return refuse(fmt::format("waiting for hello from {}", w.ToString()), true);
  }
  c.ids.push_back("T1");
  s.published_before = s.published_version;
  s.mode = Mode::kTransition;
  s.target = e.phase;
  s.stage_index = -1;
  s.step = -1;
  Advance(c);
}

void OnAnswer(Ctx& c, const WorkerId& w, uint64_t id, const std::map<Tag, uint64_t>& resident,
              const std::vector<DeviceMemory>& devices, const std::string* error) {
  GroupState& s = c.s;
  auto it = std::find_if(s.outstanding.begin(), s.outstanding.end(),
                         [&](const Outstanding& o) { return o.command_id == id && o.worker == w; });
  if (it == s.outstanding.end()) {
    c.ids.push_back("T7");
    return;
  }
  const Outstanding o = *it;
  s.outstanding.erase(it);
  HandoffRecord rec = RecordFor(s, o, c.now, error ? "error" : "ok");
  rec.bytes_by_tag = BytesMoved(s, o, resident);
  for (const auto& [t, b] : rec.bytes_by_tag) rec.bytes += b;
  if (error) rec.message = *error;
  const TagSet released = o.kind == CommandKind::kRelease ? o.tags : TagSet{};
  std::vector<ResidencyRecord> changes = s.ledger.Report(w, resident, devices, released, c.now);
  c.actions.push_back(std::move(rec));
  for (ResidencyRecord& r : changes) c.actions.push_back(std::move(r));
  if (s.mode == Mode::kFailed) {
    c.ids.push_back("T4");  // the ledger learns; nothing else moves
    return;
  }
  if (error) {
    c.ids.push_back("T8");
    Fault(c, w, DescribeFault(w, fmt::format("{} failed: {}", CommandKindName(o.kind), *error)));
    MaybeRecover(c);
    return;
  }
  WorkerState& ws = s.workers.at(w);
  if (o.kind == CommandKind::kPause) ws.running = false;
  if (o.kind == CommandKind::kContinue) ws.running = true;
  if (o.kind == CommandKind::kLoadWeights) ws.loaded_version = o.version;
  if (o.kind == CommandKind::kPublishWeights) s.published_version = std::max(s.published_version, o.version);
  if (s.mode == Mode::kFaulted) {
    c.ids.push_back("T4");
    MaybeRecover(c);
    return;
  }
  if (!s.outstanding.empty()) {
    c.ids.push_back("T4");
    return;
  }
  c.ids.push_back("T5");
  Advance(c);
}

void OnTimeout(Ctx& c, const Timeout& e) {
  GroupState& s = c.s;
  auto it = std::find_if(s.outstanding.begin(), s.outstanding.end(),
                         [&](const Outstanding& o) { return o.command_id == e.command_id && o.worker == e.worker; });
  if (it == s.outstanding.end()) {
    c.ids.push_back("T7");
    return;
  }
  c.actions.push_back(RecordFor(s, *it, c.now, "timeout"));
  c.ids.push_back("T8");
  Fault(c, e.worker, DescribeFault(e.worker, fmt::format("{} timed out", CommandKindName(it->kind))));
  MaybeRecover(c);
}

void OnDied(Ctx& c, const WorkerDied& e) {
  GroupState& s = c.s;
  if (s.down.count(e.worker)) {
    c.ids.push_back("T7");  // already handled (e.g. killed by RestartWorker)
    return;
  }
  for (const Outstanding& o : s.outstanding) {
    if (o.worker == e.worker) c.actions.push_back(RecordFor(s, o, c.now, "died"));
  }
  c.ids.push_back("T9");
  Fault(c, e.worker, DescribeFault(e.worker, "died: " + e.cause));
  MaybeRecover(c);
}

void OnHello(Ctx& c, const Hello& e) {
  GroupState& s = c.s;
  WorkerState& ws = s.workers.at(e.worker);
  ws.tag_sizes = e.tag_sizes;
  ws.hello = true;
  for (ResidencyRecord& r : s.ledger.Report(e.worker, e.resident, e.devices, {}, c.now)) {
    c.actions.push_back(std::move(r));
  }
  if (s.down.erase(e.worker)) {
    c.ids.push_back("T12");
    MaybeRecover(c);
    return;
  }
  c.ids.push_back("T14");
}

}  // namespace

std::string_view ModeName(Mode m) {
  switch (m) {
    case Mode::kSettled: return "settled";
    case Mode::kTransition: return "transition";
    case Mode::kFaulted: return "FAULTED";
    case Mode::kRecovering: return "recovering";
    case Mode::kFailed: return "failed";
  }
  return "unknown";
}

GroupState InitialState(std::shared_ptr<const GroupConfig> config) {
  GroupState s;
  for (const auto& [gpu, bytes] : config->capacity) s.ledger.SetCapacity(gpu, bytes);
  for (const GroupRole& r : config->roles) {
    for (size_t rank = 0; rank < r.gpus.size(); ++rank) {
      WorkerId w{r.name, static_cast<int>(rank)};
      s.workers[w].kind = r.kind;
      s.ledger.SetWorkerGpus(w, r.gpus[rank]);
    }
  }
  s.config = std::move(config);
  return s;
}

ApplyResult Apply(const GroupState& state, const Event& event) {
  Ctx c{.s = state};
  std::visit([&](const auto& e) { c.now = e.at; }, event);
  const WorkerId* who = std::visit(
      [](const auto& e) -> const WorkerId* {
        if constexpr (requires { e.worker; }) return &e.worker; else return nullptr;
      },
      event);
  if (who && !c.s.workers.count(*who)) {
    return {std::move(c.s), {}, {"T16"}};
  }
  const bool answer = std::holds_alternative<Ack>(event) || std::holds_alternative<WorkerError>(event);
  if (c.s.mode == Mode::kFailed && !answer && !std::holds_alternative<RequestPhase>(event)) {
    return {std::move(c.s), {}, {"T16"}};
  }
  if (const auto* e = std::get_if<RequestPhase>(&event)) OnRequest(c, *e);
  if (const auto* e = std::get_if<Hello>(&event)) OnHello(c, *e);
  if (const auto* e = std::get_if<Ack>(&event)) OnAnswer(c, e->worker, e->command_id, e->resident, e->devices, nullptr);
  if (const auto* e = std::get_if<WorkerError>(&event)) {
    OnAnswer(c, e->worker, e->command_id, e->resident, e->devices, &e->message);
  }
  if (const auto* e = std::get_if<Timeout>(&event)) OnTimeout(c, *e);
  if (const auto* e = std::get_if<WorkerDied>(&event)) OnDied(c, *e);
  return {std::move(c.s), std::move(c.actions), std::move(c.ids)};
}

}  // namespace tandem::handoff
