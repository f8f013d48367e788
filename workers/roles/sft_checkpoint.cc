// Writing and restoring sft checkpoints (sft_checkpoint.h).
#include "workers/roles/sft_checkpoint.h"

#include "workers/roles/json_field.h"
#include "workers/roles/training_checkpoint.h"

namespace tandem::roles {

nlohmann::json SftProgressToJson(const SftProgress& p) {
  return {{"step", p.step},
          {"sampler_cursor", data::SamplerCursorToJson(p.cursor)},
          {"train_seconds", p.train_seconds},
          {"elapsed_seconds", p.elapsed_seconds},
          {"total_tokens", p.total_tokens},
          {"accuracy_before", p.accuracy_before},
          {"window_seconds", p.window_seconds},
          {"window_loss", p.window_loss},
          {"window_steps", p.window_steps},
          {"window_tokens", p.window_tokens},
          {"window_response_tokens", p.window_response_tokens},
          {"logged_a_window", p.logged_a_window},
          {"first_loss", p.first_loss},
          {"last_loss", p.last_loss}};
}

StatusOr<SftProgress> SftProgressFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("progress is not a JSON object");
  SftProgress p;
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "step", &p.step));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "train_seconds", &p.train_seconds));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "elapsed_seconds", &p.elapsed_seconds));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "total_tokens", &p.total_tokens));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "accuracy_before", &p.accuracy_before));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "window_seconds", &p.window_seconds));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "window_loss", &p.window_loss));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "window_steps", &p.window_steps));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "window_tokens", &p.window_tokens));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "window_response_tokens", &p.window_response_tokens));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "logged_a_window", &p.logged_a_window));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "first_loss", &p.first_loss));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "last_loss", &p.last_loss));
  if (!j.contains("sampler_cursor")) return InvalidArgument("no \"sampler_cursor\"");
  TANDEM_ASSIGN_OR_RETURN(p.cursor, data::SamplerCursorFromJson(j["sampler_cursor"]), "sampler_cursor");
  return p;
}

nlohmann::json SftRunFingerprint(const SftOptions& o) {
  auto opt = [](const std::optional<int64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  nlohmann::json f = {{"dataset", o.dataset},
          {"dataset_options", o.dataset_options},
          {"eval_options", o.eval_options},
          {"eval_problems", o.eval_problems},
          {"init", o.init_dir},
          {"preset", o.init_dir.empty() ? nlohmann::json(o.preset) : nlohmann::json()},
          {"hidden_size", opt(o.hidden_size)},
          {"num_layers", opt(o.num_layers)},
          {"num_heads", opt(o.num_heads)},
          {"num_kv_heads", opt(o.num_kv_heads)},
          {"head_dim", opt(o.head_dim)},
          {"intermediate_size", opt(o.intermediate_size)},
          {"max_steps", o.max_steps},
          {"batch_size", o.batch_size},
          {"lr", o.lr},
          {"warmup_steps", o.warmup_steps},
          {"final_lr_ratio", o.final_lr_ratio},
          {"weight_decay", o.weight_decay},
          {"max_grad_norm", o.max_grad_norm},
          {"max_prompt_tokens", o.max_prompt_tokens},
          {"max_sequence_tokens", o.max_sequence_tokens},
          {"seed", o.seed},
          {"device", o.device}};
  if (o.optimizer.name != "adamw") f["optimizer"] = {{"name", o.optimizer.name}, {"muon_lr_scale", o.optimizer.muon_lr_scale}};
  return f;
}

StatusOr<checkpoint::CommittedCheckpoint> SaveSftCheckpoint(checkpoint::CheckpointWriter& writer,
                                                            const SftCheckpointInput& in) {
  return SaveTrainingCheckpoint(writer, {"sft", in.model, &in.trainer->optimizer(), SftProgressToJson(in.progress),
                                         in.fingerprint, in.write_tokenizer, {}});
}

StatusOr<std::optional<RestoredSftCheckpoint>> RestoreLatestSftCheckpoint(const std::string& root,
                                                                          const nlohmann::json& fingerprint,
                                                                          model::Transformer& model,
                                                                          train::SftTrainer& trainer,
                                                                          at::Device device) {
  SftProgress progress;
  auto read = [&progress](const nlohmann::json& j) -> Status {
    TANDEM_ASSIGN_OR_RETURN(progress, SftProgressFromJson(j));
    return Status::Ok();
  };
  TANDEM_ASSIGN_OR_RETURN(std::optional<RestoredTrainingCheckpoint> restored,
                          RestoreLatestTrainingCheckpoint(root, {"sft --resume", fingerprint, read, &model,
                                                                 &trainer.optimizer(), device}));
  if (!restored) return std::optional<RestoredSftCheckpoint>();
  return std::optional<RestoredSftCheckpoint>(RestoredSftCheckpoint{restored->path, progress, std::move(restored->skipped)});
}

}  // namespace tandem::roles
