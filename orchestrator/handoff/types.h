// The vocabulary of the handoff engine (docs/handoff.md): memory
// tags, role kinds, phases, worker identities, and the events the engine
// consumes and the actions it emits. The names are the wire names of
// schemas/control.schema.json and of the handoff/residency log lines
// (schemas/handoff.schema.json, schemas/residency.schema.json).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tandem::handoff {

// Memory tags (docs/control-protocol.md). Inference roles manage
// weights, kv_cache, cuda_graph; the actor params, grads, optimizer,
// activations, ipc_exports.
enum class Tag { kWeights, kKvCache, kCudaGraph, kParams, kGrads, kOptimizer, kActivations, kIpcExports };
using TagSet = std::set<Tag>;
std::string_view TagName(Tag t);  // "weights", "kv_cache", ...
std::optional<Tag> ParseTag(std::string_view name);
std::string TagSetName(const TagSet& tags);  // "kv_cache,cuda_graph"

enum class RoleKind { kActor, kRollout, kTeacher };
std::string_view RoleKindName(RoleKind k);  // "actor", "rollout", "teacher"
std::optional<RoleKind> ParseRoleKind(std::string_view name);
inline bool IsInference(RoleKind k) { return k != RoleKind::kActor; }

// A phase of a colocation group. kInit: nothing is resident yet (the group
// before its first phase). TEACHER carries the teacher's index (0-based, in
// the order of the group's teacher roles); SYNC carries the weight version.
enum class PhaseKind { kInit, kRollout, kTeacher, kTrain, kSync };
struct Phase {
  PhaseKind kind = PhaseKind::kInit;
  int teacher = 0;      // kTeacher only
  int64_t version = 0;  // kSync only
  friend bool operator==(const Phase&, const Phase&) = default;
};
std::string PhaseName(const Phase& p);  // "ROLLOUT", "TEACHER(1)", "TRAIN", "SYNC(3)", "INIT"

// One worker: a task of a role (role name as in the job spec, and its rank).
struct WorkerId {
  std::string role;
  int rank = 0;
  auto operator<=>(const WorkerId&) const = default;
  std::string ToString() const;  // "rollout/0"
};

enum class CommandKind { kPause, kRelease, kResume, kPublishWeights, kLoadWeights, kContinue };
std::string_view CommandKindName(CommandKind k);  // "pause", "release", ... (control.schema.json)

// The device's own reading, as a worker reports it after each command.
struct DeviceMemory {
  int gpu = 0;  // logical id in the job's namespace
  uint64_t used = 0;
  uint64_t total = 0;
  // true: the whole device's reading (CUDA's cuMemGetInfo); false: the
  // worker's own accounting (its pools, or its RSS), comparable only with
  // the same worker's earlier readings.
  bool device_wide = true;
  friend bool operator==(const DeviceMemory&, const DeviceMemory&) = default;
};

// ---- Events (what happened; fed to Apply) --------------------------------
// `at` is the wall-clock time in seconds (the executor's clock); Apply uses
// it only to stamp log records, never to decide.

// The job's controller (or the API) asks the group to enter `phase`.
struct RequestPhase {
  Phase phase;
  double at = 0;
};
// A worker connected and said hello, with the size of each tag it manages
// (bytes per GPU) and what it holds now (tags absent = 0) with its devices'
// readings. Sent again by a restarted worker, and by a live worker that
// reconnects to a restarted daemon: its residency is the truth the ledger
// takes over.
struct Hello {
  WorkerId worker;
  std::map<Tag, uint64_t> tag_sizes;
  std::map<Tag, uint64_t> resident;
  std::vector<DeviceMemory> devices;
  double at = 0;
};
// A worker acknowledged command `command_id`: bytes resident per tag now
// (tags absent = 0) and its devices' readings.
struct Ack {
  WorkerId worker;
  uint64_t command_id = 0;
  std::map<Tag, uint64_t> resident;
  std::vector<DeviceMemory> devices;
  double at = 0;
};
// A worker answered command `command_id` with an error.
struct WorkerError {
  WorkerId worker;
  uint64_t command_id = 0;
  std::string message;
  std::map<Tag, uint64_t> resident;
  std::vector<DeviceMemory> devices;
  double at = 0;
};
// The executor gave up on command `command_id` (after its retries).
struct Timeout {
  WorkerId worker;
  uint64_t command_id = 0;
  double at = 0;
};
// The worker's process ended or its control connection closed.
struct WorkerDied {
  WorkerId worker;
  std::string cause;
  double at = 0;
};
using Event = std::variant<RequestPhase, Hello, Ack, WorkerError, Timeout, WorkerDied>;

// ---- Actions (what to do; performed by the executor) ---------------------

// Send one command. `command_id` is unique within the group and stable: a
// retry re-sends the same id, and the worker treats a repeated id as a no-op
// that answers with its current residency.
struct SendCommand {
  uint64_t command_id = 0;
  WorkerId worker;
  CommandKind kind = CommandKind::kPause;
  TagSet tags;           // release/resume
  int64_t version = 0;   // publish_weights/load_weights
  Phase phase;           // the phase being entered
  int step = 0;          // index of the step within the transition (0-based)
  std::string stage;     // the step's stage, e.g. "release_inference"
  double timeout_s = 0;  // the executor posts Timeout after this (0: none)
};
// One line of <run_dir>/handoff.jsonl: a command finished (or failed).
struct HandoffRecord {
  Phase phase;
  int step = 0;
  std::string stage;
  WorkerId worker;
  CommandKind command = CommandKind::kPause;
  TagSet tags;
  int64_t version = 0;
  uint64_t bytes = 0;   // bytes moved: released or resumed (summed over tags, per GPU)
  std::map<Tag, uint64_t> bytes_by_tag;  // the same, per tag
  double start = 0;
  double duration = 0;
  std::string outcome;  // "ok", "error", "timeout", "died", "refused"
  std::string message;  // error text, "" when ok
};
// One line of <run_dir>/residency.jsonl: a worker's residency changed.
struct ResidencyRecord {
  double at = 0;
  WorkerId worker;
  Tag tag = Tag::kWeights;
  uint64_t bytes = 0;          // now resident (per GPU)
  int64_t delta = 0;           // change since the previous record
  std::vector<DeviceMemory> devices;
  bool leak = false;           // a release that did not lower the device's used memory
  std::string note;            // why it is a leak, "" otherwise
};
// The group entered `phase` (the transition finished).
struct PhaseReached {
  Phase phase;
};
// A phase request was not started (busy, or the bytes would not fit).
struct PhaseRefused {
  Phase phase;
  std::string reason;
  // The group is busy (a transition or a recovery in flight) or a worker
  // has not said hello yet: the same request may succeed later (the daemon
  // answers `unavailable`, else `failed_precondition`).
  bool transient = false;
};
// on_fault=restart: restart this worker's task (it will say Hello again).
struct RestartWorker {
  WorkerId worker;
  std::string cause;
};
// on_fault=fail (or an unrecoverable fault): the group, hence the job, failed.
struct GroupFailed {
  std::string cause;
};
using Action = std::variant<SendCommand, HandoffRecord, ResidencyRecord, PhaseReached, PhaseRefused,
                            RestartWorker, GroupFailed>;

}  // namespace tandem::handoff
