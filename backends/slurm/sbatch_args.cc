// Scheduling options to sbatch arguments: see sbatch_args.h.
#include "backends/slurm/sbatch_args.h"

namespace tandem::backends::slurm {
namespace {

std::vector<std::string> Strings(const nlohmann::json& options, const char* key) {
  std::vector<std::string> out;
  if (options.is_object() && options.contains(key) && options[key].is_array())
    for (const auto& s : options[key])
      if (s.is_string()) out.push_back(s.get<std::string>());
  return out;
}

}  // namespace

StatusOr<std::vector<std::string>> SbatchArgs(const nlohmann::json& options, const BatchShape& shape) {
  if (!options.is_object()) return InvalidArgument("slurm options: expected an object");
  std::vector<std::string> a = {"--parsable", "--job-name=" + shape.name,
                                "--output=" + (shape.output.empty() ? std::string("/dev/null") : shape.output),
                                "--ntasks=" + std::to_string(std::max(1, shape.tasks))};
  for (const char* key : {"partition", "account", "qos", "time", "constraint", "reservation", "nodelist",
                          "exclude"}) {
    if (!options.contains(key)) continue;
    if (!options[key].is_string()) return InvalidArgument(std::string("slurm options: ") + key + ": expected a string");
    a.push_back(std::string("--") + key + "=" + options[key].get<std::string>());
  }
  if (options.contains("nodes")) {
    if (!options["nodes"].is_number_integer()) return InvalidArgument("slurm options: nodes: expected an integer");
    a.push_back("--nodes=" + std::to_string(options["nodes"].get<int>()));
  }
  if (options.contains("gres")) {
    if (!options["gres"].is_string()) return InvalidArgument("slurm options: gres: expected a string");
    a.push_back("--gres=" + options["gres"].get<std::string>());
  } else if (options.contains("gpus_per_node")) {
    if (!options["gpus_per_node"].is_number_integer())
      return InvalidArgument("slurm options: gpus_per_node: expected an integer");
    const int n = options["gpus_per_node"].get<int>();
    if (n > 0) a.push_back("--gres=gpu:" + std::to_string(n));
  } else if (shape.devices > 0) {
    a.push_back("--gres=gpu:" + std::to_string(shape.devices));
  }
  if (options.contains("exclusive")) {
    if (!options["exclusive"].is_boolean()) return InvalidArgument("slurm options: exclusive: expected a boolean");
    if (options["exclusive"].get<bool>()) a.push_back("--exclusive");
  }
  for (auto& s : Strings(options, "sbatch_args")) a.push_back(std::move(s));
  return a;
}

std::string StepGres(const nlohmann::json& options) {
  if (!options.is_object() || !options.contains("gres") || !options["gres"].is_string()) return "gpu";
  const std::string g = options["gres"].get<std::string>();  // name[:type][:count]
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t colon = g.find(':', start);
    parts.push_back(g.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts.size() >= 2 && !parts[1].empty() && !std::isdigit(static_cast<unsigned char>(parts[1][0])))
    return parts[0] + ":" + parts[1];
  return parts[0];
}

std::vector<std::string> SrunArgs(const nlohmann::json& options) { return Strings(options, "srun_args"); }

}  // namespace tandem::backends::slurm
