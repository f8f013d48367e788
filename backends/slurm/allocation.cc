// Allocation discovery: see allocation.h.
#include "backends/slurm/allocation.h"


#include "backends/slurm/hostlist.h"
#include "backends/slurm/slurm_cli.h"

namespace tandem::backends::slurm {
namespace {

std::string Get(const std::map<std::string, std::string>& env, const std::string& k) {
  auto it = env.find(k);
  return it == env.end() ? std::string() : it->second;
}

}  // namespace

std::string ScontrolField(const std::string& text, const std::string& key) {
  // Keys are preceded by whitespace or start the text; values end at whitespace.
  size_t pos = 0;
  const std::string needle = key + "=";
  while ((pos = text.find(needle, pos)) != std::string::npos) {
    if (pos == 0 || std::isspace(static_cast<unsigned char>(text[pos - 1]))) {
      size_t start = pos + needle.size();
      size_t end = text.find_first_of(" \t\n", start);
      return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    }
    pos += needle.size();
  }
  return "";
}

StatusOr<Allocation> AllocationFromEnvironment(const std::map<std::string, std::string>& env) {
  Allocation a;
  a.job_id = Get(env, "SLURM_JOB_ID");
  if (a.job_id.empty()) return NotFound("not inside a Slurm allocation (SLURM_JOB_ID is unset)");
  TANDEM_ASSIGN_OR_RETURN(a.nodes, ExpandHostlist(Get(env, "SLURM_JOB_NODELIST")),
                          "SLURM_JOB_NODELIST");
  for (const char* key : {"CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS"}) {
    std::string v = Get(env, key);
    if (v.empty()) continue;
    TANDEM_ASSIGN_OR_RETURN(a.gpus, ParseIndexList(v), key);
    return a;
  }
  // Nothing in the environment: ask the controller.
  auto q = QueryAllocation(a.job_id);
  if (q.ok()) a.gpus = q->gpus;
  return a;
}

StatusOr<Allocation> ParseScontrolJob(const std::string& text) {
  Allocation a;
  a.job_id = ScontrolField(text, "JobId");
  if (a.job_id.empty()) return InvalidArgument("scontrol show job: no JobId in output");
  std::string nodes = ScontrolField(text, "NodeList");
  if (!nodes.empty() && nodes != "(null)") {
    TANDEM_ASSIGN_OR_RETURN(a.nodes, ExpandHostlist(nodes), "NodeList");
  }
  // Detail lines: "  Nodes=vm CPU_IDs=0-3 Mem=0 GRES=gpu:tgpu:4(IDX:0-3)",
  // one per group of nodes with the same layout. `gpus` is the first's.
  size_t line_start = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    const std::string line = text.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    size_t idx = line.find("(IDX:");
    if (idx == std::string::npos) continue;
    size_t start = idx + 5, end = line.find(')', start);
    if (end == std::string::npos) return InvalidArgument("scontrol show job: unclosed (IDX:");
    TANDEM_ASSIGN_OR_RETURN(auto ids, ParseIndexList(line.substr(start, end - start)), "GRES IDX");
    if (a.gpus.empty()) a.gpus = ids;
    const std::string nodes_field = ScontrolField(line, "Nodes");
    if (nodes_field.empty()) continue;
    TANDEM_ASSIGN_OR_RETURN(auto hosts, ExpandHostlist(nodes_field), "GRES Nodes");
    for (const auto& h : hosts) a.node_gpus[h] = ids;
  }
  return a;
}

StatusOr<Allocation> QueryAllocation(const std::string& job_id) {
  TANDEM_ASSIGN_OR_RETURN(auto r, RunCommand({"scontrol", "show", "job", "-d", job_id}),
                          "query allocation " + job_id);
  if (!r.ok()) return NotFound("scontrol show job " + job_id + ": " + r.err);
  return ParseScontrolJob(r.out);
}

}  // namespace tandem::backends::slurm
