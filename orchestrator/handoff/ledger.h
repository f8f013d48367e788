// The residency ledger (docs/handoff.md "In the daemon"): for every
// GPU of a colocation group its capacity, the bytes resident per (worker,
// tag) as the workers report them, and the device's own used/total reading.
//
// A value type: the handoff engine keeps one inside GroupState and copies it
// with the state. Bytes of a tag are per GPU of the worker (a worker on two
// GPUs holding 1 GiB of weights holds 1 GiB on each).
//
// - CheckFits: before a resume, refuses (kResourceExhausted) with a message
//   naming the GPU, the roles and the bytes when what is resident plus what
//   would come back exceeds a GPU's capacity.
// - Report: applies a worker's answer; returns one ResidencyRecord per tag
//   whose bytes changed. A release after which the device's used memory did
//   not fall by what the worker claims (within 1/8 of the claim) is flagged
//   as a leak on the released tags' records. A device-wide reading is
//   compared with the GPU's previous reading (from any worker); a worker's
//   own accounting with that worker's previous reading. A reading of a
//   worker's own accounting with total 0 (no capacity of its own: the
//   actor's optimizer) does not become the GPU's reading.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "orchestrator/handoff/types.h"

namespace tandem::handoff {

class Ledger {
 public:
  struct Gpu {
    uint64_t capacity = 0;                   // 0: the latest reading's total bounds it (none: not checked)
    std::optional<DeviceMemory> reading;     // the latest reading of this GPU, from any worker
  };
  struct Planned {
    WorkerId worker;
    Tag tag = Tag::kWeights;
    uint64_t bytes = 0;  // per GPU of the worker
  };

  void SetCapacity(int gpu, uint64_t bytes);
  void SetWorkerGpus(const WorkerId& w, std::vector<int> gpus);

  uint64_t Bytes(const WorkerId& w, Tag t) const;
  TagSet ResidentTags(const WorkerId& w) const;  // tags with bytes > 0
  // Bytes resident on `gpu` by the ledger (sum over workers placed on it).
  uint64_t Resident(int gpu) const;
  const std::map<int, Gpu>& gpus() const { return gpus_; }
  const std::vector<int>& WorkerGpus(const WorkerId& w) const;

  // ok, or kResourceExhausted in human units (orchestrator/report/human_units.h):
  // "gpu 0: 70 B resident + 40 B resuming > capacity 100 B (resident:
  // actor/0 params=70 B; resuming: rollout/0 weights=40 B)".
  Status CheckFits(const std::vector<Planned>& planned) const;

  // Applies a report: `resident` is the worker's whole residency (a tag
  // absent is 0 bytes); `released` the tags the acknowledged command released
  // (empty for other commands), for the leak check.
  std::vector<ResidencyRecord> Report(const WorkerId& w, const std::map<Tag, uint64_t>& resident,
                                      const std::vector<DeviceMemory>& devices, const TagSet& released,
                                      double at);
  // The worker died: its memory is gone. Returns the records setting its tags to 0.
  std::vector<ResidencyRecord> Forget(const WorkerId& w, double at);

  // Everything above as JSON and back, for the handoff journal's snapshot
  // (state_codec.h): FromJson(ToJson()) behaves exactly as the original.
  // FromJson fails (kDataLoss) on a value ToJson cannot have written.
  nlohmann::json ToJson() const;
  static StatusOr<Ledger> FromJson(const nlohmann::json& j);

 private:
  std::map<int, Gpu> gpus_;
  std::map<WorkerId, std::vector<int>> placement_;
  std::map<WorkerId, std::map<Tag, uint64_t>> bytes_;
  std::map<std::pair<WorkerId, int>, DeviceMemory> own_reading_;  // per worker and GPU, for !device_wide
};

}  // namespace tandem::handoff
