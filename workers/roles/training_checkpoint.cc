// Writing and restoring training checkpoints (training_checkpoint.h).
#include "workers/roles/training_checkpoint.h"

#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>
#include <fstream>

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
    if (!dtype) return Internal("checkpoint: tensor " + name + " of an unsupported dtype");
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
    } else if (name.rfind("exp_avg/", 0) == 0 || name.rfind("exp_avg_sq/", 0) == 0 || name.rfind("master/", 0) == 0 ||
               name.rfind("momentum/", 0) == 0) {
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

StatusOr<checkpoint::CommittedCheckpoint> SaveTrainingCheckpoint(checkpoint::CheckpointWriter& writer,
                                                                 const TrainingCheckpointInput& in) {
  const std::string what = in.kind + " checkpoint";
  if (!in.progress.is_object() || !in.progress.contains("step") || !in.progress["step"].is_number_integer() ||
      in.progress["step"].get<int64_t>() < 0)
    return Internal(what + ": the progress has no step");
  const uint64_t step = in.progress["step"].get<uint64_t>();
  const train::OptimizerState trainer = in.optimizer->State();
  if (in.optimizer->sharded() && trainer.steps > 0 && trainer.tensors.empty())
    return FailedPrecondition(what + ": the optimizer's sharded state was not gathered for this step (GatherState)");
  TANDEM_ASSIGN_OR_RETURN(checkpoint::PendingCheckpoint pending, writer.Begin(step, step), what);
  TANDEM_RETURN_IF_ERROR(pending.AddDirectory(kModelDir,
                                              [&](const std::string& dir) -> Status {
                                                TANDEM_RETURN_IF_ERROR(model::SavePretrained(*in.model, dir));
                                                return in.write_tokenizer(dir);
                                              }),
                         what);
  const std::map<std::string, at::Tensor> rng = train::SaveRngStates(in.model->device());
  TANDEM_RETURN_IF_ERROR(pending.AddWrittenFile(kTrainerTensors,
                                                [&](const std::string& path) {
                                                  return WriteTrainerTensors(path, trainer, rng);
                                                }),
                         what);
  const nlohmann::json state = {{"progress", in.progress}, {"run", in.fingerprint}};
  TANDEM_RETURN_IF_ERROR(pending.AddFile(kTrainerState, DumpJson(state, 2) + "\n"), what);
  for (const auto& [name, content] : in.files) TANDEM_RETURN_IF_ERROR(pending.AddFile(name, content), what);
  return pending.Commit({{"kind", in.kind}});
}

StatusOr<std::optional<RestoredTrainingCheckpoint>> RestoreLatestTrainingCheckpoint(const std::string& root,
                                                                                    const TrainingCheckpointTarget& t) {
  RestoredTrainingCheckpoint out;
  StatusOr<checkpoint::ValidCheckpoint> found =
      checkpoint::FindLatestCheckpoint(root, checkpoint::Verify::kDigests, &out.skipped);
  if (!found.ok()) {
    if (found.status().code() == StatusCode::kNotFound && out.skipped.empty())
      return std::optional<RestoredTrainingCheckpoint>();
    return FailedPrecondition(t.what + ": " + found.status().message());
  }
  out.path = found->path;
  const std::string where = t.what + " from " + out.path;

  // Read and check everything before the first write into the run.
  TANDEM_ASSIGN_OR_RETURN(const nlohmann::json state, ReadJsonObjectFile((fs::path(out.path) / kTrainerState).string()), where);
  if (!state.contains("run") || !state.contains("progress") || !state["progress"].is_object())
    return InvalidArgument(where + ": " + kTrainerState + " needs \"run\" and a \"progress\" object");
  if (state["run"] != t.fingerprint)
    return FailedPrecondition(where + ": written by another run: " + FingerprintDifferences(state["run"], t.fingerprint));
  const nlohmann::json& progress = state["progress"];
  if (!progress.contains("step") || !progress["step"].is_number_integer() || progress["step"].get<int64_t>() < 0 ||
      progress["step"].get<uint64_t>() != found->manifest.step)
    return InvalidArgument(where + ": " + kTrainerState + " progress.step is not the manifest's step " +
                           std::to_string(found->manifest.step));
  out.step = progress["step"].get<int64_t>();
  TANDEM_RETURN_IF_ERROR(t.read_progress(progress), where + ": " + kTrainerState);
  TANDEM_ASSIGN_OR_RETURN(TrainerTensors tensors, ReadTrainerTensors((fs::path(out.path) / kTrainerTensors).string()),
                          where);
  // The optimizer's own count: the step, unless the progress says otherwise
  // (the actor's, whose steps with every group dropped make no update).
  int64_t optimizer_steps = out.step;
  if (progress.contains("optimizer_steps")) {
    const nlohmann::json& n = progress["optimizer_steps"];
    if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() > out.step)
      return InvalidArgument(where + ": " + kTrainerState + " progress.optimizer_steps is not an integer in [0, step]");
    optimizer_steps = n.get<int64_t>();
  }
  if (tensors.trainer.steps != optimizer_steps)
    return InvalidArgument(where + ": " + kTrainerTensors + " holds the optimizer of step " +
                           std::to_string(tensors.trainer.steps) + ", not " + std::to_string(optimizer_steps));
  TANDEM_ASSIGN_OR_RETURN(const model::SafetensorsCheckpoint weights,
                          model::SafetensorsCheckpoint::Open((fs::path(out.path) / kModelDir).string()), where);

  TANDEM_RETURN_IF_ERROR(model::LoadWeights(*t.model, weights), where);
  TANDEM_RETURN_IF_ERROR(t.optimizer->Restore(tensors.trainer), where);
  TANDEM_RETURN_IF_ERROR(train::RestoreRngStates(tensors.rng, t.device), where);
  return std::optional<RestoredTrainingCheckpoint>(std::move(out));
}

}  // namespace tandem::roles
