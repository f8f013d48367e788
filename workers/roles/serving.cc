// What the serving roles share (serving.h).
#include "workers/roles/serving.h"

#include <ATen/Parallel.h>
#include <c10/core/Device.h>

#include <cstdlib>

#include "common/log.h"
#include "kernels/common/parallel_for.h"
#include "workers/inference/tagged_model.h"
#include "workers/roles/model_wait.h"
#include "workers/roles/port_file.h"

namespace tandem::roles {

namespace {

// o.port, else the first of $TANDEM_PORTS, else 0 (any free port).
StatusOr<int> ListenPort(const ServeOptions& o) {
  if (o.port != 0) return o.port;
  return FirstLeasedPort();
}

sigset_t BlockStopSignals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

}  // namespace

StatusOr<ServeStart> StartServing(const ServeOptions& o, const inference::TaggedModelOptions& memory) {
  if (o.model_dir.empty()) return InvalidArgument("--model: a Hugging Face model directory is required");
  // Before the stop signals are blocked: a cancelled job's SIGTERM ends the wait.
  TANDEM_RETURN_IF_ERROR(WaitForModelDir(o.model_dir, o.wait_for_model_s, "serve"));
  ServeStart s;
  s.stop_signals = BlockStopSignals();
  if (o.threads > 0) {
    at::set_num_threads(o.threads);
    kernels::SetParallelForThreads(o.threads);  // the CPU kernels' loops too
  }
  TANDEM_ASSIGN_OR_RETURN(s.port, ListenPort(o), "port");
  const bool cuda = o.device == "cuda";
  const at::Device device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  TANDEM_ASSIGN_OR_RETURN(s.placed,
                          inference::LoadTaggedModel(o.model_dir, device, cuda ? at::kBFloat16 : at::kFloat, memory),
                          "--model");
  s.model = std::shared_ptr<model::Transformer>(std::move(s.placed.model));
  return s;
}

StatusOr<std::unique_ptr<control::RoleHost>> JoinDaemon(const ServeOptions& o, const std::string& default_role,
                                                        EngineParts parts) {
  std::string text = o.control;
  if (text.empty()) {
    const char* env = std::getenv("TANDEM_CONTROL");
    if (env != nullptr) text = env;
  }
  if (text.empty()) return std::unique_ptr<control::RoleHost>();
  TANDEM_ASSIGN_OR_RETURN(control::Endpoint endpoint, control::ParseEndpoint(text), "--control");
  TANDEM_RETURN_IF_ERROR(parts.engine.Pause(inference::PauseMode::kRetract), "pause until the daemon's continue");
  if (o.start_released) {
    TANDEM_ASSIGN_OR_RETURN(memory::TaggedMemory::Moved moved,
                            inference::ReleaseEngineMemory(parts.engine, parts.memory, parts.memory.TagNames()),
                            "--start-released");
    log::Info(parts.component, "released every tag before joining (freed_bytes={}, copied_bytes={})",
              moved.freed_bytes, moved.copied_bytes);
  }
  control::RoleHost::Options ho;
  ho.client.endpoint = endpoint;
  ho.client.hello = control::HelloFromEnvironment();
  if (ho.client.hello.role.empty()) ho.client.hello.role = default_role;
  for (const memory::TagSpec& t : parts.memory.Specs()) {
    const StatusOr<uint64_t> footprint = parts.memory.Footprint(t.name);  // a grow tag: what it mapped
    ho.client.hello.tags.push_back({t.name, footprint.ok() ? *footprint : t.bytes, t.backup});
  }
  ho.client.residency = [mem = &parts.memory] { return mem->Residency(); };
  ho.reconnect_window = std::chrono::seconds(o.reconnect_window_s);
  auto host = std::make_unique<control::RoleHost>(ho);
  const std::string component = parts.component;
  RegisterEngineControl(*host, std::move(parts));
  TANDEM_RETURN_IF_ERROR(host->Start());
  log::Info(component, "joined tandemd at {} as {} rank {}", endpoint.ToString(), ho.client.hello.role,
            ho.client.hello.rank);
  return host;
}

std::string ExpandRank(std::string path) {
  const char* rank = std::getenv("TANDEM_RANK");
  for (size_t at = path.find("{rank}"); at != std::string::npos; at = path.find("{rank}"))
    path.replace(at, 6, rank != nullptr ? rank : "0");
  return path;
}

void WritePortFile(const ServeOptions& o, int port) {
  if (o.port_file.empty()) return;
  if (Status s = roles::WritePortFile(ExpandRank(o.port_file), port); !s.ok())
    log::Warn("serving", "--port-file: {}", s.message());
}

Status WaitForStop(const sigset_t& stop_signals, control::RoleHost* host, const std::string& component) {
  const timespec poll{0, 200'000'000};
  for (;;) {
    const int sig = sigtimedwait(&stop_signals, nullptr, &poll);
    if (sig > 0) {
      log::Info(component, "signal {}: stopping", sig);
      return Status::Ok();
    }
    if (host != nullptr && host->done()) {
      Status outcome = host->Wait();
      log::Info(component, "control loop ended: {}", outcome.ok() ? "shutdown" : outcome.ToString());
      return outcome;
    }
  }
}

}  // namespace tandem::roles
