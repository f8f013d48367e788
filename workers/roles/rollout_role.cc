// The rollout worker's run (rollout_role.h).
#include "workers/roles/rollout_role.h"

#include <filesystem>
#include <memory>

#include "common/log.h"
#include "workers/data/tokenizer.h"
#include "workers/inference/generator.h"
#include "workers/inference/http_api.h"
#include "workers/inference/tagged_model.h"
#include "workers/model/checkpoint.h"
#include "workers/model/config.h"
#include "workers/roles/serving.h"
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

}  // namespace

Status RunRollout(const RolloutOptions& o) {
  const ServeOptions& so = o.serve;
  inference::TaggedModelOptions to;
  to.kv_cache_bytes = o.kv_cache_mib << 20;
  to.kv_blocks = o.kv_blocks;
  to.block_size = o.block_size;
  TANDEM_ASSIGN_OR_RETURN(const std::vector<int64_t> graph_batches,
                          inference::DecodeGraphBatches(o.cuda_graphs, so.device == "cuda", o.max_running));
  if (!graph_batches.empty()) to.cuda_graph_bytes = inference::kGraphTagReserve;
  TANDEM_ASSIGN_OR_RETURN(ServeStart start, StartServing(so, to));
  const std::shared_ptr<model::Transformer>& model = start.model;
  inference::TaggedModel& placed = start.placed;

  inference::GeneratorOptions g;
  g.model_path = so.model_dir;
  g.config_json = model::ToHfJson(model->config()).dump();  // the config as loaded (unmodelled keys kept)
  std::shared_ptr<const inference::TextCodec> codec;
  if (std::filesystem::exists(std::filesystem::path(so.model_dir) / "tokenizer.json")) {
    StatusOr<data::Tokenizer> tok = data::Tokenizer::FromDirectory(so.model_dir);
    TANDEM_RETURN_IF_ERROR(tok.status(), "--model");
    if (tok->special_tokens().eos) g.scheduler.eos_token_ids.push_back(*tok->special_tokens().eos);
    codec = std::make_shared<TokenizerCodec>(*tok);
  } else {
    log::Warn("rollout", "{} has no tokenizer.json: token ids only, no text, no stop strings", so.model_dir);
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
  g.decode_graph_batches = graph_batches;
  g.graph_memory = placed.memory.get();
  StatusOr<std::unique_ptr<inference::Generator>> engine = inference::Generator::Create(model, g);
  TANDEM_RETURN_IF_ERROR(engine.status(), "engine");

  inference::HttpApiOptions h;
  h.host = so.host;
  h.port = start.port;
  h.codec = codec;
  inference::HttpApiServer server(**engine, h);
  TANDEM_RETURN_IF_ERROR(server.Start(), "http");
  log::Info("rollout", "serving {} on http://{}:{} ({} KV blocks of {} tokens, {} MiB; weights {} MiB; memory {})",
            so.model_dir, so.host, server.port(), placed.kv_blocks, o.block_size, (*engine)->kv_pool_bytes() >> 20,
            *placed.memory->Size("weights") >> 20, placed.memory->backend().name());
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<control::RoleHost> host,
                          JoinDaemon(so, "rollout", {**engine, *model, *placed.memory, "rollout", so.frozen_weights}));
  WritePortFile(so, server.port());
  const Status outcome = WaitForStop(start.stop_signals, host.get(), "rollout");
  host.reset();
  server.Stop();
  engine->reset();
  return outcome;
}

}  // namespace tandem::roles
