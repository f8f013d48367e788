// tandem-worker: the native worker binary (docs/architecture.md "Native
// workers"). Its subcommands are the rows of common/native_workers.h, the
// table the spec parser checks a role's "worker" against: `probe`
// (probe_worker.h); `sft` (workers/roles/sft_command.h) trains small models;
// `rollout` (workers/roles/rollout_command.h) serves generation and
// `teacher` (workers/roles/teacher_command.h) scores sequences over HTTP;
// `actor` (workers/roles/actor_command.h) trains with RL as the job's
// controller; `proxy` (workers/roles/proxy_command.h) serves the OpenAI API
// in front of the rollouts. `--list-workers` prints the subcommands this binary registered, one a
// line (tests/cli/binaries_test.cc compares them with the table);
// `--version` prints the project's version. `--tree-attention`,
// `--moe-experts`, `--decode-gemv`, `--paged-attention` and
// `--paged-splits` (given before or after the subcommand) pick the CUDA
// implementations of the glue ops for the process, through the variables
// workers/ops/kernel_choices.h names. Exceptions stop at this edge and
// become exit status 1 with a log line; bad flags exit 2 with CLI11's
// message.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/native_workers.h"
#include "common/version.h"
#include "workers/ops/kernel_choices.h"
#include "workers/probe_worker.h"
#include "workers/roles/actor_command.h"
#include "workers/roles/proxy_command.h"
#include "workers/roles/rollout_command.h"
#include "workers/roles/sft_command.h"
#include "workers/roles/teacher_command.h"

namespace {

// The table's row for `name`: a subcommand registered here must have one.
std::string Summary(std::string_view name) {
  for (const tandem::NativeWorker& w : tandem::NativeWorkers()) {
    if (w.name == name) return std::string(w.summary);
  }
  return "(missing from common/native_workers.h)";
}

// `--NAME` picks one of `choices` for the process by setting `var`, which
// the op reads once, at its first call (after the flags are parsed).
void AddKernelChoice(CLI::App& app, const std::string& name, const char* var, std::span<const std::string_view> choices,
                     std::string& value) {
  std::vector<std::string> names(choices.begin(), choices.end());
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  app.add_option(name, value,
                 "CUDA implementation: " + list + " (default: $" + var + ", else " + names.front() + ")")
      ->check(CLI::IsMember(names));
}

}  // namespace

int main(int argc, char** argv) {
  tandem::log::Init();
  std::string names;
  for (const std::string& n : tandem::NativeWorkerNames()) names += (names.empty() ? "" : ", ") + n;
  CLI::App app{"tandem-worker: native workers for tandem (" + names + ")"};
  app.set_version_flag("--version", tandem::VersionLine("tandem-worker"));
  bool list_workers = false;
  app.add_flag("--list-workers", list_workers, "Print this binary's workers, one a line, and exit");
  app.require_subcommand(0, 1);
  app.fallthrough();  // the options above are taken after a subcommand too
  std::string tree_attention, moe_experts, decode_gemv, paged_attention, paged_splits;
  AddKernelChoice(app, "--tree-attention", tandem::ops::kTreeAttentionVar, tandem::ops::kTreeAttentionChoices,
                  tree_attention);
  AddKernelChoice(app, "--moe-experts", tandem::ops::kMoeExpertsVar, tandem::ops::kMoeExpertsChoices, moe_experts);
  AddKernelChoice(app, "--decode-gemv", tandem::ops::kDecodeGemvVar, tandem::ops::kDecodeGemvChoices, decode_gemv);
  AddKernelChoice(app, "--paged-attention", tandem::ops::kPagedAttentionVar, tandem::ops::kPagedAttentionChoices,
                  paged_attention);
  AddKernelChoice(app, "--paged-splits", tandem::ops::kPagedSplitsVar, tandem::ops::kPagedSplitsChoices,
                  paged_splits);

  tandem::worker::ProbeOptions o;
  std::vector<std::string> tags;
  std::string control;
  std::string phases;
  std::string capacity;
  int phase_timeout_ms = 60'000, connect_timeout_ms = 10'000, reconnect_ms = 60'000;
  auto* probe = app.add_subcommand("probe", Summary("probe"));
  probe->add_option("--tag", tags, "NAME=SIZE[:backup|:discard], e.g. weights=64MiB:backup (repeatable)")->required();
  probe->add_option("--control", control, "unix:PATH or tcp:HOST:PORT (default: $TANDEM_CONTROL; none: run cycles locally)");
  probe->add_option("--backend", o.backend, "cpu, cuda or auto")->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  probe->add_option("--device", o.device, "CUDA device ordinal (worker namespace)");
  probe->add_option("--cpu-capacity", capacity, "total reported by the CPU backend (default MemTotal), e.g. 8GiB");
  probe->add_flag("--controller", o.controller, "drive --cycles cycles by sending request_phase");
  probe->add_option("--cycles", o.cycles, "cycles to run (controller or local)")->check(CLI::NonNegativeNumber);
  probe->add_option("--phases", phases, "comma-separated phases per cycle (default rollout,train,sync)");
  probe->add_option("--phase-timeout-ms", phase_timeout_ms, "wait for phase_done");
  probe->add_option("--connect-timeout-ms", connect_timeout_ms, "wait for the daemon to listen");
  probe->add_option("--reconnect-ms", reconnect_ms, "after a lost connection (a daemon restart), reconnect within this window (default 60000; 0: exit 1)");
  probe->add_flag("--start-released", o.start_released, "release every tag after filling it, before connecting (a colocated group starts empty)");
  probe->add_option("--corrupt-tag", o.corrupt_tag, "test hook: flip a byte of this tag before each release");
  probe->add_option("--role", o.hello.role, "role in hello (default $TANDEM_ROLE or 'probe')");

  tandem::roles::SftCommand sft;
  tandem::roles::RolloutCommand rollout;
  tandem::roles::TeacherCommand teacher;
  tandem::roles::ActorCommand actor;
  tandem::roles::ProxyCommand proxy;
  const std::vector<std::pair<const char*, tandem::roles::WorkerCommand*>> commands = {
      {"sft", &sft}, {"rollout", &rollout}, {"teacher", &teacher}, {"actor", &actor}, {"proxy", &proxy}};
  for (const auto& [name, command] : commands) command->Register(app, Summary(name));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (const auto& [var, value] : {std::pair{tandem::ops::kTreeAttentionVar, &tree_attention},
                                    std::pair{tandem::ops::kMoeExpertsVar, &moe_experts},
                                    std::pair{tandem::ops::kDecodeGemvVar, &decode_gemv},
                                    std::pair{tandem::ops::kPagedAttentionVar, &paged_attention},
                                    std::pair{tandem::ops::kPagedSplitsVar, &paged_splits}}) {
    if (value->empty()) continue;
    ::setenv(var, value->c_str(), 1);
    tandem::log::Info("worker", "CUDA kernels: {}={}", var, *value);
  }
  if (list_workers) {
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      std::cout << sub->get_name() << "\n";
    }
    return 0;
  }
  if (app.get_subcommands().empty()) {
    std::cerr << "tandem-worker: name a worker: " << names << " (tandem-worker --help)\n";
    return 2;
  }
  for (const auto& [name, command] : commands) {
    if (!command->selected()) continue;
    try {
      return command->Run();
    } catch (const std::exception& e) {
      tandem::log::Error("worker", "unexpected exception: {}", e.what());
      return 1;
    }
  }
  try {
    tandem::control::Hello env = tandem::control::HelloFromEnvironment();
    std::string role = o.hello.role;
    o.hello = env;
    if (!role.empty()) o.hello.role = role;
    if (o.hello.role.empty()) o.hello.role = "probe";
    for (const auto& t : tags) {
      auto spec = tandem::memory::ParseTagSpec(t);
      if (!spec.ok()) {
        std::cerr << "tandem-worker probe: " << spec.status().message() << "\n";
        return 2;
      }
      o.tags.push_back(*spec);
    }
    if (!capacity.empty()) {
      auto c = tandem::memory::ParseBytes(capacity);
      if (!c.ok()) {
        std::cerr << "tandem-worker probe: --cpu-capacity: " << c.status().message() << "\n";
        return 2;
      }
      o.cpu_capacity = *c;
    }
    if (control.empty())
      if (const char* env_control = std::getenv("TANDEM_CONTROL")) control = env_control;
    if (!control.empty()) {
      auto ep = tandem::control::ParseEndpoint(control);
      if (!ep.ok()) {
        std::cerr << "tandem-worker probe: " << ep.status().message() << "\n";
        return 2;
      }
      o.endpoint = *ep;
    }
    if (!phases.empty()) {
      o.phases.clear();
      for (size_t start = 0; start <= phases.size();) {
        size_t comma = phases.find(',', start);
        if (comma == std::string::npos) comma = phases.size();
        if (comma > start) o.phases.push_back(phases.substr(start, comma - start));
        start = comma + 1;
      }
    }
    o.phase_timeout = std::chrono::milliseconds(phase_timeout_ms);
    o.connect_timeout = std::chrono::milliseconds(connect_timeout_ms);
    o.reconnect_window = std::chrono::milliseconds(reconnect_ms);
    return tandem::worker::RunProbe(o);
  } catch (const std::exception& e) {
    tandem::log::Error("worker", "unexpected exception: {}", e.what());
    return 1;
  }
}
