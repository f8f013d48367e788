// The job spec: what a user submits (schemas/jobspec.schema.json is the one
// source of truth; docs/jobspec.md is its reference for people).
//
// ParseJobSpec turns JSON into a JobSpec, reporting every violation with its
// JSON path and what was expected, e.g.
//   roles.actor.replicas: expected an integer >= 1, got "two"
// It checks what the schema checks (types, ranges, unknown keys) and what a
// schema cannot (colocate_with names an existing role, no cycles, replicas x
// gpus_per_replica fits the colocation group, the groups fit the devices).
// Checking against the daemon's inventory is separate (CheckFitsInventory),
// because `tandem validate` runs without a daemon.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::spec {

enum class BackendKind { kLocal, kSlurm, kRedis };
std::string_view BackendKindName(BackendKind k);  // "local", "slurm", "redis"

struct BackendSpec {
  BackendKind kind = BackendKind::kLocal;
  // Backend-specific options (slurm: partition, account, ...; redis: url,
  // ...), validated by the schema and interpreted by that backend.
  nlohmann::json options = nlohmann::json::object();
};

struct RestartPolicy {
  enum class Kind { kNever, kOnFailure, kAlways };
  Kind kind = Kind::kNever;
  int max_restarts = 0;        // restarts per task, after which the task fails (3 when a spec's restart omits it)
  double backoff_initial_s = 1.0;  // first delay; doubles each restart
  double backoff_max_s = 30.0;
};

struct RoleSpec {
  std::string name;
  std::vector<std::string> command;  // argv; empty when `worker` is set
  std::string worker;                // native worker name (tandem-worker ROLE), else ""
  std::vector<std::string> args;     // extra arguments for a native worker
  int replicas = 1;
  int gpus_per_replica = 0;          // 0: a CPU-only role, gets no devices
  std::map<std::string, std::string> env;
  std::vector<std::map<std::string, std::string>> replica_env;  // empty, or one map per replica
  int ports = 0;                     // ports leased per task (TANDEM_PORTS)
  RestartPolicy restart;
  std::string colocate_with;         // "" or the name of another role
  std::string cwd;                   // "" = the run dir
};

// The job's `handoff` section (issue #3; docs/handoff.md "In the job spec").
// Which roles take part in GPU handoffs, as which kind, and how. Role kinds
// and tags are the wire names of docs/control-protocol.md:
// kinds "actor", "rollout", "teacher"; tags "weights", "kv_cache",
// "cuda_graph", "params", "grads", "optimizer", "activations", "ipc_exports".
struct HandoffPhaseSpec {
  // Role kind -> the tags that kind releases / resumes on entering the phase.
  // A phase given in the spec replaces the default plan of that phase whole.
  std::map<std::string, std::vector<std::string>> release;
  std::map<std::string, std::vector<std::string>> resume;
  double timeout_s = 0;  // per command; 0: the section's timeout_s
};

struct HandoffSpec {
  // Role name -> kind. A role not named here takes part when its `worker`
  // is "actor", "rollout" or "teacher" (that is its kind); other roles are
  // plain tasks, never asked to hand off.
  std::map<std::string, std::string> roles;
  // The role whose tasks drive the phases (they send request_phase). When
  // every task of it has succeeded, the other handoff workers of its group
  // are sent `shutdown`. "" = none (phases come from the API only).
  std::string controller;
  double timeout_s = 120;          // default per-command timeout
  // "fail" | "restart" | "" (not given). A worker fault fails the job unless
  // "restart"; a phase the ledger refuses fails it only when "fail" is given
  // (docs/handoff.md "Refusals").
  std::string on_fault;
  uint64_t gpu_memory = 0;         // bytes per GPU the ledger checks against; 0: the device's own total
  std::map<std::string, HandoffPhaseSpec> phases;  // "rollout", "teacher", "train", "sync"

  // The kind of `role` in this job ("" when it does not take part).
  std::string KindOf(const RoleSpec& role) const;
};

struct JobSpec {
  std::string name;
  BackendSpec backend;
  std::vector<int> devices;          // logical device ids given to the job (0..N-1 for a count)
  std::map<std::string, std::string> env;
  std::string run_dir;               // "" = <state-dir>/runs/<job id>; relative paths resolve against the submitter's cwd
  std::vector<RoleSpec> roles;       // in the order of the spec's "roles" object
  HandoffSpec handoff;               // defaults when the spec has no `handoff`
  nlohmann::ordered_json raw;        // the spec as submitted, in the document's key order

  const RoleSpec* FindRole(std::string_view name) const;
};

struct SpecError {
  std::string path;     // "roles.actor.replicas"; "" for the document itself
  std::string message;  // "expected an integer >= 1, got \"two\""
  std::string ToString() const;  // "path: message"
};

struct ParseResult {
  std::optional<JobSpec> spec;      // set iff errors is empty
  std::vector<SpecError> errors;
  // One Status (kInvalidArgument) carrying every error, one per line; ok if none.
  Status ToStatus() const;
};

// Roles are taken in the order of the document's "roles" object. Only
// ordered_json keeps that order; nlohmann::json sorts keys, so with it roles
// come in alphabetical order. Prefer ParseJobSpecText or the ordered_json
// overload wherever the spec arrives as text.
ParseResult ParseJobSpec(const nlohmann::ordered_json& doc);
ParseResult ParseJobSpec(const nlohmann::json& doc);
// Parses text first (strict JSON, into ordered_json); a JSON syntax error is
// reported with its byte offset. `tandem validate` is: ParseJobSpecText, print
// each error's ToString() on its own line, exit 1 if there were any.
ParseResult ParseJobSpecText(std::string_view text);

// The physical devices a daemon may hand out (`--gpus 0,1,2,3`).
struct Inventory {
  std::vector<int> gpus;  // physical ids, in order
};
// Fails (kInvalidArgument / kResourceExhausted) when the job asks for more or
// other logical devices than the inventory has.
Status CheckFitsInventory(const JobSpec& spec, const Inventory& inv);

}  // namespace tandem::spec
