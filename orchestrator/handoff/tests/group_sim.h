// Test support: a colocation group of actor, rollout and teacher workers on
// one GPU, and workers that answer commands the way a probe worker does
// (bytes per tag appear on resume, disappear on release, exports appear on
// publish), so tests drive the real transition function through whole
// handoffs. Used by transition_test.cc and log_schema_test.cc.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "orchestrator/handoff/transition.h"

namespace tandem::handoff::testing {

inline const WorkerId kActor{"actor", 0};
inline const WorkerId kRollout{"rollout", 0};
inline const WorkerId kJudge{"judge", 0};

inline std::map<Tag, uint64_t> SizesOf(RoleKind k) {
  if (k == RoleKind::kActor) {
    return {{Tag::kParams, 20}, {Tag::kGrads, 20}, {Tag::kOptimizer, 30}, {Tag::kIpcExports, 10}};
  }
  if (k == RoleKind::kRollout) return {{Tag::kWeights, 20}, {Tag::kKvCache, 30}, {Tag::kCudaGraph, 5}};
  return {{Tag::kWeights, 25}};
}

struct GroupOptions {
  int rollout_ranks = 1;
  uint64_t capacity = 100;
  OnFault on_fault = OnFault::kRestart;
  OnRefusal on_refusal = OnRefusal::kGoOn;
};

inline std::shared_ptr<const GroupConfig> MakeConfig(GroupOptions o = {}) {
  auto cfg = std::make_shared<GroupConfig>();
  cfg->roles.push_back({"actor", RoleKind::kActor, {{0}}});
  GroupRole rollout{"rollout", RoleKind::kRollout, {}};
  for (int i = 0; i < o.rollout_ranks; ++i) rollout.gpus.push_back({0});
  cfg->roles.push_back(rollout);
  cfg->roles.push_back({"judge", RoleKind::kTeacher, {{0}}});
  cfg->capacity[0] = o.capacity;
  cfg->choreography.on_fault = o.on_fault;
  cfg->choreography.on_refusal = o.on_refusal;
  return cfg;
}

// A group and its simulated workers.
class Group {
 public:
  explicit Group(GroupOptions o = {}) : state(InitialState(MakeConfig(o))) {}

  GroupState state;
  std::deque<SendCommand> pending;          // sent, not yet answered
  std::vector<Action> last;                 // actions of the last event
  std::vector<std::string_view> last_ids;   // transitions of the last event
  std::vector<Action> all;                  // every action so far
  std::map<WorkerId, std::map<Tag, uint64_t>> resident;  // what each worker really holds
  uint64_t device_extra = 0;                // bytes the device holds beyond the workers (a leak)
  bool leak_releases = false;               // releases keep their memory on the device
  double clock = 100;

  void Feed(const Event& e) {
    ApplyResult r = Apply(state, e);
    state = std::move(r.state);
    last = r.actions;
    last_ids = r.transitions;
    for (const Action& a : r.actions) {
      all.push_back(a);
      if (const auto* c = std::get_if<SendCommand>(&a)) pending.push_back(*c);
    }
  }
  void HelloAll() {
    std::vector<std::pair<WorkerId, RoleKind>> workers;
    for (const auto& [w, ws] : state.workers) workers.emplace_back(w, ws.kind);
    for (const auto& [w, kind] : workers) Feed(Hello{w, SizesOf(kind), {}, {}, Now()});
  }
  double Now() { return clock += 0.5; }

  std::vector<DeviceMemory> Reading() const {
    uint64_t used = device_extra;
    for (const auto& [w, tags] : resident) {
      for (const auto& [t, b] : tags) used += b;
    }
    return {DeviceMemory{0, used, state.config->capacity.at(0)}};
  }
  // What the worker does on `c`, and its ack.
  Ack Perform(const SendCommand& c) {
    auto& mine = resident[c.worker];
    const auto sizes = SizesOf(state.workers.at(c.worker).kind);
    if (c.kind == CommandKind::kRelease) {
      for (Tag t : c.tags) {
        if (leak_releases && mine.count(t)) device_extra += mine[t];
        mine.erase(t);
      }
    }
    if (c.kind == CommandKind::kResume) {
      for (Tag t : c.tags) mine[t] = sizes.at(t);
    }
    if (c.kind == CommandKind::kPublishWeights) mine[Tag::kIpcExports] = sizes.at(Tag::kIpcExports);
    return Ack{c.worker, c.command_id, mine, Reading(), Now()};
  }
  // Answers the oldest pending command.
  SendCommand AckNext() {
    SendCommand c = pending.front();
    pending.pop_front();
    Feed(Perform(c));
    return c;
  }
  void AckAll() {
    while (!pending.empty()) AckNext();
  }
  void Enter(Phase p) {
    Feed(RequestPhase{p, Now()});
    AckAll();
  }
  // The commands among the last actions, as "rollout/0 release weights,kv_cache".
  std::vector<std::string> Sent() const { return Describe(last, /*only_sends=*/true); }
  std::vector<std::string> Controls() const { return Describe(last, false); }

  static std::string Describe(const SendCommand& c) {
    std::string s = fmt::format("{} {}", c.worker.ToString(), CommandKindName(c.kind));
    if (!c.tags.empty()) s += " " + TagSetName(c.tags);
    if (c.kind == CommandKind::kPublishWeights || c.kind == CommandKind::kLoadWeights) {
      s += fmt::format(" v{}", c.version);
    }
    return s;
  }
  // SendCommand, PhaseReached, PhaseRefused, RestartWorker and GroupFailed
  // actions as short strings (log records left out).
  static std::vector<std::string> Describe(const std::vector<Action>& actions, bool only_sends) {
    std::vector<std::string> out;
    for (const Action& a : actions) {
      if (const auto* c = std::get_if<SendCommand>(&a)) out.push_back(Describe(*c));
      if (only_sends) continue;
      if (const auto* r = std::get_if<PhaseReached>(&a)) out.push_back("reached " + PhaseName(r->phase));
      if (const auto* r = std::get_if<PhaseRefused>(&a)) out.push_back("refused " + PhaseName(r->phase));
      if (const auto* r = std::get_if<RestartWorker>(&a)) out.push_back("restart " + r->worker.ToString());
      if (std::get_if<GroupFailed>(&a)) out.push_back("failed");
    }
    return out;
  }
};

inline Phase Rollout() { return {PhaseKind::kRollout}; }
inline Phase Teacher(int i) { return {PhaseKind::kTeacher, i}; }
inline Phase Train() { return {PhaseKind::kTrain}; }
inline Phase Sync(int64_t v) { return {PhaseKind::kSync, 0, v}; }

}  // namespace tandem::handoff::testing
