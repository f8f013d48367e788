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
#include "workers/model/checkpoint.h"
#include "workers/model/config.h"

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

}  // namespace

Status RunRollout(const RolloutOptions& o) {
  if (o.model_dir.empty()) return InvalidArgument("--model: a Hugging Face model directory is required");
  if (o.threads > 0) at::set_num_threads(o.threads);
  const bool cuda = o.device == "cuda";
  const at::Device device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  StatusOr<std::unique_ptr<model::Transformer>> loaded =
      model::LoadPretrained(o.model_dir, device, cuda ? at::kBFloat16 : at::kFloat);
  TANDEM_RETURN_IF_ERROR(loaded.status(), "--model");
  std::shared_ptr<const model::Transformer> model(std::move(*loaded));

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
  g.kv_cache_bytes = o.kv_cache_mib << 20;
  g.scheduler.num_blocks = o.kv_blocks;
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
  // Block the stop signals before any thread starts, so that only sigwait
  // below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  inference::HttpApiServer server(**engine, h);
  TANDEM_RETURN_IF_ERROR(server.Start(), "http");
  log::Info("rollout", "serving {} on http://{}:{} ({} KV blocks of {} tokens, {} MiB)", o.model_dir, o.host,
            server.port(), (*engine)->Stats().kv_blocks_free, o.block_size, (*engine)->kv_pool_bytes() >> 20);
  if (!o.port_file.empty()) {
    const std::string tmp = o.port_file + ".tmp";
    std::ofstream(tmp) << server.port() << "\n";
    if (std::rename(tmp.c_str(), o.port_file.c_str()) != 0)
      log::Warn("rollout", "--port-file {}: rename failed", o.port_file);
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  log::Info("rollout", "signal {}: stopping", sig);
  server.Stop();
  engine->reset();
  return Status::Ok();
}

}  // namespace tandem::roles
