// The actor's progress and fingerprint (actor_checkpoint.h).
#include "workers/roles/actor_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "workers/roles/json_field.h"

namespace tandem::roles {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMetricsFile = "metrics.jsonl";
constexpr uintmax_t kMaxMetricsBytes = uintmax_t{256} << 20;

StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return NotFound(path + ": " + ec.message());
  if (size > kMaxMetricsBytes) return InvalidArgument(path + " is larger than 256 MiB");
  std::ifstream f(path, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!f.read(text.data(), static_cast<std::streamsize>(text.size()))) return ErrnoStatus("read " + path);
  return text;
}

// Replaces `path` with `text` (a temporary file renamed over it).
Status ReplaceFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!(f << text) || !f.flush()) return ErrnoStatus("write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename " + tmp + " to " + path);
  return Status::Ok();
}

}  // namespace

nlohmann::json ActorProgressToJson(const ActorProgress& p) {
  return {{"step", p.step},
          {"optimizer_steps", p.optimizer_steps},
          {"version", p.version},
          {"sampler_cursors", [&] {
             nlohmann::json a = nlohmann::json::array();
             for (const data::SamplerCursor& c : p.cursors) a.push_back(data::SamplerCursorToJson(c));
             return a;
           }()},
          {"accuracy_before", p.accuracy_before},
          {"reward_first", p.reward_first},
          {"reward_last", p.reward_last}};
}

StatusOr<ActorProgress> ActorProgressFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("progress is not a JSON object");
  ActorProgress p;
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "step", &p.step));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "optimizer_steps", &p.optimizer_steps));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "version", &p.version));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "accuracy_before", &p.accuracy_before));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "reward_first", &p.reward_first));
  TANDEM_RETURN_IF_ERROR(ReadJsonField(j, "reward_last", &p.reward_last));
  const auto cursors = j.find("sampler_cursors");
  if (cursors == j.end() || !cursors->is_array() || cursors->empty())
    return InvalidArgument("\"sampler_cursors\": expected one cursor per objective");
  for (size_t i = 0; i < cursors->size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(data::SamplerCursor c, data::SamplerCursorFromJson((*cursors)[i]),
                            "sampler_cursors[" + std::to_string(i) + "]");
    p.cursors.push_back(c);
  }
  return p;
}

nlohmann::json ActorRunFingerprint(const ActorOptions& o) {
  nlohmann::json f = {{"model", o.model_dir},
          {"dataset", o.dataset},
          {"dataset_options", o.dataset_options},
          {"eval_options", o.eval_options},
          {"objectives", o.objectives},
          {"eval_problems", o.eval_problems},
          {"algorithm", o.algorithm},
          {"steps", o.steps},
          {"prompts_per_step", o.prompts_per_step},
          {"group_size", o.group_size},
          {"max_new_tokens", o.max_new_tokens},
          {"temperature", o.temperature},
          {"max_prompt_tokens", o.max_prompt_tokens},
          {"lr", o.lr},
          {"warmup_steps", o.warmup_steps},
          {"final_lr_ratio", o.final_lr_ratio},
          {"weight_decay", o.weight_decay},
          {"max_grad_norm", o.max_grad_norm},
          {"rollouts", o.rollouts},
          {"device", o.device},
          {"seed", o.seed}};
  if (o.optimizer.name != "adamw") f["optimizer"] = {{"name", o.optimizer.name}, {"muon_lr_scale", o.optimizer.muon_lr_scale}};
  return f;
}

Status CopyTokenizer(const std::string& from, const std::string& to) {
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    const fs::path src = fs::path(from) / f;
    if (!fs::exists(src)) continue;
    std::error_code ec;
    fs::copy_file(src, fs::path(to) / f, fs::copy_options::overwrite_existing, ec);
    if (ec) return Internal("copy " + src.string() + " to " + to + ": " + ec.message());
  }
  return Status::Ok();
}

StatusOr<checkpoint::CommittedCheckpoint> SaveActorCheckpoint(checkpoint::CheckpointWriter& writer,
                                                              const ActorCheckpointInput& in) {
  TANDEM_ASSIGN_OR_RETURN(std::string metrics, ReadSmallFile(in.metrics_path), "actor checkpoint: metrics");
  TrainingCheckpointInput t;
  t.kind = "actor";
  t.model = in.model;
  t.optimizer = in.optimizer;
  t.progress = ActorProgressToJson(in.progress);
  t.fingerprint = in.fingerprint;
  t.write_tokenizer = [dir = in.model_dir](const std::string& to) { return CopyTokenizer(dir, to); };
  t.files[kMetricsFile] = std::move(metrics);
  return SaveTrainingCheckpoint(writer, t);
}

StatusOr<std::optional<RestoredActorCheckpoint>> RestoreActorCheckpoint(const std::string& root,
                                                                        const nlohmann::json& fingerprint,
                                                                        model::Transformer& model, train::Optimizer& optimizer,
                                                                        at::Device device,
                                                                        const std::string& metrics_path) {
  RestoredActorCheckpoint out;
  TrainingCheckpointTarget target;
  target.what = "actor resume";
  target.fingerprint = fingerprint;
  target.read_progress = [&out](const nlohmann::json& j) -> Status {
    TANDEM_ASSIGN_OR_RETURN(out.progress, ActorProgressFromJson(j));
    return Status::Ok();
  };
  target.model = &model;
  target.optimizer = &optimizer;
  target.device = device;
  TANDEM_ASSIGN_OR_RETURN(const std::optional<RestoredTrainingCheckpoint> restored,
                          RestoreLatestTrainingCheckpoint(root, target));
  if (!restored) return std::optional<RestoredActorCheckpoint>();
  out.path = restored->path;
  out.skipped = restored->skipped;
  // The metrics of the steps it holds (its digest was verified); the
  // lines of later steps, which are trained again, go.
  if (metrics_path.empty()) return std::optional<RestoredActorCheckpoint>(std::move(out));
  TANDEM_ASSIGN_OR_RETURN(const std::string metrics, ReadSmallFile((fs::path(out.path) / kMetricsFile).string()),
                          "actor resume");
  TANDEM_RETURN_IF_ERROR(ReplaceFile(metrics_path, metrics), "actor resume: metrics");
  return std::optional<RestoredActorCheckpoint>(std::move(out));
}

}  // namespace tandem::roles
