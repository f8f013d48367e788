// Writing and restoring sft checkpoints (sft_checkpoint.h).
#include "workers/roles/sft_checkpoint.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <type_traits>

#include "common/bounded_json.h"
#include "workers/model/checkpoint.h"
#include "workers/model/safetensors_checkpoint.h"
#include "workers/model/safetensors_writer.h"
#include "workers/train/rng_state.h"

namespace tandem::roles {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModelDir = "model";
constexpr const char* kTrainerTensors = "trainer.safetensors";
constexpr const char* kTrainerState = "trainer_state.json";
constexpr uint64_t kMaxStateBytes = 1 << 20;

// A JSON object's field, type-checked.
template <class T>
Status Read(const nlohmann::json& j, const char* key, T* out) {
  const auto it = j.find(key);
  if (it == j.end()) return InvalidArgument(std::string("no \"") + key + "\"");
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return InvalidArgument(std::string("\"") + key + "\" is not a boolean");
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer() || it->template get<int64_t>() < 0)
      return InvalidArgument(std::string("\"") + key + "\" is not a non-negative integer");
  } else {
    if (!it->is_number() || !std::isfinite(it->template get<double>()) || it->template get<double>() < 0)
      return InvalidArgument(std::string("\"") + key + "\" is not a finite non-negative number");
  }
  *out = it->template get<T>();
  return Status::Ok();
}

StatusOr<at::ScalarType> TensorType(model::DType t) {
  if (t == model::DType::kU8) return at::kByte;
  if (const std::optional<at::ScalarType> s = model::TorchType(t)) return *s;
  return InvalidArgument("a tensor of an unexpected dtype");
}

// trainer.safetensors: the optimizer's moments and the generators' states.
Status WriteTrainerTensors(const std::string& path, const train::OptimizerState& trainer,
                           const std::map<std::string, at::Tensor>& rng) {
  std::vector<at::Tensor> host;  // alive until the file is written
  std::vector<model::TensorToWrite> tensors;
  auto add = [&](const std::string& name, const at::Tensor& t) -> Status {
    host.push_back(t.detach().to(at::kCPU).contiguous());
    const at::Tensor& h = host.back();
    std::optional<model::DType> dtype = h.scalar_type() == at::kByte ? model::DType::kU8 : model::DTypeOf(h.scalar_type());
    if (!dtype) return Internal("sft checkpoint: tensor " + name + " of an unsupported dtype");
    tensors.push_back({name, *dtype, h.sizes().vec(), h.data_ptr(), static_cast<size_t>(h.nbytes())});
    return Status::Ok();
  };
  for (const auto& [name, t] : trainer.tensors) TANDEM_RETURN_IF_ERROR(add(name, t));
  for (const auto& [name, t] : rng) TANDEM_RETURN_IF_ERROR(add(name, t));
  return model::WriteSafetensors(path, tensors, {{"format", "pt"}, {"steps", std::to_string(trainer.steps)}});
}

struct TrainerTensors {
  train::OptimizerState trainer;
  std::map<std::string, at::Tensor> rng;
};

StatusOr<TrainerTensors> ReadTrainerTensors(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(const model::SafetensorsFile file, model::SafetensorsFile::Open(path));
  TrainerTensors out;
  const auto steps = file.metadata().find("steps");
  if (steps == file.metadata().end()) return InvalidArgument(path + ": no \"steps\" in __metadata__");
  try {
    size_t used = 0;
    out.trainer.steps = std::stoll(steps->second, &used);
    if (used != steps->second.size() || out.trainer.steps < 0) throw std::invalid_argument("not a count");
  } catch (const std::exception&) {
    return InvalidArgument(path + ": __metadata__ \"steps\" is not a non-negative integer");
  }
  for (const std::string& name : file.names()) {
    TANDEM_ASSIGN_OR_RETURN(const model::TensorView v, file.Get(name));
    TANDEM_ASSIGN_OR_RETURN(const at::ScalarType type, TensorType(v.dtype), path + ": " + name);
    at::Tensor t = at::empty(v.shape, at::TensorOptions().dtype(type));
    if (static_cast<size_t>(t.nbytes()) != v.nbytes) return InvalidArgument(path + ": " + name + ": size mismatch");
    if (v.nbytes > 0) std::memcpy(t.data_ptr(), v.data, v.nbytes);
    if (name.rfind("rng/", 0) == 0) {
      out.rng[name] = std::move(t);
    } else if (name.rfind("exp_avg/", 0) == 0 || name.rfind("exp_avg_sq/", 0) == 0) {
      out.trainer.tensors[name] = std::move(t);
    } else {
      return InvalidArgument(path + ": unexpected tensor \"" + name + "\"");
    }
  }
  return out;
}

}  // namespace

StatusOr<nlohmann::json> ReadJsonObjectFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return ErrnoStatus("open " + path);
  std::string text(kMaxStateBytes + 1, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  if (text.size() > kMaxStateBytes) return InvalidArgument(path + ": larger than 1 MiB");
  TANDEM_ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonBounded(text), path);
  if (!j.is_object()) return InvalidArgument(path + ": not a JSON object");
  return j;
}

std::string FingerprintDifferences(const nlohmann::json& saved, const nlohmann::json& now) {
  std::string out;
  auto note = [&out](const std::string& key, const nlohmann::json& a, const nlohmann::json& b) {
    if (!out.empty()) out += ", ";
    out += key + " " + (a.is_null() ? std::string("absent") : DumpJson(a)) + " (this run: " +
           (b.is_null() ? std::string("absent") : DumpJson(b)) + ")";
  };
  for (const auto& [key, value] : now.items())
    if (!saved.contains(key) || saved[key] != value) note(key, saved.value(key, nlohmann::json()), value);
  for (const auto& [key, value] : saved.items())
    if (!now.contains(key)) note(key, value, nlohmann::json());
  return out;
}

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
  TANDEM_RETURN_IF_ERROR(Read(j, "step", &p.step));
  TANDEM_RETURN_IF_ERROR(Read(j, "train_seconds", &p.train_seconds));
  TANDEM_RETURN_IF_ERROR(Read(j, "elapsed_seconds", &p.elapsed_seconds));
  TANDEM_RETURN_IF_ERROR(Read(j, "total_tokens", &p.total_tokens));
  TANDEM_RETURN_IF_ERROR(Read(j, "accuracy_before", &p.accuracy_before));
  TANDEM_RETURN_IF_ERROR(Read(j, "window_seconds", &p.window_seconds));
  TANDEM_RETURN_IF_ERROR(Read(j, "window_loss", &p.window_loss));
  TANDEM_RETURN_IF_ERROR(Read(j, "window_steps", &p.window_steps));
  TANDEM_RETURN_IF_ERROR(Read(j, "window_tokens", &p.window_tokens));
  TANDEM_RETURN_IF_ERROR(Read(j, "window_response_tokens", &p.window_response_tokens));
  TANDEM_RETURN_IF_ERROR(Read(j, "logged_a_window", &p.logged_a_window));
  TANDEM_RETURN_IF_ERROR(Read(j, "first_loss", &p.first_loss));
  TANDEM_RETURN_IF_ERROR(Read(j, "last_loss", &p.last_loss));
  if (!j.contains("sampler_cursor")) return InvalidArgument("no \"sampler_cursor\"");
  TANDEM_ASSIGN_OR_RETURN(p.cursor, data::SamplerCursorFromJson(j["sampler_cursor"]), "sampler_cursor");
  return p;
}

nlohmann::json SftRunFingerprint(const SftOptions& o) {
  auto opt = [](const std::optional<int64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  return {{"dataset", o.dataset},
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
}

StatusOr<checkpoint::CommittedCheckpoint> SaveSftCheckpoint(checkpoint::CheckpointWriter& writer,
                                                            const SftCheckpointInput& in) {
  const uint64_t step = static_cast<uint64_t>(in.progress.step);
  TANDEM_ASSIGN_OR_RETURN(checkpoint::PendingCheckpoint pending, writer.Begin(step, step), "sft checkpoint");
  TANDEM_RETURN_IF_ERROR(pending.AddDirectory(kModelDir,
                                              [&](const std::string& dir) -> Status {
                                                TANDEM_RETURN_IF_ERROR(model::SavePretrained(*in.model, dir));
                                                return in.write_tokenizer(dir);
                                              }),
                         "sft checkpoint");
  const train::OptimizerState trainer = in.trainer->optimizer().State();
  const std::map<std::string, at::Tensor> rng = train::SaveRngStates(in.model->device());
  TANDEM_RETURN_IF_ERROR(pending.AddWrittenFile(kTrainerTensors,
                                                [&](const std::string& path) {
                                                  return WriteTrainerTensors(path, trainer, rng);
                                                }),
                         "sft checkpoint");
  const nlohmann::json state = {{"progress", SftProgressToJson(in.progress)}, {"run", in.fingerprint}};
  TANDEM_RETURN_IF_ERROR(pending.AddFile(kTrainerState, DumpJson(state, 2) + "\n"), "sft checkpoint");
  return pending.Commit({{"kind", "sft"}});
}

StatusOr<std::optional<RestoredSftCheckpoint>> RestoreLatestSftCheckpoint(const std::string& root,
                                                                          const nlohmann::json& fingerprint,
                                                                          model::Transformer& model,
                                                                          train::SftTrainer& trainer,
                                                                          at::Device device) {
  RestoredSftCheckpoint out;
  StatusOr<checkpoint::ValidCheckpoint> found =
      checkpoint::FindLatestCheckpoint(root, checkpoint::Verify::kDigests, &out.skipped);
  if (!found.ok()) {
    if (found.status().code() == StatusCode::kNotFound && out.skipped.empty()) return std::optional<RestoredSftCheckpoint>();
    return FailedPrecondition("sft --resume: " + found.status().message());
  }
  out.path = found->path;
  const std::string where = "sft --resume from " + out.path;

  // Read and check everything before the first write into the run.
  TANDEM_ASSIGN_OR_RETURN(const nlohmann::json state, ReadJsonObjectFile((fs::path(out.path) / kTrainerState).string()), where);
  if (!state.contains("run") || !state.contains("progress"))
    return InvalidArgument(where + ": " + kTrainerState + " needs \"run\" and \"progress\"");
  if (state["run"] != fingerprint)
    return FailedPrecondition(where + ": written by another run: " + FingerprintDifferences(state["run"], fingerprint));
  TANDEM_ASSIGN_OR_RETURN(out.progress, SftProgressFromJson(state["progress"]), where + ": " + kTrainerState);
  if (static_cast<uint64_t>(out.progress.step) != found->manifest.step)
    return InvalidArgument(where + ": " + kTrainerState + " says step " + std::to_string(out.progress.step) +
                           ", the manifest " + std::to_string(found->manifest.step));
  TANDEM_ASSIGN_OR_RETURN(TrainerTensors tensors, ReadTrainerTensors((fs::path(out.path) / kTrainerTensors).string()),
                          where);
  if (tensors.trainer.steps != out.progress.step)
    return InvalidArgument(where + ": " + kTrainerTensors + " holds the optimizer of step " +
                           std::to_string(tensors.trainer.steps) + ", not " + std::to_string(out.progress.step));
  TANDEM_ASSIGN_OR_RETURN(const model::SafetensorsCheckpoint weights,
                          model::SafetensorsCheckpoint::Open((fs::path(out.path) / kModelDir).string()), where);

  TANDEM_RETURN_IF_ERROR(model::LoadWeights(model, weights), where);
  TANDEM_RETURN_IF_ERROR(trainer.optimizer().Restore(tensors.trainer), where);
  TANDEM_RETURN_IF_ERROR(train::RestoreRngStates(tensors.rng, device), where);
  return std::optional<RestoredSftCheckpoint>(std::move(out));
}

}  // namespace tandem::roles
