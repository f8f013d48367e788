// The rollout worker's run (rollout_role.h).
#include "workers/roles/rollout_role.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "common/log.h"
#include "workers/data/tokenizer.h"
#include "workers/inference/generator.h"
#include "workers/inference/http_api.h"
#include "workers/inference/tagged_model.h"
#include "workers/model/checkpoint.h"
#include "workers/model/config.h"
#include "workers/roles/rollout_control.h"
#include "workers/runtime/role_host.h"
#include "workers/runtime/tagged_memory.h"

namespace tandem::roles {
namespace {

// The tokenizer as the HTTP API's TextCodec.
class TokenizerCodec final : public inference::TextCodec {
 public:
  explicit TokenizerCodec(data::Tokenizer t) : t_(std::move(t)) {}
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override { return t_.Encode(text); }
  StatusOr<std::string> Decode(std::span<const int32_t> ids) const override {
    data::DecodeOptions o;
    o.skip_special_tokens = true;
    return t_.Decode(ids, o);
  }

 private:
  data::Tokenizer t_;
};

// The first port of $TANDEM_PORTS ("p1,p2,..."), or 0.
StatusOr<int> LeasedPort() {
  const char* env = std::getenv("TANDEM_PORTS");
  if (env == nullptr || *env == '\0') return 0;
  std::string first(env);
  first = first.substr(0, first.find(','));
  char* end = nullptr;
  errno = 0;
  const long port = std::strtol(first.c_str(), &end, 10);
  if (errno != 0 || end == first.c_str() || *end != '\0' || port <= 0 || port > 65535)
    return InvalidArgument("TANDEM_PORTS: '" + std::string(env) + "' does not start with a port");
  return static_cast<int>(port);
}

// The control channel's endpoint: the flag, else $TANDEM_CONTROL, else none.
StatusOr<std::optional<control::Endpoint>> ControlEndpoint(const RolloutOptions& o) {
  std::string text = o.control;
  if (text.empty()) {
    const char* env = std::getenv("TANDEM_CONTROL");
    if (env != nullptr) text = env;
  }
  if (text.empty()) return std::optional<control::Endpoint>{};
  TANDEM_ASSIGN_OR_RETURN(control::Endpoint ep, control::ParseEndpoint(text), "--control");
  return std::optional<control::Endpoint>(ep);
}

void WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << port << "\n";
  if (std::rename(tmp.c_str(), path.c_str()) != 0) log::Warn("rollout", "--port-file {}: rename failed", path);
}

}  // namespace

Status RunRollout(const RolloutOptions& o) {
  if (o.model_dir.empty()) return InvalidArgument("--model: a Hugging Face model directory is required");
  if (o.threads > 0) at::set_num_threads(o.threads);
  TANDEM_ASSIGN_OR_RETURN(std::optional<control::Endpoint> endpoint, ControlEndpoint(o));
  const bool cuda = o.device == "cuda";
  const at::Device device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  inference::TaggedModelOptions to;
  to.kv_cache_bytes = o.kv_cache_mib << 20;
  to.kv_blocks = o.kv_blocks;
  to.block_size = o.block_size;
  TANDEM_ASSIGN_OR_RETURN(inference::TaggedModel placed,
                          inference::LoadTaggedModel(o.model_dir, device, cuda ? at::kBFloat16 : at::kFloat, to), "--model");
  std::shared_ptr<model::Transformer> model(std::move(placed.model));

  inference::GeneratorOptions g;
  g.model_path = o.model_dir;
  g.config_json = model::ToHfJson(model->config()).dump();  // the config as loaded (unmodelled keys kept)
  std::shared_ptr<const inference::TextCodec> codec;
  if (std::filesystem::exists(std::filesystem::path(o.model_dir) / "tokenizer.json")) {
    StatusOr<data::Tokenizer> tok = data::Tokenizer::FromDirectory(o.model_dir);
    TANDEM_RETURN_IF_ERROR(tok.status(), "--model");
    if (tok->special_tokens().eos) g.scheduler.eos_token_ids.push_back(*tok->special_tokens().eos);
    codec = std::make_shared<TokenizerCodec>(*tok);
  } else {
    log::Warn("rollout", "{} has no tokenizer.json: token ids only, no text, no stop strings", o.model_dir);
  }
  g.codec = codec;
  g.kv_buffer = placed.kv_buffer;
  g.scheduler.num_blocks = placed.kv_blocks;
  g.scheduler.block_size = o.block_size;
  g.scheduler.max_running = o.max_running;
  g.scheduler.max_step_tokens = o.max_step_tokens;
  g.scheduler.max_waiting = o.max_waiting;
  g.max_model_len = o.max_model_len;
  g.scheduler.seed = o.seed;
  StatusOr<std::unique_ptr<inference::Generator>> engine = inference::Generator::Create(model, g);
  TANDEM_RETURN_IF_ERROR(engine.status(), "engine");

  inference::HttpApiOptions h;
  h.host = o.host;
  h.port = o.port;
  if (h.port == 0) {
    StatusOr<int> leased = LeasedPort();
    TANDEM_RETURN_IF_ERROR(leased.status(), "port");
    h.port = *leased;
  }
  h.codec = codec;
  // Block the stop signals before any thread starts, so that only the wait
  // below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  inference::HttpApiServer server(**engine, h);
  TANDEM_RETURN_IF_ERROR(server.Start(), "http");
  log::Info("rollout", "serving {} on http://{}:{} ({} KV blocks of {} tokens, {} MiB; weights {} MiB; memory {})",
            o.model_dir, o.host, server.port(), placed.kv_blocks, o.block_size, (*engine)->kv_pool_bytes() >> 20,
            *placed.memory->Size("weights") >> 20, placed.memory->backend().name());

  std::unique_ptr<control::RoleHost> host;
  if (endpoint) {
    control::RoleHost::Options ho;
    ho.client.endpoint = *endpoint;
    ho.client.hello = control::HelloFromEnvironment();
    if (ho.client.hello.role.empty()) ho.client.hello.role = "rollout";
    for (const memory::TagSpec& t : placed.memory->Specs()) ho.client.hello.tags.push_back({t.name, t.bytes, t.backup});
    ho.client.residency = [mem = placed.memory.get()] { return mem->Residency(); };
    ho.reconnect_window = std::chrono::seconds(o.reconnect_window_s);
    host = std::make_unique<control::RoleHost>(ho);
    RegisterRolloutControl(*host, {**engine, *model, *placed.memory});
    TANDEM_RETURN_IF_ERROR(host->Start());
    log::Info("rollout", "joined tandemd at {} as {} rank {}", endpoint->ToString(), ho.client.hello.role,
              ho.client.hello.rank);
  }
  if (!o.port_file.empty()) WritePortFile(o.port_file, server.port());

  // Until a stop signal, or the end of the control loop (the daemon's
  // shutdown, or a daemon gone for good).
  Status outcome;
  const timespec poll{0, 200'000'000};
  for (;;) {
    const int sig = sigtimedwait(&stop_signals, nullptr, &poll);
    if (sig > 0) {
      log::Info("rollout", "signal {}: stopping", sig);
      break;
    }
    if (host && host->done()) {
      outcome = host->Wait();
      log::Info("rollout", "control loop ended: {}", outcome.ok() ? "shutdown" : outcome.ToString());
      break;
    }
  }
  host.reset();
  server.Stop();
  engine->reset();
  return outcome;
}

}  // namespace tandem::roles
