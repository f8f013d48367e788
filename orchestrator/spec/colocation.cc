// Colocation groups: resolving colocate_with chains to their owners and
// checking that each group's roles fit (see colocation.h).
#include "orchestrator/spec/colocation.h"

#include <algorithm>
#include <map>
#include <string>

#include <fmt/format.h>

#include "orchestrator/spec/spec_reader.h"

namespace tandem::spec {
namespace {

using internal::JoinKey;

std::string RolePath(const RoleSpec& r) { return JoinKey("roles", r.name); }

int64_t Size(const RoleSpec& r) {
  return static_cast<int64_t>(r.replicas) * static_cast<int64_t>(r.gpus_per_replica);
}

}  // namespace

Colocation ResolveColocation(const std::vector<RoleSpec>& roles, std::vector<SpecError>* errors) {
  const int n = static_cast<int>(roles.size());
  Colocation out;
  out.group_of.assign(n, -1);

  std::map<std::string, int, std::less<>> by_name;
  std::vector<bool> bad(n, false);
  for (int i = 0; i < n; ++i) {
    if (!by_name.emplace(roles[i].name, i).second) {
      errors->push_back({RolePath(roles[i]), "duplicate role name"});
      bad[i] = true;
    }
  }

  // parent[i]: the role i colocates with, -1 for an owner.
  std::vector<int> parent(n, -1);
  for (int i = 0; i < n; ++i) {
    const std::string& target = roles[i].colocate_with;
    if (target.empty()) continue;
    std::string path = JoinKey(RolePath(roles[i]), "colocate_with");
    if (target == roles[i].name) {
      errors->push_back({path, "a role cannot colocate with itself"});
      bad[i] = true;
      continue;
    }
    auto it = by_name.find(target);
    if (it == by_name.end()) {
      std::string names;
      for (const RoleSpec& r : roles) names += (names.empty() ? "" : ", ") + r.name;
      errors->push_back({path, fmt::format("expected the name of another role ({}), got \"{}\"",
                                           names, target)});
      bad[i] = true;
      continue;
    }
    parent[i] = it->second;
  }

  // owner[i]: the chain's owner; -1 while unknown, -2 when unresolvable.
  std::vector<int> owner(n, -1);
  std::vector<int> pos(n, -1);  // position in the chain being walked, -1 if not on it
  for (int i = 0; i < n; ++i) {
    if (owner[i] != -1) continue;
    std::vector<int> chain;
    int cur = i, result = -2;
    while (true) {
      if (owner[cur] != -1) { result = owner[cur]; break; }
      if (bad[cur]) { result = -2; break; }
      if (pos[cur] != -1) {  // a cycle: chain[pos[cur]..] loops back to cur
        std::vector<int> cycle(chain.begin() + pos[cur], chain.end());
        int first = *std::min_element(cycle.begin(), cycle.end());
        auto start = std::find(cycle.begin(), cycle.end(), first);
        std::rotate(cycle.begin(), start, cycle.end());
        std::string text;
        for (int c : cycle) text += roles[c].name + " -> ";
        text += roles[first].name;
        errors->push_back({JoinKey(RolePath(roles[first]), "colocate_with"),
                           "colocation cycle " + text});
        result = -2;
        break;
      }
      pos[cur] = static_cast<int>(chain.size());
      chain.push_back(cur);
      if (parent[cur] == -1) { result = cur; break; }
      cur = parent[cur];
    }
    for (int c : chain) owner[c] = result, pos[c] = -1;
  }

  std::vector<int> group_of_owner(n, -1);
  for (int i = 0; i < n; ++i) {
    if (owner[i] != i) continue;
    group_of_owner[i] = static_cast<int>(out.groups.size());
    out.groups.push_back(ColocationGroup{i, {i}, Size(roles[i])});
    out.devices_needed += Size(roles[i]);
  }
  for (int i = 0; i < n; ++i) {
    if (owner[i] < 0) continue;
    int g = group_of_owner[owner[i]];
    out.group_of[i] = g;
    if (owner[i] == i) continue;
    ColocationGroup& group = out.groups[g];
    group.members.push_back(i);
    const RoleSpec& role = roles[i];
    const RoleSpec& own = roles[owner[i]];
    if (role.gpus_per_replica > 0 && group.devices == 0) {
      errors->push_back({JoinKey(RolePath(role), "colocate_with"),
                         fmt::format("a role with GPUs (gpus_per_replica {}) cannot colocate with "
                                     "CPU-only role \"{}\" (its colocation group has no devices)",
                                     role.gpus_per_replica, own.name)});
    } else if (Size(role) > group.devices) {
      errors->push_back({RolePath(role),
                         fmt::format("needs {} devices ({} replicas x {} gpus_per_replica), more "
                                     "than the {} of its colocation group (owner \"{}\": {} "
                                     "replicas x {} gpus_per_replica)",
                                     Size(role), role.replicas, role.gpus_per_replica,
                                     group.devices, own.name, own.replicas, own.gpus_per_replica)});
    }
  }
  return out;
}

}  // namespace tandem::spec
