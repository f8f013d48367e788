// The residency model of a run (docs/handoff.md "Reading the logs"; input:
// residency.jsonl lines, schemas/residency.schema.json). Per logical GPU: who
// holds what now per (role/rank, tag), the peak of the summed ledger bytes
// and when it happened (with who held what then), the last device reading
// (used/total, and which worker sent it), the capacity the ledger checked
// against when the spec set one (handoff.gpu_memory, read from the run dir's
// job.json), and the releases flagged as leaks. A worker with several GPUs
// holds its `bytes` on each of them (the log's bytes are per GPU). Lines are
// applied in time order (stable for equal times).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/report/phases.h"
#include "orchestrator/report/run_logs.h"

namespace tandem::report {

struct Holding {
  std::string group;
  std::string role;
  int rank = 0;
  std::string tag;
  uint64_t bytes = 0;
  double since = 0;  // when it last changed to this size
  std::string Worker() const { return role + "/" + std::to_string(rank); }
};

struct LeakMark {
  double ts = 0;
  std::string role;
  int rank = 0;
  std::string tag;
  int64_t delta = 0;  // what the worker released (negative)
  std::string note;   // the ledger's words, e.g. "gpu 0: used fell by 0 bytes, the worker released 25"
};

struct GpuResidency {
  int gpu = 0;
  std::vector<Holding> holders;  // bytes > 0 now; by role, rank, then tag in docs/handoff.md's order
  uint64_t ledger_bytes = 0;     // sum of holders
  uint64_t peak_bytes = 0;       // the largest sum over time
  double peak_ts = 0;            // when the sum first reached it
  std::string peak_phase;        // the phase at peak_ts ("" when unknown)
  std::vector<Holding> peak_holders;
  std::optional<DeviceReading> reading;  // the last device reading
  double reading_ts = 0;
  std::string reading_worker;            // "rollout/0": the worker whose answer carried it
  std::optional<uint64_t> capacity;      // the spec's handoff.gpu_memory, when it sets one
  std::vector<LeakMark> leaks;
  // Device used minus ledger bytes at the last reading (memory no tag accounts for).
  int64_t Untracked() const {
    return reading && reading->device_wide ? static_cast<int64_t>(reading->used) - static_cast<int64_t>(ledger_bytes) : 0;
  }
};

struct ResidencyModel {
  std::string run_dir;
  std::vector<GpuResidency> gpus;  // by gpu id
  size_t lines = 0;
  double first_ts = 0;
  double last_ts = 0;
  size_t leaks = 0;
};

// `gpu_memory`: the spec's handoff.gpu_memory (SpecGpuMemory), shown as
// each GPU's capacity.
ResidencyModel BuildResidencyModel(const RunLogs& logs, std::optional<uint64_t> gpu_memory = std::nullopt);

// The spec's handoff.gpu_memory from <run_dir>/job.json (what tandemd wrote
// there at submit); nullopt when the file, the key or a valid size is
// missing (a spec without it: the ledger checks against the device's total).
std::optional<uint64_t> SpecGpuMemory(const std::string& run_dir);

// The model as JSON (`tandem residency --json`), documented in docs/cli.md.
nlohmann::json ResidencyJson(const ResidencyModel& m);

// The model as the table `tandem residency` prints.
std::string ResidencyText(const ResidencyModel& m);

}  // namespace tandem::report
