// Placement: which logical and physical devices each task gets (docs/
// jobspec.md "Colocation and placement"; the rules are in placement.h and
// docs/jobspec.md "Colocation and placement"). Ports are leased by the
// backends, not here.
#include "orchestrator/placement/placement.h"

#include <string>

#include <fmt/format.h>

#include "orchestrator/spec/colocation.h"

namespace tandem::placement {

StatusOr<JobPlacement> PlaceJob(const spec::JobSpec& spec, const spec::Inventory& inv) {
  // A spec from ParseJobSpec always passes these; one built by hand may not.
  for (const spec::RoleSpec& role : spec.roles) {
    if (role.replicas < 1 || role.gpus_per_replica < 0) {
      return InvalidArgument(fmt::format(
          "place job \"{}\": role \"{}\" has {} replicas x {} gpus_per_replica (expected >= 1 x >= 0)",
          spec.name, role.name, role.replicas, role.gpus_per_replica));
    }
  }
  std::vector<spec::SpecError> errors;
  spec::Colocation col = spec::ResolveColocation(spec.roles, &errors);
  if (!errors.empty()) {
    std::string text;
    for (const spec::SpecError& e : errors) text += (text.empty() ? "" : "; ") + e.ToString();
    return InvalidArgument(fmt::format("place job \"{}\": {}", spec.name, text));
  }
  if (col.devices_needed > static_cast<int64_t>(spec.devices.size())) {
    return ResourceExhausted(fmt::format("place job \"{}\": the roles need {} devices, the job has {}",
                                         spec.name, col.devices_needed, spec.devices.size()));
  }
  TANDEM_RETURN_IF_ERROR(spec::CheckFitsInventory(spec, inv), "place job \"" + spec.name + "\"");

  JobPlacement out;
  size_t offset = 0;
  for (const spec::ColocationGroup& g : col.groups) {
    std::vector<std::string> names;
    for (int m : g.members) names.push_back(spec.roles[m].name);
    out.groups.push_back(std::move(names));
    out.group_devices.emplace_back(spec.devices.begin() + static_cast<std::ptrdiff_t>(offset),
                                   spec.devices.begin() + static_cast<std::ptrdiff_t>(offset + g.devices));
    offset += static_cast<size_t>(g.devices);
  }
  for (size_t i = 0; i < spec.roles.size(); ++i) {
    const spec::RoleSpec& role = spec.roles[i];
    const int group = col.group_of[i];
    const std::vector<int>& devices = out.group_devices[group];
    for (int rank = 0; rank < role.replicas; ++rank) {
      TaskPlacement t;
      t.role = role.name;
      t.rank = rank;
      t.world_size = role.replicas;
      t.group = group;
      const size_t first = static_cast<size_t>(rank) * static_cast<size_t>(role.gpus_per_replica);
      for (int k = 0; k < role.gpus_per_replica; ++k) {
        const int logical = devices[first + static_cast<size_t>(k)];
        t.logical.push_back(logical);
        t.physical.push_back(inv.gpus[static_cast<size_t>(logical)]);
      }
      out.tasks.push_back(std::move(t));
    }
  }
  return out;
}

}  // namespace tandem::placement
