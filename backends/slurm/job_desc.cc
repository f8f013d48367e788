// Scheduling options to job_desc_msg_t fields: see job_desc.h.
#include "backends/slurm/job_desc.h"

#include <algorithm>

#ifdef TANDEM_HAVE_LIBSLURM
#include <slurm/slurm.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

extern char** environ;
// Exported by libslurm 22.05 (parse_time.c) without a public declaration.
extern "C" int slurm_time_str2mins(const char* string);
#endif

namespace tandem::backends::slurm {
namespace {

Status Str(const nlohmann::json& o, const char* key, std::string& out) {
  if (!o.contains(key)) return Status::Ok();
  if (!o[key].is_string()) return InvalidArgument(std::string("slurm options: ") + key + ": expected a string");
  out = o[key].get<std::string>();
  return Status::Ok();
}

}  // namespace

bool NeedsSbatch(const nlohmann::json& o) {
  return o.is_object() && o.contains("sbatch_args") && o["sbatch_args"].is_array() && !o["sbatch_args"].empty();
}

StatusOr<JobDesc> JobDescFor(const nlohmann::json& o, const BatchShape& shape) {
  if (!o.is_object()) return InvalidArgument("slurm options: expected an object");
  if (NeedsSbatch(o)) return FailedPrecondition("sbatch_args has no job_desc_msg_t field");
  JobDesc d;
  d.name = shape.name;
  d.num_tasks = std::max(1, shape.tasks);
  d.std_out = shape.output.empty() ? "/dev/null" : shape.output;
  d.script = "#!/bin/sh\n# tandem: holds the allocation; the tasks run as steps\nexec sleep 2147483647\n";
  TANDEM_RETURN_IF_ERROR(Str(o, "partition", d.partition));
  TANDEM_RETURN_IF_ERROR(Str(o, "account", d.account));
  TANDEM_RETURN_IF_ERROR(Str(o, "qos", d.qos));
  TANDEM_RETURN_IF_ERROR(Str(o, "time", d.time));
  TANDEM_RETURN_IF_ERROR(Str(o, "constraint", d.features));
  TANDEM_RETURN_IF_ERROR(Str(o, "reservation", d.reservation));
  TANDEM_RETURN_IF_ERROR(Str(o, "nodelist", d.req_nodes));
  TANDEM_RETURN_IF_ERROR(Str(o, "exclude", d.exc_nodes));
  if (o.contains("nodes")) {
    if (!o["nodes"].is_number_integer()) return InvalidArgument("slurm options: nodes: expected an integer");
    d.nodes = o["nodes"].get<int>();
  }
  if (o.contains("gres")) {
    if (!o["gres"].is_string()) return InvalidArgument("slurm options: gres: expected a string");
    d.tres_per_node = "gres:" + o["gres"].get<std::string>();
  } else if (o.contains("gpus_per_node")) {
    if (!o["gpus_per_node"].is_number_integer())
      return InvalidArgument("slurm options: gpus_per_node: expected an integer");
    if (int n = o["gpus_per_node"].get<int>(); n > 0) d.tres_per_node = "gres:gpu:" + std::to_string(n);
  } else if (shape.devices > 0) {
    d.tres_per_node = "gres:gpu:" + std::to_string(shape.devices);
  }
  if (o.contains("exclusive")) {
    if (!o["exclusive"].is_boolean()) return InvalidArgument("slurm options: exclusive: expected a boolean");
    d.exclusive = o["exclusive"].get<bool>();
  }
  return d;
}

#ifdef TANDEM_HAVE_LIBSLURM
namespace {
char* C(const std::string& s) { return s.empty() ? nullptr : const_cast<char*>(s.c_str()); }
}  // namespace

Status FillJobDescMsg(const JobDesc& d, job_descriptor* msg) {
  msg->name = C(d.name);
  msg->partition = C(d.partition);
  msg->account = C(d.account);
  msg->qos = C(d.qos);
  msg->reservation = C(d.reservation);
  msg->features = C(d.features);
  msg->req_nodes = C(d.req_nodes);
  msg->exc_nodes = C(d.exc_nodes);
  msg->tres_per_node = C(d.tres_per_node);
  msg->std_out = C(d.std_out);
  msg->script = C(d.script);
  if (!d.time.empty()) {
    const int mins = slurm_time_str2mins(d.time.c_str());
    if (mins < 0 && mins != static_cast<int>(INFINITE))
      return InvalidArgument("slurm options: time \"" + d.time + "\": not a Slurm time");
    msg->time_limit = static_cast<uint32_t>(mins);
  }
  if (d.nodes > 0) msg->min_nodes = msg->max_nodes = static_cast<uint32_t>(d.nodes);
  msg->num_tasks = static_cast<uint32_t>(d.num_tasks);
  msg->min_cpus = static_cast<uint32_t>(d.num_tasks);
  if (d.exclusive) msg->shared = JOB_SHARED_NONE;
  uint32_t n = 0;
  while (environ && environ[n]) ++n;
  msg->environment = environ;
  msg->env_size = n;
  msg->user_id = ::getuid();
  msg->group_id = ::getgid();
  static thread_local char cwd[PATH_MAX];
  msg->work_dir = ::getcwd(cwd, sizeof cwd) ? cwd : const_cast<char*>("/");
  return Status::Ok();
}
#endif

}  // namespace tandem::backends::slurm
