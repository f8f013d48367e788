// The teacher worker's run (teacher_role.h).
#include "workers/roles/teacher_role.h"

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
  inference::TaggedModelOptions to;
  to.kv_cache = false;
  TANDEM_ASSIGN_OR_RETURN(ServeStart start, StartServing(so, to));
  const std::shared_ptr<model::Transformer>& model = start.model;
  inference::TaggedModel& placed = start.placed;

  inference::ScorerOptions sc;
  sc.model_path = so.model_dir;
  sc.config_json = model::ToHfJson(model->config()).dump();
  sc.max_batch_tokens = o.max_batch_tokens;
  sc.max_waiting = o.max_waiting;
  sc.max_model_len = o.max_model_len;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<inference::Scorer> scorer, inference::Scorer::Create(model, sc), "scorer");

  inference::ScoreApiOptions h;
  h.host = so.host;
  h.port = start.port;
  inference::ScoreApiServer server(*scorer, h);
  TANDEM_RETURN_IF_ERROR(server.Start(), "http");
  log::Info("teacher", "serving {} on http://{}:{} (/score; {} input tokens per forward; weights {} MiB; memory {})",
            so.model_dir, so.host, server.port(), o.max_batch_tokens, *placed.memory->Size("weights") >> 20,
            placed.memory->backend().name());
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<control::RoleHost> host,
                          JoinDaemon(so, "teacher", {*scorer, *model, *placed.memory, "teacher"}));
  WritePortFile(so, server.port());
  const Status outcome = WaitForStop(start.stop_signals, host.get(), "teacher");
  host.reset();
  server.Stop();
  scorer.reset();
  return outcome;
}

}  // namespace tandem::roles
