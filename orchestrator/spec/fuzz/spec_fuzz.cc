// libFuzzer target for the job spec parser (job_spec.h) and placement
// (placement.h): arbitrary bytes must never crash, hang or leak, and every
// spec the parser accepts must round-trip and place consistently. Built with
// -DTANDEM_BUILD_FUZZ=ON under clang; run by scripts/fuzz.sh with the seed
// corpus tests/specs/ and examples/.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include "orchestrator/placement/placement.h"
#include "orchestrator/spec/job_spec.h"

namespace {

using tandem::spec::Inventory;
using tandem::spec::JobSpec;
using tandem::spec::ParseResult;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void CheckPlacement(const JobSpec& spec) {
  int64_t tasks = 0;
  for (const auto& role : spec.roles) tasks += role.replicas;
  if (tasks > 20000) return;  // keep each input fast

  int max_id = -1;
  for (int id : spec.devices) max_id = std::max(max_id, id);
  Inventory inv;
  for (int i = 0; i <= max_id; ++i) inv.gpus.push_back(1000 + i);
  auto placed = tandem::placement::PlaceJob(spec, inv);
  Check(placed.ok());  // a valid spec always fits an inventory as large as its devices
  const auto& p = *placed;
  Check(static_cast<int64_t>(p.tasks.size()) == tasks);

  // Groups take disjoint ranges of the job's devices.
  std::set<int> job_devices(spec.devices.begin(), spec.devices.end());
  std::set<int> used;
  size_t total = 0;
  for (const auto& g : p.group_devices) {
    total += g.size();
    for (int id : g) Check(job_devices.count(id) == 1), used.insert(id);
  }
  Check(used.size() == total);

  // Each task's devices lie in its group; replicas of a role do not overlap.
  size_t t = 0;
  for (const auto& role : spec.roles) {
    std::set<int> role_devices;
    for (int rank = 0; rank < role.replicas; ++rank, ++t) {
      const auto& task = p.tasks[t];
      Check(task.role == role.name && task.rank == rank && task.world_size == role.replicas);
      Check(static_cast<int>(task.logical.size()) == role.gpus_per_replica);
      Check(task.logical.size() == task.physical.size());
      const auto& group = p.group_devices.at(static_cast<size_t>(task.group));
      for (size_t k = 0; k < task.logical.size(); ++k) {
        int id = task.logical[k];
        Check(std::find(group.begin(), group.end(), id) != group.end());
        Check(role_devices.insert(id).second);
        Check(task.physical[k] == 1000 + id);
      }
    }
  }
}

// An accepted handoff section names only roles of the job, its controller
// takes part, and every role taking part has GPUs in its group.
void CheckHandoff(const JobSpec& spec) {
  const auto& h = spec.handoff;
  Check(h.timeout_s > 0 && h.timeout_s <= 86400);
  Check(h.on_fault.empty() || h.on_fault == "fail" || h.on_fault == "restart");
  for (const auto& [name, kind] : h.roles) {
    const auto* role = spec.FindRole(name);
    Check(role != nullptr && h.KindOf(*role) == kind);
  }
  if (!h.controller.empty()) {
    const auto* controller = spec.FindRole(h.controller);
    Check(controller != nullptr && !h.KindOf(*controller).empty());
  }
  for (const auto& [phase, plan] : h.phases) {
    Check(phase == "rollout" || phase == "teacher" || phase == "train" || phase == "sync");
    Check(plan.timeout_s >= 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ParseResult r = tandem::spec::ParseJobSpecText(text);
  Check(r.spec.has_value() == r.errors.empty());
  for (const auto& e : r.errors) Check(!e.message.empty() && !e.ToString().empty());
  Check(r.ToStatus().ok() == r.errors.empty());
  if (!r.spec) return 0;

  // What was accepted is accepted again, the same, from its own text.
  ParseResult again = tandem::spec::ParseJobSpecText(r.spec->raw.dump());
  Check(again.spec.has_value());
  Check(again.spec->roles.size() == r.spec->roles.size());
  for (size_t i = 0; i < r.spec->roles.size(); ++i) {
    Check(again.spec->roles[i].name == r.spec->roles[i].name);
  }
  Check(again.spec->devices == r.spec->devices);
  Check(again.spec->handoff.roles == r.spec->handoff.roles);
  Check(again.spec->handoff.gpu_memory == r.spec->handoff.gpu_memory);

  CheckHandoff(*r.spec);

  CheckPlacement(*r.spec);
  return 0;
}
