// The sft loop: data, tokenizer, model, trainer, greedy eval, logs, save
// (sft_role.h).
#include "workers/roles/sft_role.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "common/bounded_json.h"
#include "common/log.h"
#include "kernels/common/parallel_for.h"
#include "workers/checkpoint/checkpoint_fs.h"
#include "workers/data/byte_tokenizer.h"
#include "workers/data/chat_template.h"
#include "workers/data/prefix_dataset.h"
#include "workers/data/problem_stream.h"
#include "workers/data/tokenizer.h"
#include "workers/inference/greedy.h"
#include "workers/model/checkpoint.h"
#include "workers/roles/json_log.h"
#include "workers/roles/sft_checkpoint.h"
#include "workers/roles/sft_eval.h"
#include "workers/roles/problem_tokens.h"
#include "workers/roles/sft_presets.h"
#include "workers/train/sft_example.h"
#include "workers/train/sft_trainer.h"

namespace tandem::roles {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

Status CheckOptions(const SftOptions& o) {
  if (o.out_dir.empty()) return InvalidArgument("sft: --out is required");
  if (o.max_steps <= 0 && o.time_limit_s <= 0) return InvalidArgument("sft: give --max-steps or --time-limit (or both)");
  if (o.max_steps < 0 || o.time_limit_s < 0) return InvalidArgument("sft: limits must be non-negative");
  if (o.batch_size < 1) return InvalidArgument("sft: --batch-size must be positive");
  if (o.eval_problems < 0 || o.eval_every < 0 || o.log_every < 1 || o.eval_max_new_tokens < 1)
    return InvalidArgument("sft: --eval-problems and --eval-every must be >= 0, --log-every and --eval-max-new-tokens > 0");
  if (o.max_prompt_tokens < 1 || o.max_sequence_tokens < 2) return InvalidArgument("sft: token limits must be positive");
  if (o.device != "cpu" && o.device != "cuda") return InvalidArgument("sft: --device must be cpu or cuda");
  if (o.checkpoint_every < 0 || o.stop_at_step < 0 || o.keep_checkpoints < 1)
    return InvalidArgument("sft: --checkpoint-every and --stop-at-step must be >= 0, --keep-checkpoints > 0");
  if (o.checkpoint_dir.empty() && (o.resume || o.checkpoint_every > 0 || o.stop_at_step > 0))
    return InvalidArgument("sft: --resume, --checkpoint-every and --stop-at-step need --checkpoint-dir");
  return Status::Ok();
}

StatusOr<model::ModelConfig> FromScratchConfig(const SftOptions& o, int64_t vocab_size) {
  TANDEM_ASSIGN_OR_RETURN(model::ModelConfig c, SftPreset(o.preset, vocab_size), "sft");
  if (o.hidden_size) c.hidden_size = *o.hidden_size;
  if (o.num_layers) c.num_hidden_layers = *o.num_layers;
  if (o.num_heads) c.num_attention_heads = *o.num_heads;
  if (o.num_kv_heads) c.num_key_value_heads = *o.num_kv_heads;
  if (o.head_dim) c.head_dim = *o.head_dim;
  if (o.intermediate_size) c.intermediate_size = *o.intermediate_size;
  TANDEM_RETURN_IF_ERROR(model::ValidateModelConfig(c), "sft: model config");
  return c;
}

Status CopyFile(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) return Internal("copy " + from.string() + " to " + to.string() + ": " + ec.message());
  return Status::Ok();
}

Status WriteText(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f.flush()) return ErrnoStatus("write " + tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Internal("rename " + tmp.string() + ": " + ec.message());
  return Status::Ok();
}

// The tokenizer's files of a saved model: the byte-level tokenizer of a run
// from scratch, else --init's files.
Status SaveTokenizer(const SftOptions& o, const std::string& dir) {
  if (o.init_dir.empty()) return data::WriteByteTokenizer(dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    if (fs::exists(fs::path(o.init_dir) / f)) TANDEM_RETURN_IF_ERROR(CopyFile(fs::path(o.init_dir) / f, fs::path(dir) / f));
  return Status::Ok();
}

// What a reused --out must have been made with: the run's fingerprint and
// its time limit.
nlohmann::json OutRecipe(const SftOptions& o) {
  nlohmann::json r = SftRunFingerprint(o);
  r["time_limit_s"] = o.time_limit_s;
  return r;
}

// --reuse-out: the saved model when --out holds one made with this recipe
// (its trainer_state.json names it), else nullopt with the reason logged.
std::optional<SftResult> ReusableOut(const SftOptions& o, const JsonLog& json_log) {
  const fs::path state_path = fs::path(o.out_dir) / "trainer_state.json";
  std::error_code ec;
  if (!fs::exists(state_path, ec)) return std::nullopt;
  auto remake = [&](const std::string& why) -> std::optional<SftResult> {
    tandem::log::Info("sft", "{}: not reused ({}); training anew", o.out_dir, why);
    return std::nullopt;
  };
  StatusOr<nlohmann::json> state = ReadJsonObjectFile(state_path.string());
  if (!state.ok()) return remake(state.status().message());
  const nlohmann::json recipe = OutRecipe(o);
  if (!state->contains("recipe")) return remake("its trainer_state.json has no recipe");
  if ((*state)["recipe"] != recipe) return remake("made with other options: " + FingerprintDifferences((*state)["recipe"], recipe));
  if (!fs::exists(fs::path(o.out_dir) / "config.json", ec)) return remake("no config.json");
  SftResult r;
  r.out_dir = o.out_dir;
  r.reused = true;
  const nlohmann::json& step = (*state)["step"];
  const nlohmann::json& accuracy = (*state)["accuracy"];
  if (step.is_number_integer()) r.steps = step.get<int64_t>();
  if (accuracy.is_number()) r.accuracy_after = accuracy.get<double>();
  json_log.Write({{"event", "reused"}, {"dir", o.out_dir}, {"steps", r.steps}, {"accuracy_after", r.accuracy_after}});
  return r;
}

// Moves the finished directory `staged` to `out` in one rename: an existing
// `out` is swapped out (renameat2 RENAME_EXCHANGE) and then removed, so a
// reader sees the old model or the new one, never a mix or a half.
Status CommitOut(const std::string& staged, const std::string& out) {
  std::error_code ec;
  const bool exists = fs::exists(out, ec);
  if (exists) {
    if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) != 0)
      return checkpoint::FsError("exchange " + staged + " with " + out, errno);
    TANDEM_RETURN_IF_ERROR(checkpoint::RemoveTree(staged), "sft: remove the previous " + out);
  } else if (::rename(staged.c_str(), out.c_str()) != 0) {
    return checkpoint::FsError("rename " + staged + " to " + out, errno);
  }
  return checkpoint::FsyncDir(fs::absolute(out).parent_path().string());
}
}  // namespace

StatusOr<SftHeldOut> SftHeldOutProblems(const SftOptions& o, const data::Dataset& train,
                                        const data::PromptLengthLimit& limit) {
  SftHeldOut out;
  const size_t want = static_cast<size_t>(o.eval_problems);
  auto take = [&](const data::Dataset& d, size_t from, size_t to) -> Status {
    for (size_t i = from; i < to && out.problems.size() < want; ++i) {
      TANDEM_ASSIGN_OR_RETURN(data::Problem p, d.Get(i));
      if (limit.Admits(p)) out.problems.push_back(std::move(p));
    }
    return Status::Ok();
  };
  if (!o.eval_options.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<data::Dataset> eval, data::OpenDataset(o.dataset, o.eval_options),
                            "sft: eval data set");
    TANDEM_RETURN_IF_ERROR(take(*eval, 0, eval->size().value_or(want * 4)));
    out.train_size = train.size();
  } else if (!train.size()) {
    nlohmann::json eo = o.dataset_options.is_null() ? nlohmann::json::object() : o.dataset_options;
    uint64_t seed = 0;
    if (eo.contains("seed") && eo["seed"].is_number_integer() && eo["seed"].get<int64_t>() >= 0)
      seed = eo["seed"].get<uint64_t>();
    eo["seed"] = seed + 1;
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<data::Dataset> eval, data::OpenDataset(o.dataset, eo), "sft: eval data set");
    TANDEM_RETURN_IF_ERROR(take(*eval, 0, want * 4));
  } else {
    const size_t n = *train.size();
    if (n <= want)
      return InvalidArgument("sft: " + std::string(train.name()) + " has " + std::to_string(n) +
                             " problems, not more than --eval-problems " + std::to_string(want) +
                             " (hold out fewer or give --eval-options)");
    out.train_size = n - want;
    TANDEM_RETURN_IF_ERROR(take(train, n - want, n));
  }
  return out;
}

StatusOr<SftResult> RunSft(const SftOptions& o) {
  TANDEM_RETURN_IF_ERROR(CheckOptions(o));
  if (o.threads > 0) {
    at::set_num_threads(o.threads);
    kernels::SetParallelForThreads(o.threads);  // the CPU kernels' loops too
  }
  TANDEM_ASSIGN_OR_RETURN(const JsonLog log, JsonLog::Open(o.log_path), "sft");
  if (o.reuse_out)
    if (std::optional<SftResult> reused = ReusableOut(o, log)) return std::move(*reused);
  const Clock::time_point t_start = Clock::now();

  // Tokenizer and chat format.
  std::optional<data::Tokenizer> tok;
  if (o.init_dir.empty()) {
    TANDEM_ASSIGN_OR_RETURN(const data::TokenizerFiles files, data::ByteTokenizerFiles(), "sft: byte tokenizer");
    TANDEM_ASSIGN_OR_RETURN(data::Tokenizer t, data::Tokenizer::FromJson(files.tokenizer_json, files.tokenizer_config_json),
                            "sft: byte tokenizer");
    tok.emplace(std::move(t));
  } else {
    TANDEM_ASSIGN_OR_RETURN(data::Tokenizer t, data::Tokenizer::FromDirectory(o.init_dir), "sft: --init tokenizer");
    tok.emplace(std::move(t));
  }
  TANDEM_ASSIGN_OR_RETURN(const data::ChatFormat format, data::ChatFormatFor(*tok), "sft: chat format");
  std::optional<data::TokenId> end = tok->special_tokens().eos;
  if (!end && format.kind == data::ChatFormat::Kind::kChatMl) end = tok->TokenToId("<|im_end|>");
  if (!end) return FailedPrecondition("sft: the tokenizer names no eos token (tokenizer_config.json eos_token)");

  // Data.
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<data::Dataset> train, data::OpenDataset(o.dataset, o.dataset_options), "sft");
  const data::PromptLengthLimit limit{
      [&tok, &format](const data::Problem& p) { return PromptTokensOffering(*tok, format, p, p.tools); },
      static_cast<size_t>(o.max_prompt_tokens)};
  TANDEM_ASSIGN_OR_RETURN(const SftHeldOut held, SftHeldOutProblems(o, *train, limit));
  const std::unique_ptr<data::PrefixDataset> prefix = data::TrainingPrefix(*train, held.train_size);
  const data::Dataset& train_view = prefix ? *prefix : *train;
  TANDEM_ASSIGN_OR_RETURN(data::ProblemStream stream, data::ProblemStream::Create(train_view, o.seed, limit), "sft");

  // Model.
  const bool cuda = o.device == "cuda";
  const at::Device device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const at::ScalarType dtype = cuda ? at::kBFloat16 : at::kFloat;
  std::unique_ptr<model::Transformer> net;
  if (o.init_dir.empty()) {
    TANDEM_ASSIGN_OR_RETURN(const model::ModelConfig config, FromScratchConfig(o, tok->vocab_size()));
    TANDEM_ASSIGN_OR_RETURN(net, model::Transformer::Create(config, device, dtype), "sft: model");
    net->InitRandom(o.seed);
  } else {
    TANDEM_ASSIGN_OR_RETURN(net, model::LoadPretrained(o.init_dir, device, dtype), "sft: --init");
  }
  if (tok->vocab_size() > net->config().vocab_size)
    return InvalidArgument("sft: the tokenizer has " + std::to_string(tok->vocab_size()) + " tokens, the model's vocab_size is " +
                           std::to_string(net->config().vocab_size));

  train::SftTrainerOptions topts;
  topts.schedule = {o.lr, o.warmup_steps, o.final_lr_ratio};
  TANDEM_ASSIGN_OR_RETURN(topts.optimizer,
                          train::ChooseOptimizer(o.optimizer.name, o.optimizer.muon_lr_scale, o.optimizer.residency,
                                                 o.optimizer.slots, o.optimizer.slot_mib, o.weight_decay,
                                                 o.max_grad_norm),
                          "sft");
  tandem::log::Info("sft", "optimizer: {}", train::Describe(topts.optimizer));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<train::SftTrainer> trainer, train::SftTrainer::Create(*net, topts), "sft");

  SftResult result;
  result.parameters = net->config().NumParameters();
  SftProgress progress;
  progress.cursor = stream.cursor();
  const nlohmann::json fingerprint = SftRunFingerprint(o);
  at::manual_seed(o.seed);  // the default generators, whatever ran before in this process (a resume sets them again)
  if (o.resume) {
    TANDEM_ASSIGN_OR_RETURN(const std::optional<RestoredSftCheckpoint> restored,
                            RestoreLatestSftCheckpoint(o.checkpoint_dir, fingerprint, *net, *trainer, device));
    if (restored) {
      progress = restored->progress;
      result.resumed_from = progress.step;
      TANDEM_ASSIGN_OR_RETURN(stream, data::ProblemStream::Create(train_view, o.seed, limit, progress.cursor),
                              "sft --resume: sampler cursor");
      nlohmann::json skipped = nlohmann::json::array();
      for (const checkpoint::SkippedCheckpoint& k : restored->skipped)
        skipped.push_back({{"dir", k.path}, {"why", k.why.message()}});
      log.Write({{"event", "resumed"}, {"step", progress.step}, {"dir", restored->path}, {"skipped", skipped}});
    }
  }
  std::optional<checkpoint::CheckpointWriter> writer;
  if (!o.checkpoint_dir.empty()) {
    TANDEM_ASSIGN_OR_RETURN(checkpoint::CheckpointWriter w,
                            checkpoint::CheckpointWriter::Open(
                                o.checkpoint_dir, {static_cast<size_t>(o.keep_checkpoints), /*sole_writer=*/true}),
                            "sft: --checkpoint-dir");
    writer.emplace(std::move(w));
  }
  auto write_tokenizer = [&o](const std::string& dir) { return SaveTokenizer(o, dir); };

  log.Write({{"event", "start"},
             {"params", result.parameters},
             {"config", model::ToHfJson(net->config())},
             {"dataset", o.dataset},
             {"eligible", stream.eligible() ? nlohmann::json(*stream.eligible()) : nlohmann::json("unbounded")},
             {"eval_problems", held.problems.size()},
             {"device", o.device},
             {"step", progress.step}});

  inference::GreedyOptions gopts;
  gopts.max_new_tokens = o.eval_max_new_tokens;
  gopts.stop_tokens = {*end};
  auto evaluate = [&](int64_t step) -> StatusOr<EvalResult> {
    TANDEM_ASSIGN_OR_RETURN(EvalResult r, EvaluateGreedy(*net, *tok, format, held.problems, train->verifier(), gopts),
                            "sft eval at step " + std::to_string(step));
    log.Write({{"event", "eval"},
               {"step", step},
               {"accuracy", r.accuracy()},
               {"correct", r.correct},
               {"problems", r.total},
               {"sample", r.responses.empty() ? "" : r.responses.front()}});
    return r;
  };

  if (result.resumed_from < 0) {
    TANDEM_ASSIGN_OR_RETURN(const EvalResult before, evaluate(0));
    progress.accuracy_before = before.accuracy();
  }
  result.accuracy_before = progress.accuracy_before;

  // The time limit's clock counts the time before a resume too.
  const Clock::time_point t_train = Clock::now();
  const double elapsed_before = progress.elapsed_seconds;
  auto elapsed = [&] { return elapsed_before + std::chrono::duration<double>(Clock::now() - t_train).count(); };
  int64_t last_checkpoint_step = result.resumed_from;
  auto save_checkpoint = [&]() -> Status {
    if (!writer || last_checkpoint_step == progress.step) return Status::Ok();
    progress.cursor = stream.cursor();
    progress.elapsed_seconds = elapsed();
    const Clock::time_point c0 = Clock::now();
    TANDEM_ASSIGN_OR_RETURN(const checkpoint::CommittedCheckpoint c,
                            SaveSftCheckpoint(*writer, {net.get(), trainer.get(), progress, fingerprint, write_tokenizer}));
    uint64_t bytes = 0;
    for (const checkpoint::ManifestFile& f : c.manifest.files) bytes += f.bytes;
    log.Write({{"event", "checkpoint"},
               {"step", progress.step},
               {"dir", c.path},
               {"bytes", bytes},
               {"seconds", std::chrono::duration<double>(Clock::now() - c0).count()}});
    last_checkpoint_step = progress.step;
    result.last_checkpoint = c.path;
    return Status::Ok();
  };

  std::optional<EvalResult> last_eval;
  int64_t last_eval_step = -1;
  for (;;) {
    if (o.max_steps > 0 && progress.step >= o.max_steps) break;
    if (o.time_limit_s > 0 && elapsed() >= o.time_limit_s) break;
    if (o.stop_at_step > 0 && progress.step >= o.stop_at_step) {
      TANDEM_RETURN_IF_ERROR(save_checkpoint());
      result.stopped = true;
      result.steps = progress.step;
      result.first_loss = progress.first_loss;
      result.last_loss = progress.last_loss;
      result.train_seconds = progress.train_seconds;
      log.Write({{"event", "stopped"}, {"step", progress.step}, {"checkpoint", result.last_checkpoint}});
      return result;
    }
    std::vector<train::SftExample> batch;
    for (int64_t draws = 0; static_cast<int64_t>(batch.size()) < o.batch_size; ++draws) {
      if (draws >= 10 * o.batch_size + 100)
        return FailedPrecondition("sft: no example within --max-sequence-tokens " + std::to_string(o.max_sequence_tokens) +
                                  " in " + std::to_string(draws) + " draws");
      TANDEM_ASSIGN_OR_RETURN(const data::Problem p, stream.Next(), "sft");
      TANDEM_ASSIGN_OR_RETURN(train::SftExample ex, ProblemSftExample(*tok, format, p, *end), "sft");
      if (static_cast<int64_t>(ex.ids.size()) <= o.max_sequence_tokens) batch.push_back(std::move(ex));
    }
    double schedule = 0;
    if (o.max_steps > 0) schedule = static_cast<double>(progress.step) / static_cast<double>(o.max_steps);
    if (o.time_limit_s > 0) schedule = std::max(schedule, elapsed() / o.time_limit_s);
    const Clock::time_point s0 = Clock::now();
    TANDEM_ASSIGN_OR_RETURN(const train::SftStepStats st, trainer->Step(batch, schedule), "sft");
    const double dt = std::chrono::duration<double>(Clock::now() - s0).count();
    const int64_t step = ++progress.step;
    progress.train_seconds += dt;
    progress.window_seconds += dt;
    progress.window_loss += st.loss;
    ++progress.window_steps;
    progress.window_tokens += st.sequence_tokens;
    progress.window_response_tokens += st.response_tokens;
    progress.total_tokens += st.sequence_tokens;
    if (step % o.log_every == 0) {
      const double mean = progress.window_loss / static_cast<double>(progress.window_steps);
      if (!progress.logged_a_window) progress.first_loss = mean;
      progress.logged_a_window = true;
      progress.last_loss = mean;
      log.Write({{"event", "step"},
                 {"step", step},
                 {"loss", mean},
                 {"lr", st.lr},
                 {"grad_norm", st.grad_norm},
                 {"tokens_per_s", static_cast<double>(progress.window_tokens) / progress.window_seconds},
                 {"response_tokens_per_s", static_cast<double>(progress.window_response_tokens) / progress.window_seconds},
                 {"packed_tokens", st.packed_tokens},
                 {"elapsed_s", elapsed()}});
      progress.window_seconds = progress.window_loss = 0;
      progress.window_steps = progress.window_tokens = progress.window_response_tokens = 0;
    }
    if (o.eval_every > 0 && step % o.eval_every == 0) {
      TANDEM_ASSIGN_OR_RETURN(EvalResult r, evaluate(step));
      last_eval = std::move(r);
      last_eval_step = step;
    }
    if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) TANDEM_RETURN_IF_ERROR(save_checkpoint());
  }
  const int64_t step = progress.step;
  result.first_loss = progress.first_loss;
  result.last_loss = progress.last_loss;
  if (progress.window_steps > 0) {
    const double mean = progress.window_loss / static_cast<double>(progress.window_steps);
    if (!progress.logged_a_window) result.first_loss = mean;
    result.last_loss = mean;
  }
  TANDEM_RETURN_IF_ERROR(save_checkpoint());
  if (!last_eval || last_eval_step != step) {
    TANDEM_ASSIGN_OR_RETURN(EvalResult r, evaluate(step));
    last_eval = std::move(r);
  }
  result.steps = step;
  result.accuracy_after = last_eval->accuracy();
  result.final_responses = last_eval->responses;
  result.train_seconds = progress.train_seconds;
  result.tokens_per_s =
      progress.train_seconds > 0 ? static_cast<double>(progress.total_tokens) / progress.train_seconds : 0;

  // Save the HF directory: staged beside --out, then renamed into place.
  result.out_dir = o.out_dir;
  const fs::path out_path = fs::absolute(o.out_dir).lexically_normal();
  const std::string staged =
      (out_path.parent_path() / ("." + out_path.filename().string() + ".partial-" + std::to_string(::getpid()))).string();
  std::error_code ec;
  fs::create_directories(out_path.parent_path(), ec);
  if (ec) return Internal("sft: create " + out_path.parent_path().string() + ": " + ec.message());
  TANDEM_RETURN_IF_ERROR(checkpoint::RemoveTree(staged), "sft");
  TANDEM_RETURN_IF_ERROR(model::SavePretrained(*net, staged), "sft: save");
  TANDEM_RETURN_IF_ERROR(SaveTokenizer(o, staged), "sft: save tokenizer");
  const nlohmann::json state = {{"step", step},
                                {"dataset", o.dataset},
                                {"dataset_options", o.dataset_options},
                                {"sampler_cursor", data::SamplerCursorToJson(stream.cursor())},
                                {"accuracy", result.accuracy_after},
                                {"loss", result.last_loss},
                                {"recipe", OutRecipe(o)}};
  TANDEM_RETURN_IF_ERROR(WriteText(fs::path(staged) / "trainer_state.json", DumpJson(state, 2) + "\n"), "sft");
  TANDEM_RETURN_IF_ERROR(checkpoint::FsyncDir(staged), "sft");
  TANDEM_RETURN_IF_ERROR(CommitOut(staged, out_path.string()), "sft: save");
  result.elapsed_seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  log.Write({{"event", "saved"}, {"dir", o.out_dir}, {"steps", step}, {"elapsed_s", result.elapsed_seconds},
             {"accuracy_before", result.accuracy_before}, {"accuracy_after", result.accuracy_after},
             {"tokens_per_s", result.tokens_per_s}});
  return result;
}

}  // namespace tandem::roles
