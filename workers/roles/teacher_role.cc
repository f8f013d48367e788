// The teacher worker's run (teacher_role.h).
#include "workers/roles/teacher_role.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <memory>

#include "common/log.h"
#include "workers/inference/score_api.h"
#include "workers/inference/scorer.h"
#include "workers/inference/tagged_model.h"
#include "workers/model/config.h"
#include "workers/roles/serving.h"

namespace tandem::roles {

Status RunTeacher(const TeacherOptions& o) {
  const ServeOptions& so = o.serve;
  if (so.model_dir.empty()) return InvalidArgument("--model: a Hugging Face model directory is required");
  const sigset_t stop_signals = BlockStopSignals();  // before any thread starts (LibTorch's, the scorer's)
  if (so.threads > 0) at::set_num_threads(so.threads);
  TANDEM_ASSIGN_OR_RETURN(const int port, ListenPort(so), "port");
  const bool cuda = so.device == "cuda";
  const at::Device device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  inference::TaggedModelOptions to;
  to.kv_cache = false;
  TANDEM_ASSIGN_OR_RETURN(inference::TaggedModel placed,
                          inference::LoadTaggedModel(so.model_dir, device, cuda ? at::kBFloat16 : at::kFloat, to),
                          "--model");
  std::shared_ptr<model::Transformer> model(std::move(placed.model));

  inference::ScorerOptions sc;
  sc.model_path = so.model_dir;
  sc.config_json = model::ToHfJson(model->config()).dump();
  sc.max_batch_tokens = o.max_batch_tokens;
  sc.max_waiting = o.max_waiting;
  sc.max_model_len = o.max_model_len;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<inference::Scorer> scorer, inference::Scorer::Create(model, sc), "scorer");

  inference::ScoreApiOptions h;
  h.host = so.host;
  h.port = port;
  inference::ScoreApiServer server(*scorer, h);
  TANDEM_RETURN_IF_ERROR(server.Start(), "http");
  log::Info("teacher", "serving {} on http://{}:{} (/score; {} input tokens per forward; weights {} MiB; memory {})",
            so.model_dir, so.host, server.port(), o.max_batch_tokens, *placed.memory->Size("weights") >> 20,
            placed.memory->backend().name());
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<control::RoleHost> host,
                          JoinDaemon(so, "teacher", {*scorer, *model, *placed.memory, "teacher"}));
  WritePortFile(so, server.port());
  const Status outcome = WaitForStop(stop_signals, host.get(), "teacher");
  host.reset();
  server.Stop();
  scorer.reset();
  return outcome;
}

}  // namespace tandem::roles
