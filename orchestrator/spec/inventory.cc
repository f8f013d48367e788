// Checking a job's logical devices against a daemon's inventory of physical
// GPUs (job_spec.h, CheckFitsInventory): logical id i maps to inv.gpus[i].
// Separate from parsing because `tandem validate` runs without a daemon.
#include <algorithm>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "orchestrator/spec/job_spec.h"

namespace tandem::spec {

Status CheckFitsInventory(const JobSpec& spec, const Inventory& inv) {
  if (spec.devices.empty()) return Status::Ok();
  const int have = static_cast<int>(inv.gpus.size());
  std::string inventory =
      have == 0 ? std::string("no GPUs (declare some with tandemd --gpus)")
                : fmt::format("{} GPU{} (physical ids {})", have, have == 1 ? "" : "s",
                              fmt::join(inv.gpus, ","));
  bool contiguous = true;
  for (size_t i = 0; i < spec.devices.size(); ++i) contiguous = contiguous && spec.devices[i] == static_cast<int>(i);
  if (contiguous) {
    if (static_cast<int>(spec.devices.size()) <= have) return Status::Ok();
    return ResourceExhausted(fmt::format("job \"{}\" needs {} devices, the inventory has {}",
                                         spec.name, spec.devices.size(), inventory));
  }
  std::vector<int> outside;
  for (int id : spec.devices) {
    if (id < 0 || id >= have) outside.push_back(id);
  }
  if (outside.empty()) return Status::Ok();
  std::sort(outside.begin(), outside.end());
  return InvalidArgument(fmt::format(
      "job \"{}\" asks for logical device{} {}, outside the inventory's logical ids 0..{} ({})",
      spec.name, outside.size() == 1 ? "" : "s", fmt::join(outside, ","), have - 1, inventory));
}

}  // namespace tandem::spec
