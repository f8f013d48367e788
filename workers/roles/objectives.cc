// The actor's objectives (objectives.h).
#include "workers/roles/objectives.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace tandem::roles {
namespace {

using nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

bool PositiveNumber(const json& v) { return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0; }

StatusOr<Objective> ParseOne(const std::string& name, const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Dump(j));
  static const std::set<std::string> kKeys = {"kind",    "teacher",         "teacher_port_file", "dataset",
                                              "weight",  "dataset_options", "eval_options",      "route"};
  for (const auto& item : j.items())
    if (!kKeys.count(item.key()))
      return InvalidArgument(where + ": unknown key \"" + item.key() +
                             "\" (known: kind, teacher, teacher_port_file, dataset, dataset_options, eval_options, "
                             "weight, route)");
  Objective o;
  o.name = name;
  const auto kind = j.find("kind");
  if (kind == j.end()) return InvalidArgument(where + ".kind: required (\"rl\" or \"distill\")");
  if (*kind == "distill") {
    o.distill = true;
  } else if (*kind != "rl") {
    return InvalidArgument(where + ".kind: expected \"rl\" or \"distill\", got " + Dump(*kind));
  }
  const auto teacher = j.find("teacher");
  if (o.distill) {
    if (teacher == j.end()) return InvalidArgument(where + ".teacher: required for a distill objective (a teacher role)");
    if (!teacher->is_string() || !ValidName(teacher->get<std::string>()))
      return InvalidArgument(where + ".teacher: expected a role name ([a-z0-9_-]+), got " + Dump(*teacher));
    o.teacher = teacher->get<std::string>();
    o.teacher_port_file = o.teacher + ".port";
  } else if (teacher != j.end() || j.contains("teacher_port_file")) {
    return InvalidArgument(where + ": an rl objective has no teacher (kind \"distill\" has)");
  }
  if (const auto pf = j.find("teacher_port_file"); pf != j.end()) {
    if (!pf->is_string() || pf->get<std::string>().empty())
      return InvalidArgument(where + ".teacher_port_file: expected a path, got " + Dump(*pf));
    o.teacher_port_file = pf->get<std::string>();
  }
  if (const auto d = j.find("dataset"); d != j.end()) {
    if (!d->is_string() || d->get<std::string>().empty())
      return InvalidArgument(where + ".dataset: expected a data set name, got " + Dump(*d));
    o.dataset = d->get<std::string>();
  }
  for (const auto& [key, out] : {std::pair{"dataset_options", &o.dataset_options}, {"eval_options", &o.eval_options}}) {
    if (const auto v = j.find(key); v != j.end()) {
      if (!v->is_object() && !v->is_null()) return InvalidArgument(where + "." + key + ": expected an object, got " + Dump(*v));
      *out = *v;
    }
  }
  if (const auto w = j.find("weight"); w != j.end()) {
    if (!PositiveNumber(*w)) return InvalidArgument(where + ".weight: expected a number > 0, got " + Dump(*w));
    o.weight = w->get<double>();
  }
  if (const auto r = j.find("route"); r != j.end()) {
    if (!r->is_object() || r->empty())
      return InvalidArgument(where + ".route: expected an object {objective: weight}, got " + Dump(*r));
    for (const auto& item : r->items()) {
      const json& v = item.value();
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
        return InvalidArgument(where + ".route." + item.key() + ": expected a weight >= 0, got " + Dump(v));
      o.route[item.key()] = v.get<double>();
    }
  } else {
    o.route[name] = 1.0;
  }
  return o;
}

}  // namespace

StatusOr<Objectives> ParseObjectives(const json& spec, const std::string& where) {
  if (!spec.is_object() || spec.empty())
    return InvalidArgument(where + ": expected an object with at least one objective, got " + Dump(spec));
  Objectives out;
  for (const auto& item : spec.items()) {
    if (!ValidName(item.key()))
      return InvalidArgument(where + ": objective name \"" + item.key() + "\": expected [a-z0-9_-]+ (at most 64)");
    TANDEM_ASSIGN_OR_RETURN(Objective o, ParseOne(item.key(), item.value(), where + "." + item.key()));
    out.list.push_back(std::move(o));
  }
  // Teachers, and a port file per teacher.
  std::map<std::string, std::string> port_of;
  for (const Objective& o : out.list) {
    if (!o.distill) continue;
    const auto [it, fresh] = port_of.emplace(o.teacher, o.teacher_port_file);
    if (!fresh && it->second != o.teacher_port_file)
      return InvalidArgument(where + "." + o.name + ".teacher_port_file: teacher " + o.teacher + " is read from " +
                             it->second + " by another objective");
  }
  for (const auto& [teacher, port_file] : port_of) {
    out.teachers.push_back(teacher);
    out.port_files.push_back(port_file);
  }
  // Routes over the teachers.
  for (const Objective& o : out.list) {
    std::vector<float> weights(out.teachers.size(), 0.0f);
    double total = 0;
    for (const auto& [target_name, w] : o.route) {
      const std::string& target = target_name;
      const auto t = std::find_if(out.list.begin(), out.list.end(), [&](const Objective& x) { return x.name == target; });
      if (t == out.list.end()) return InvalidArgument(where + "." + o.name + ".route." + target + ": no such objective");
      total += w;
      if (!t->distill) continue;
      const auto k = std::find(out.teachers.begin(), out.teachers.end(), t->teacher) - out.teachers.begin();
      weights[static_cast<size_t>(k)] += static_cast<float>(w);
    }
    if (!(total > 0)) return InvalidArgument(where + "." + o.name + ".route: every weight is 0");
    out.routes.push_back(std::move(weights));
  }
  return out;
}

Objectives SingleObjective(const std::string& dataset, const json& dataset_options, const json& eval_options) {
  Objectives out;
  Objective o;
  o.name = "task";
  o.dataset = dataset;
  o.dataset_options = dataset_options;
  o.eval_options = eval_options;
  o.route["task"] = 1.0;
  out.list.push_back(std::move(o));
  out.routes.emplace_back();
  return out;
}

std::vector<int64_t> SplitPrompts(const Objectives& objectives, int64_t prompts) {
  const size_t n = objectives.list.size();
  double total = 0;
  for (const Objective& o : objectives.list) total += o.weight;
  std::vector<int64_t> out(n, 0);
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    const double exact = static_cast<double>(prompts) * objectives.list[i].weight / total;
    out[i] = static_cast<int64_t>(std::floor(exact));
    given += out[i];
    remainders.emplace_back(exact - static_cast<double>(out[i]), i);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t r = 0; given < prompts; ++r, ++given) ++out[remainders[r % n].second];
  return out;
}

}  // namespace tandem::roles
