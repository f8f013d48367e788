// The handoff engine's pure transition function (docs/handoff.md,
// "In the daemon"): Apply(state, event) -> (state, actions) for one colocation group.
//
// A transition into a phase runs the stages of ordering_rules.h in their
// rule-imposed order; the commands of a stage are computed when the stage
// starts, from the ledger's residency at that moment, so a tag that is
// already where the phase wants it produces no command (a repeated request
// or a re-run after a fault is a no-op for it). Stages without commands are
// skipped. Before a stage that resumes tags the ledger checks that they fit
// on every GPU; if not, the group is FAULTED and failed with the ledger's
// message (naming GPU, roles and bytes).
//
// Transition ids (T1..T16) name every branch of Apply (see transition.cc); the Promela model
// (model/handoff.pml) carries the same ids, and model_correspondence_test
// checks that each id in kTransitionIds appears there.
//
// Contract for the executor (not in this library):
//  - Feed every event, in the order observed, through Apply; replace the
//    state with the result; then perform the actions in order. Journal the
//    event before performing its actions, so replaying the journal through
//    Apply rebuilds the same state (Apply is deterministic).
//  - SendCommand: send it over the worker's control connection. If no answer
//    within timeout_s it may re-send the same command_id (workers treat a
//    repeated id as a no-op that answers with current residency); when it
//    gives up it feeds Timeout{worker, command_id}. Late answers after that
//    are still fed to Apply: they change nothing.
//  - HandoffRecord / ResidencyRecord: append to handoff.jsonl / residency.jsonl
//    (log_writer.h).
//  - RestartWorker: kill the task if still running, start it again; its
//    Hello is fed to Apply. Feed WorkerDied when a process ends or its
//    connection closes (also for a worker killed by RestartWorker: ignored).
//  - PhaseReached / PhaseRefused: answer the requester (API or controller).
//  - GroupFailed: fail the job; the group accepts no more phases.
#pragma once

#include <array>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "orchestrator/handoff/choreography.h"
#include "orchestrator/handoff/ledger.h"
#include "orchestrator/handoff/ordering_rules.h"
#include "orchestrator/handoff/types.h"

namespace tandem::handoff {

enum class Mode {
  kSettled,     // in `phase`, nothing in flight
  kTransition,  // entering `target`, one stage in flight
  kFaulted,     // a worker died, timed out or failed; `fault` says which
  kRecovering,  // on_fault=restart: restarted workers get their memory back
  kFailed,      // terminal: on_fault=fail, or an unrecoverable fault
};
std::string_view ModeName(Mode m);

struct Outstanding {
  uint64_t command_id = 0;
  WorkerId worker;
  CommandKind kind = CommandKind::kPause;
  TagSet tags;
  int64_t version = 0;
  int step = 0;
  Stage stage = Stage::kPause;
  double sent_at = 0;
};

struct WorkerState {
  RoleKind kind = RoleKind::kActor;
  bool hello = false;     // said hello (and is not known dead since)
  bool running = false;   // continued and not paused since
  std::map<Tag, uint64_t> tag_sizes;  // from hello, bytes per GPU
  int64_t loaded_version = 0;         // readers: the last version loaded
  TagSet restore;                     // after a fault: tags to bring back
};

struct GroupState {
  std::shared_ptr<const GroupConfig> config;
  Phase phase;                 // the last phase reached
  Phase target;                // the phase being entered (kTransition, kFaulted, kRecovering)
  Mode mode = Mode::kSettled;
  int stage_index = -1;        // position in the stage list being run
  int step = -1;               // steps sent in this transition
  std::vector<Outstanding> outstanding;
  std::map<WorkerId, WorkerState> workers;
  std::set<WorkerId> down;     // faulted workers not yet back (restart)
  Ledger ledger;
  int64_t published_version = 0;
  int64_t published_before = 0;  // published_version when the transition started
  uint64_t next_command_id = 1;
  std::string fault;           // the cause, in kFaulted/kRecovering/kFailed
};

// The group before its first phase: every worker of `config` known, none
// said hello yet, capacities and placements in the ledger.
GroupState InitialState(std::shared_ptr<const GroupConfig> config);

struct ApplyResult {
  GroupState state;
  std::vector<Action> actions;
  std::vector<std::string_view> transitions;  // the ids of the branches taken ("T4"), in order
};
ApplyResult Apply(const GroupState& state, const Event& event);

// Every transition id Apply can report, in order.
inline constexpr std::array<std::string_view, 16> kTransitionIds{
    "T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "T9", "T10", "T11", "T12", "T13", "T14", "T15", "T16"};

}  // namespace tandem::handoff
