// The actor: GRPO steps driven as the job's controller (actor_role.h).
#include "workers/roles/actor_role.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/log.h"
#include "kernels/common/parallel_for.h"
#include "workers/checkpoint/checkpoint_writer.h"
#include "workers/data/chat_template.h"
#include "workers/data/prefix_dataset.h"
#include "workers/data/problem_stream.h"
#include "workers/data/tokenizer.h"
#include "workers/model/checkpoint.h"
#include "workers/rl/algorithm_registry.h"
#include "workers/roles/actor_checkpoint.h"
#include "workers/roles/actor_episodes.h"
#include "workers/roles/actor_replicas.h"
#include "workers/roles/actor_rollouts.h"
#include "workers/roles/actor_tags.h"
#include "workers/roles/actor_teachers.h"
#include "workers/roles/json_log.h"
#include "workers/roles/model_wait.h"
#include "workers/roles/objectives.h"
#include "workers/roles/port_file.h"
#include "workers/roles/problem_tokens.h"
#include "workers/roles/rollout_client.h"
#include "workers/roles/sft_role.h"
#include "workers/runtime/control_client.h"
#include "workers/train/grpo_trainer.h"
#include "workers/train/sft_example.h"
#include "workers/weights/file_transport.h"
#include "workers/weights/ipc_transport.h"
#include "workers/weights/nccl_transport.h"
#include "workers/weights/shm_transport.h"

namespace tandem::roles {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

Status CheckOptions(const ActorOptions& o) {
  if (o.model_dir.empty()) return InvalidArgument("actor: --model is required");
  if (o.steps < 0 || o.prompts_per_step < 1 || o.group_size < 1 || o.max_new_tokens < 1 || o.rollouts < 1)
    return InvalidArgument("actor: --steps must be >= 0; --prompts-per-step, --group-size, --max-new-tokens and --rollouts > 0");
  if (!(o.temperature >= 0) || !(o.lr > 0) || o.eval_every < 0 || o.eval_problems < 0 || o.micro_batch_tokens < 0)
    return InvalidArgument("actor: --temperature >= 0, --lr > 0, --eval-every, --eval-problems and --micro-batch-tokens >= 0");
  if (!(o.request_timeout_s > 0) || !(o.phase_timeout_s > 0))
    return InvalidArgument("actor: timeouts must be positive");
  if (o.checkpoint_every < 0 || o.keep_checkpoints < 1)
    return InvalidArgument("actor: --checkpoint-every must be >= 0, --keep-checkpoints > 0");
  if (o.checkpoint_dir.empty() && o.checkpoint_every > 0)
    return InvalidArgument("actor: --checkpoint-every needs --checkpoint-dir");
  if (o.device != "cpu" && o.device != "cuda") return InvalidArgument("actor: --device must be cpu or cuda");
  if (o.weights_transport != "shm" && o.weights_transport != "cuda-ipc" && o.weights_transport != "nccl")
    return InvalidArgument("actor: --weights-transport must be shm, cuda-ipc or nccl, got " + o.weights_transport);
  if (o.weights_transport == "cuda-ipc" && o.device != "cuda")
    return InvalidArgument("actor: --weights-transport cuda-ipc exports the parameters' GPU memory: it needs --device cuda");
  if (!o.workflow.is_null()) TANDEM_RETURN_IF_ERROR(CheckEpisodeOptions(o));
  return Status::Ok();
}

// --weights-transport nccl: the publisher's store on a leased port (the
// second when the first is the data-parallel rendezvous), its broadcasts
// bounded by --phase-timeout.
StatusOr<std::unique_ptr<weights::WeightPublisher>> StartNcclPublisher(const ActorOptions& o, bool data_parallel) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<int> ports, LeasedPorts(), "actor");
  const size_t index = data_parallel ? 1 : 0;
  if (ports.size() <= index)
    return InvalidArgument("actor: --weights-transport nccl serves the rollouts on a leased port: give the actor role "
                           "\"ports\": " + std::to_string(index + 1) +
                           (data_parallel ? " (the first is the replicas' rendezvous)" : ""));
  weights::NcclOptions n;
  n.host = o.weights_host;
  n.port = ports[index];
  n.readers = static_cast<uint32_t>(o.rollouts);
  n.connect_timeout = Millis(o.phase_timeout_s);
  n.timeout = Millis(o.phase_timeout_s);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<weights::NcclPublisher> p, weights::NcclPublisher::Create(n), "actor");
  log::Info("actor", "weights to {} rollouts over nccl: store {}:{}", n.readers, n.host, n.port);
  return std::unique_ptr<weights::WeightPublisher>(std::move(p));
}

// What every replica builds: the model, the KL term's reference, the trainer.
struct ActorModel {
  at::Device device = at::kCPU;
  std::unique_ptr<model::Transformer> net, reference;
  std::unique_ptr<train::GrpoTrainer> trainer;
  int64_t distill_top_k = 0;  // the teachers' top-k tokens per position the distill loss needs
};

// The run's objectives: --objectives, or one rl objective over --dataset.
StatusOr<Objectives> ActorObjectives(const ActorOptions& o) {
  if (o.objectives.is_null()) return SingleObjective(o.dataset, o.dataset_options, o.eval_options);
  return ParseObjectives(o.objectives, "actor: --objectives");
}

StatusOr<ActorModel> BuildActorModel(const ActorOptions& o, const Objectives& objectives, collective::Group* dp) {
  ActorModel m;
  const bool cuda = o.device == "cuda";
  m.device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const at::ScalarType dtype = cuda ? at::kBFloat16 : at::kFloat;
  TANDEM_ASSIGN_OR_RETURN(m.net, model::LoadPretrained(o.model_dir, m.device, dtype), "actor: --model");
  const rl::AlgorithmRegistry registry = rl::AlgorithmRegistry::WithBuiltins();
  TANDEM_ASSIGN_OR_RETURN(rl::Algorithm algorithm, registry.Resolve(o.algorithm), "actor: --algorithm");
  TANDEM_ASSIGN_OR_RETURN(algorithm.config, rl::WithJobLimits(algorithm.config, o.max_new_tokens), "actor: --algorithm");
  if (objectives.any_teacher() && !algorithm.config.distill)
    return InvalidArgument("actor: --objectives names teachers, and --algorithm " + algorithm.name +
                           " has no distill term (use mopd, or give it options.distill)");
  if (algorithm.config.distill && !objectives.any_teacher())
    return InvalidArgument("actor: --algorithm " + algorithm.name +
                           " has a distill term, and no objective names a teacher (--objectives, docs/mopd.md)");
  if (algorithm.config.loss.kl_coef > 0) {  // the starting model
    TANDEM_ASSIGN_OR_RETURN(m.reference, model::LoadPretrained(o.model_dir, m.device, dtype), "actor: the reference model");
  }
  train::GrpoTrainerOptions topts;
  topts.algorithm = algorithm;
  topts.reference = m.reference.get();
  topts.schedule = {o.lr, o.warmup_steps, o.final_lr_ratio};
  TANDEM_ASSIGN_OR_RETURN(topts.optimizer,
                          train::ChooseOptimizer(o.optimizer.name, o.optimizer.muon_lr_scale, o.optimizer.residency,
                                                 o.optimizer.slots, o.optimizer.slot_mib, o.weight_decay,
                                                 o.max_grad_norm),
                          "actor");
  topts.optimizer.shard_state = o.optimizer_shard;
  log::Info("actor", "optimizer: {}", train::Describe(topts.optimizer));
  topts.micro_batch_tokens = o.micro_batch_tokens;
  topts.tree_packing = o.tree_packing;
  topts.temperature = o.temperature > 0 ? o.temperature : 1.0;
  topts.data_parallel = dp;
  topts.teachers = static_cast<int64_t>(objectives.teachers.size());
  TANDEM_ASSIGN_OR_RETURN(m.trainer, train::GrpoTrainer::Create(*m.net, topts), "actor");
  if (algorithm.config.distill) m.distill_top_k = algorithm.config.distill->top_k;
  return m;
}

// One objective's data (objectives.h): its data set (and verifier), its
// held-out problems, the part of it prompts are drawn from.
struct ObjectiveData {
  std::unique_ptr<data::Dataset> train;
  SftHeldOut held;
  std::unique_ptr<data::PrefixDataset> prefix;  // the training prefix of a bounded set
  const data::Dataset& prompts() const { return prefix ? *prefix : *train; }
};

// Held-out accuracy: over every objective's problems, and per objective;
// with a workflow, its episode metrics too (AddEpisodeMetrics).
struct EvalResult {
  double accuracy = 0;
  std::vector<double> per_objective;
  json episodes = json::object();
};

// The held-out accuracies as metrics ("eval/accuracy", and per objective
// "eval/<name>/accuracy" when there are several).
void AddEval(const EvalResult& e, const Objectives& objectives, int64_t problems, json& m) {
  m["eval/accuracy"] = e.accuracy;
  m["eval/problems"] = problems;
  m.update(e.episodes);
  if (objectives.list.size() > 1)
    for (size_t i = 0; i < objectives.list.size(); ++i)
      m["eval/" + objectives.list[i].name + "/accuracy"] = e.per_objective[i];
}

// The handoff's commands that every replica answers alike (its memory: the
// optimizer tag); publish_weights is rank 0's.
void OnHandoffCommands(control::ControlClient& client, ActorTags& tag) {
  auto ack = [](const control::Command&) -> StatusOr<json> { return json::object(); };
  client.On("pause", ack);
  client.On("continue", ack);
  tag.Serve(client);
  client.On("load_weights", [](const control::Command&) -> StatusOr<json> {
    return FailedPrecondition("the actor publishes weights; it does not load them");
  });
}

// A replica other than rank 0 (actor_replicas.h): tandemd is served on a
// thread of its own, the main thread trains what rank 0 deals it.
class ReplicaControl {
 public:
  ReplicaControl(const control::Endpoint& endpoint, const control::Hello& hello, ActorTags& tag) {
    control::ControlClient::Options co;
    co.endpoint = endpoint;
    co.hello = hello;
    tag.Declare(co);
    client_ = std::make_unique<control::ControlClient>(co);
    OnHandoffCommands(*client_, tag);
    client_->On("publish_weights", [](const control::Command& c) -> StatusOr<json> {
      TANDEM_ASSIGN_OR_RETURN(const int64_t version, c.Version());
      return json{{"version", version}, {"replica", true}};  // no source: rank 0's segment is loaded
    });
  }
  ~ReplicaControl() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  Status Start() {
    TANDEM_RETURN_IF_ERROR(client_->Connect(), "actor: tandemd");
    thread_ = std::thread([this] { Serve(); });
    return Status::Ok();
  }

 private:
  void Serve() {
    while (!stop_) {
      if (!client_->connected()) {
        if (client_->Connect(std::chrono::seconds(1)).ok()) log::Info("actor", "connected to tandemd again");
        continue;
      }
      StatusOr<bool> r = client_->ServeOnce(std::chrono::milliseconds(200));
      if (r.ok() && *r) log::Info("actor", "tandemd asked this replica to shut down; it ends with rank 0");
    }
  }
  std::unique_ptr<control::ControlClient> client_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

StatusOr<ActorResult> RunReplica(const ActorOptions& o, const control::Endpoint& endpoint, const control::Hello& hello) {
  // tandemd once the optimizer exists (its tag is in the hello): until
  // then the group refuses rank 0's phases as `unavailable` (waiting for
  // this hello), which rank 0 asks again.
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<collective::Group> group, JoinActorReplicas(o, hello));
  collective::Group& dp = *group;
  TANDEM_ASSIGN_OR_RETURN(const Objectives objectives, ActorObjectives(o));
  TANDEM_ASSIGN_OR_RETURN(ActorModel m, BuildActorModel(o, objectives, &dp));
  ActorTags tag(m.trainer->optimizer(), o.optimizer.residency == "staged");
  ReplicaControl control(endpoint, hello, tag);
  TANDEM_RETURN_IF_ERROR(control.Start());
  const std::string who = "actor replica " + std::to_string(dp.rank());
  auto next = [&]() -> StatusOr<ReplicaMessage> {
    std::string bytes;
    TANDEM_RETURN_IF_ERROR(dp.Broadcast(bytes, ReplicaWait(o)), who + ": waiting for rank 0");
    TANDEM_ASSIGN_OR_RETURN(ReplicaMessage msg, DecodeReplicaMessage(bytes, dp.world_size()), who);
    if (msg.kind == ReplicaMessage::Kind::kAbort) return FailedPrecondition(who + ": rank 0 failed: " + msg.error);
    return msg;
  };
  TANDEM_ASSIGN_OR_RETURN(const ReplicaMessage start, next());
  if (start.kind != ReplicaMessage::Kind::kStart) return Internal(who + ": rank 0's first message is not start");
  ActorResult result;
  if (!o.checkpoint_dir.empty()) {
    TANDEM_ASSIGN_OR_RETURN(const std::optional<RestoredActorCheckpoint> restored,
                            RestoreActorCheckpoint(o.checkpoint_dir, ActorRunFingerprint(o), *m.net,
                                                   m.trainer->optimizer(), m.device, /*metrics_path=*/""));
    const std::string mine = restored ? restored->path : "";
    if (mine != start.checkpoint)
      return FailedPrecondition(who + ": restored " + (mine.empty() ? "no checkpoint" : mine) + ", rank 0 " +
                                (start.checkpoint.empty() ? "none" : start.checkpoint));
    if (restored) result.steps = restored->progress.step;
  } else if (!start.checkpoint.empty()) {
    return FailedPrecondition(who + ": rank 0 resumed from " + start.checkpoint + ", this replica has no --checkpoint-dir");
  }
  for (;;) {
    TANDEM_ASSIGN_OR_RETURN(const ReplicaMessage msg, next());
    if (msg.kind == ReplicaMessage::Kind::kEnd) break;
    if (msg.kind != ReplicaMessage::Kind::kStep) return Internal(who + ": an unexpected message from rank 0");
    const std::vector<train::Trajectory>& share = msg.shares[static_cast<size_t>(dp.rank())];
    StatusOr<train::GrpoStepStats> stepped = [&] {
      const auto stepping = tag.lock();  // tandemd's release waits for the step
      return m.trainer->Step(share, msg.progress);
    }();
    TANDEM_ASSIGN_OR_RETURN(const train::GrpoStepStats st, std::move(stepped), who + " step " + std::to_string(msg.step));
    for (const std::string& why : st.dropped) log::Warn("actor", "step {}: dropped {}", msg.step, why);
    if (msg.check)  // rank 0 checkpoints this step when there is a --checkpoint-dir
      TANDEM_RETURN_IF_ERROR(m.trainer->CheckReplicasAgree(!o.checkpoint_dir.empty()),
                             who + " step " + std::to_string(msg.step));
    log::Info("actor", "replica {} step {}: {} trajectories of {}", dp.rank(), msg.step, share.size(), st.trajectories);
    result.steps = msg.step;
  }
  log::Info("actor", "replica {} done after step {}", dp.rank(), result.steps);
  return result;
}

// Rank 0: the controller (actor_role.h).
StatusOr<ActorResult> RunController(const ActorOptions& o, const control::Endpoint& endpoint,
                                    const control::Hello& hello, collective::Group& dp) {
  // Tokenizer, chat format, data.
  TANDEM_ASSIGN_OR_RETURN(const data::Tokenizer tok, data::Tokenizer::FromDirectory(o.model_dir), "actor: --model tokenizer");
  TANDEM_ASSIGN_OR_RETURN(const data::ChatFormat format, data::ChatFormatFor(tok), "actor: chat format");
  std::optional<data::TokenId> end = tok.special_tokens().eos;
  if (!end && format.kind == data::ChatFormat::Kind::kChatMl) end = tok.TokenToId("<|im_end|>");
  if (!end) return FailedPrecondition("actor: the tokenizer names no eos token (tokenizer_config.json eos_token)");
  // --max-prompt-tokens counts the prompt the model is sent: the chat
  // format's, or under a workflow its first call's, with the tools it offers.
  std::vector<std::string> offered;
  if (!o.workflow.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(const std::unique_ptr<agents::Workflow> workflow, agents::MakeWorkflow(o.workflow),
                            "actor: --workflow");
    offered = workflow->tool_names();
  }
  const data::PromptLengthLimit limit{
      [&tok, &format, &offered](const data::Problem& p) { return PromptTokensOffering(tok, format, p, offered); },
      static_cast<size_t>(o.max_prompt_tokens)};
  // Each objective's data set, held-out set and prompt stream (seed + its index).
  TANDEM_ASSIGN_OR_RETURN(const Objectives objectives, ActorObjectives(o));
  const size_t n_objectives = objectives.list.size();
  std::vector<ObjectiveData> sets(n_objectives);
  std::vector<data::ProblemStream> streams;
  for (size_t i = 0; i < n_objectives; ++i) {
    const Objective& obj = objectives.list[i];
    const std::string where = n_objectives > 1 ? "actor: objective " + obj.name : "actor";
    TANDEM_ASSIGN_OR_RETURN(sets[i].train, data::OpenDataset(obj.dataset, obj.dataset_options), where);
    SftOptions held_spec;  // the held-out rule is sft's (SftHeldOutProblems)
    held_spec.dataset = obj.dataset;
    held_spec.dataset_options = obj.dataset_options;
    held_spec.eval_options = obj.eval_options;
    held_spec.eval_problems = o.eval_problems;
    TANDEM_ASSIGN_OR_RETURN(sets[i].held, SftHeldOutProblems(held_spec, *sets[i].train, limit), where);
    sets[i].prefix = data::TrainingPrefix(*sets[i].train, sets[i].held.train_size);
    TANDEM_ASSIGN_OR_RETURN(data::ProblemStream stream, data::ProblemStream::Create(sets[i].prompts(), o.seed + i, limit),
                            where);
    streams.push_back(std::move(stream));
  }
  auto prompt_ids = [&](const data::Problem& p) -> StatusOr<std::vector<int32_t>> {
    TANDEM_ASSIGN_OR_RETURN(data::EncodedChat chat, data::EncodeChat(tok, format, p.prompt, true), "problem " + p.id);
    return std::vector<int32_t>(chat.ids.begin(), chat.ids.end());
  };

  // Model, algorithm, trainer, publishers.
  TANDEM_ASSIGN_OR_RETURN(ActorModel built, BuildActorModel(o, objectives, &dp));
  const at::Device device = built.device;
  std::unique_ptr<model::Transformer>& net = built.net;
  std::unique_ptr<train::GrpoTrainer>& trainer = built.trainer;
  // SYNC's transport to the rollouts (--weights-transport): an shm segment
  // a version, or a CUDA VMM export on this GPU (the rollouts colocated on
  // it), held as the `ipc_exports` tag until they acked.
  const std::string owner_job = hello.job_id.empty() ? "local" : hello.job_id;
  const std::string owner_task = hello.task_id.empty() ? "actor" : hello.task_id;
  const auto readers = static_cast<uint32_t>(o.rollouts);
  std::unique_ptr<weights::WeightPublisher> publisher;
  if (o.weights_transport == "cuda-ipc") {
    publisher = std::make_unique<weights::IpcPublisher>(weights::IpcOptions{owner_job, owner_task, readers});
  } else if (o.weights_transport == "nccl") {
    TANDEM_ASSIGN_OR_RETURN(publisher, StartNcclPublisher(o, dp.world_size() > 1));
  } else {
    publisher = std::make_unique<weights::ShmPublisher>(weights::ShmOptions{owner_job, owner_task, readers});
  }

  const std::string run_dir = Env("TANDEM_RUN_DIR");
  const std::string metrics_path =
      !o.metrics_path.empty() ? o.metrics_path : (run_dir.empty() ? "metrics.jsonl" : run_dir + "/metrics.jsonl");

  // A checkpoint to go on from (actor_checkpoint.h): the model, AdamW, the
  // generators, the prompt stream and metrics.jsonl as they were after its step.
  const json fingerprint = ActorRunFingerprint(o);
  ActorProgress progress;
  std::optional<checkpoint::CheckpointWriter> writer;
  bool resumed = false;
  std::string resumed_from;
  if (!o.checkpoint_dir.empty()) {
    TANDEM_ASSIGN_OR_RETURN(const std::optional<RestoredActorCheckpoint> restored,
                            RestoreActorCheckpoint(o.checkpoint_dir, fingerprint, *net, trainer->optimizer(), device,
                                                   metrics_path));
    if (restored) {
      resumed = true;
      resumed_from = restored->path;
      progress = restored->progress;
      if (progress.cursors.size() != n_objectives)
        return FailedPrecondition("actor resume: " + restored->path + " holds " + std::to_string(progress.cursors.size()) +
                                  " prompt streams for " + std::to_string(n_objectives) + " objectives");
      for (size_t i = 0; i < n_objectives; ++i) {
        TANDEM_ASSIGN_OR_RETURN(streams[i],
                                data::ProblemStream::Create(sets[i].prompts(), o.seed + i, limit, progress.cursors[i]),
                                "actor resume: sampler cursor");
      }
      for (const checkpoint::SkippedCheckpoint& k : restored->skipped)
        log::Warn("actor", "resume: skipped {}: {}", k.path, k.why.message());
      log::Info("actor", "resumed from {} (step {}, weight version {})", restored->path, progress.step, progress.version);
    }
    TANDEM_ASSIGN_OR_RETURN(checkpoint::CheckpointWriter w,
                            checkpoint::CheckpointWriter::Open(
                                o.checkpoint_dir, {static_cast<size_t>(o.keep_checkpoints), /*sole_writer=*/true}),
                            "actor: --checkpoint-dir");
    writer.emplace(std::move(w));
  }
  TANDEM_ASSIGN_OR_RETURN(const JsonLog metrics, JsonLog::Open(metrics_path), "actor: metrics");
  auto tell_replicas = [&dp](const ReplicaMessage& m) -> Status {
    if (dp.world_size() == 1) return Status::Ok();
    std::string bytes = EncodeReplicaMessage(m);
    return dp.Broadcast(bytes, std::chrono::milliseconds(1)).WithContext("actor: telling the replicas");
  };
  {
    ReplicaMessage start;
    start.kind = ReplicaMessage::Kind::kStart;
    start.checkpoint = resumed_from;
    TANDEM_RETURN_IF_ERROR(tell_replicas(start));
  }

  // The control channel: publish_weights is ours to answer.
  control::ControlClient::Options co;
  co.endpoint = endpoint;
  co.hello = hello;
  // The versions a publisher holds on the GPU until they are read: the `ipc_exports` tag.
  const bool exports_on_gpu = o.weights_transport == "cuda-ipc" || (o.weights_transport == "nccl" && device.is_cuda());
  ActorTags tag(trainer->optimizer(), o.optimizer.residency == "staged", exports_on_gpu ? publisher.get() : nullptr);
  tag.Declare(co);
  control::ControlClient client(co);
  OnHandoffCommands(client, tag);
  // The durable copies are written behind the ack (the rollouts load the
  // published version; a restarted one waits for the copy it is sent to).
  std::unique_ptr<weights::BackgroundFilePublisher> durable_copies;
  client.On("publish_weights", [&](const control::Command& c) -> StatusOr<json> {
    TANDEM_ASSIGN_OR_RETURN(const int64_t version, c.Version());
    const Clock::time_point t0 = Clock::now();
    TANDEM_ASSIGN_OR_RETURN(const std::string source, publisher->Publish(version, net->parameters()),
                            "publish_weights " + std::string(publisher->kind()));
    json detail = {{"version", version}, {"source", source}, {"publish_seconds", Seconds(t0)}};
    if (c.body.contains("durable") && c.body["durable"].is_string()) {
      const std::string durable = c.body["durable"].get<std::string>();
      if (durable.rfind("file:", 0) != 0) return InvalidArgument("publish_weights.durable: expected file:DIR, got " + durable);
      const fs::path dir = fs::path(durable.substr(5));
      if (dir.filename() != "v" + std::to_string(version))
        return InvalidArgument("publish_weights.durable: expected a directory named v" + std::to_string(version));
      if (!durable_copies || durable_copies->dir() != dir.parent_path().string())
        durable_copies = std::make_unique<weights::BackgroundFilePublisher>(
            weights::FileOptions{dir.parent_path().string(), net->config()});
      TANDEM_ASSIGN_OR_RETURN(const std::string durable_source, durable_copies->Publish(version, net->parameters()),
                              "publish_weights durable");
      detail["durable"] = durable_source;  // being written (file_transport.h)
    }
    detail["seconds"] = Seconds(t0);
    return detail;
  });
  TANDEM_RETURN_IF_ERROR(client.Connect(), "actor: tandemd");
  // A workflow's episodes go through an in-process proxy over the rollouts
  // (started once they listen), paused outside ROLLOUT phases.
  std::unique_ptr<EpisodeRunner> episodes;
  // A phase, asked again while the answer is `unavailable` (the group is
  // busy recovering a restarted worker; tandemd restarted: connect again)
  // until --phase-timeout.
  auto phase = [&](const std::string& name, std::optional<int64_t> v) -> Status {
    if (episodes && name != "rollout") episodes->Pause();
    const Clock::time_point deadline = Clock::now() + Millis(o.phase_timeout_s);
    for (int attempt = 1;; ++attempt) {
      const auto left = std::max(std::chrono::milliseconds(1),
                                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
      if (!client.connected()) {
        if (Status c = client.Connect(left); !c.ok()) {
          if (Clock::now() > deadline) return c;
          continue;
        }
        log::Info("actor", "connected to tandemd again");
      }
      const Status st = client.RequestPhase(name, v, left);
      if (st.ok() && episodes && name == "rollout") episodes->Resume();
      if (st.ok()) return st;
      if (st.code() != StatusCode::kUnavailable || Clock::now() > deadline) return st;
      if (attempt == 1) log::Warn("actor", "phase {}: {}; asking again until --phase-timeout", name, st.message());
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  };
  const std::string job = hello.job_id;
  TANDEM_ASSIGN_OR_RETURN(std::vector<RolloutEndpoint> rollouts, WaitForRollouts(o, job));
  const auto request_timeout = Millis(o.request_timeout_s);

  if (!o.workflow.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(episodes, EpisodeRunner::Start(o, job, tok));
  }
  auto episode_tasks = [&](const std::vector<std::pair<size_t, const data::Problem*>>& problems) {
    std::vector<EpisodeTask> tasks;
    for (const auto& [obj, problem] : problems)
      tasks.push_back({problem, &sets[obj].train->verifier(), objectives.routes[obj]});
    return tasks;
  };

  std::vector<RolloutEndpoint> teachers;
  if (objectives.any_teacher()) {
    TANDEM_ASSIGN_OR_RETURN(teachers, WaitForTeachers(o, objectives, job));
  }

  // Held-out accuracy through the rollouts (greedy); call in a rollout phase.
  std::vector<std::vector<int32_t>> eval_prompts;
  std::vector<std::pair<size_t, const data::Problem*>> eval_problems;  // (objective, problem)
  for (size_t i = 0; i < n_objectives; ++i)
    for (const data::Problem& p : sets[i].held.problems) {
      TANDEM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, prompt_ids(p));
      eval_prompts.push_back(std::move(ids));
      eval_problems.emplace_back(i, &p);
    }
  // Which held-out problems are solved (1/0, in eval_problems' order): the
  // workflow's episodes (greedy, solved within its turns; their metrics to
  // *e), else one greedy answer each.
  auto eval_solved = [&](EvalResult* e) -> StatusOr<std::vector<int8_t>> {
    if (episodes) {
      TANDEM_ASSIGN_OR_RETURN(EpisodeBatch batch,
                              episodes->Run(episode_tasks(eval_problems), 1, 0.0, o.seed,
                                            "eval" + std::to_string(progress.step)),
                              "actor eval");
      AddEpisodeMetrics(batch.stats, "eval/", e->episodes);
      e->episodes.erase("eval/reward/mean");
      if (!batch.stats.sample.empty())
        log::Info("actor", "eval sample (step {}): {}", progress.step,
                  nlohmann::json(batch.stats.sample).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      return std::move(batch.solved);
    }
    GenerateCall call;
    call.n = 1;
    call.temperature = 0;
    call.max_new_tokens = o.max_new_tokens;
    call.stop_token_ids = {*end};
    TANDEM_ASSIGN_OR_RETURN(const std::vector<RolloutSample> samples,
                            GenerateOnAll(o, job, rollouts, eval_prompts, call, progress.version, request_timeout),
                            "actor eval");
    std::vector<int8_t> solved;
    for (size_t i = 0; i < samples.size(); ++i) {
      const auto [obj, problem] = eval_problems[i];
      TANDEM_ASSIGN_OR_RETURN(const std::string text, tok.Decode(samples[i].output_ids, {.skip_special_tokens = true}));
      solved.push_back(sets[obj].train->verifier().Verify(text, problem->answer).reward >= 1.0);
    }
    return solved;
  };
  auto evaluate = [&]() -> StatusOr<EvalResult> {
    EvalResult e;
    e.per_objective.assign(n_objectives, 0.0);
    if (eval_prompts.empty()) return e;
    TANDEM_ASSIGN_OR_RETURN(const std::vector<int8_t> solved, eval_solved(&e));
    std::vector<int64_t> correct(n_objectives, 0), total(n_objectives, 0);
    for (size_t i = 0; i < solved.size(); ++i) {
      correct[eval_problems[i].first] += solved[i] == 1;
      ++total[eval_problems[i].first];
    }
    int64_t all = 0;
    for (size_t i = 0; i < n_objectives; ++i) {
      all += correct[i];
      e.per_objective[i] = total[i] > 0 ? static_cast<double>(correct[i]) / static_cast<double>(total[i]) : 0.0;
    }
    e.accuracy = static_cast<double>(all) / static_cast<double>(solved.size());
    return e;
  };

  // The rollouts must sample from this model. The group's newest version
  // (the welcome's published_version) is this model's when nothing was
  // published since (a first start; an actor restarted right after a
  // checkpoint); else (a restart that lost steps, a job run again over a
  // run dir with a checkpoint) the model is published now, as a version
  // past both.
  const json& welcome_version = client.welcome()["published_version"];
  const int64_t published =
      welcome_version.is_number_integer() && welcome_version.get<int64_t>() >= 0 ? welcome_version.get<int64_t>() : 0;
  if (published != progress.version) {
    progress.version = std::max(published + 1, progress.version);
    log::Info("actor", "publishing the model of step {} as weight version {} (the group's newest is {})", progress.step,
              progress.version, published);
    TANDEM_RETURN_IF_ERROR(phase("sync", progress.version), "actor: publishing the resumed model");
  }
  const int64_t eval_count = static_cast<int64_t>(eval_prompts.size());
  if (!resumed) {
    TANDEM_RETURN_IF_ERROR(phase("rollout", std::nullopt), "actor");
    TANDEM_ASSIGN_OR_RETURN(const EvalResult before, evaluate());
    progress.accuracy_before = before.accuracy;
    json line = {{"step", 0}};
    AddEval(before, objectives, eval_count, line);
    metrics.Write(line);
    log::Info("actor", "step 0 eval/accuracy={:.3f} ({} held-out problems)", progress.accuracy_before, eval_count);
  }

  int64_t last_checkpoint = resumed ? progress.step : -1;
  auto save_checkpoint = [&]() -> Status {
    if (!writer || last_checkpoint == progress.step) return Status::Ok();
    progress.cursors.clear();
    for (const data::ProblemStream& st : streams) progress.cursors.push_back(st.cursor());
    progress.optimizer_steps = trainer->steps();
    const Clock::time_point c0 = Clock::now();
    TANDEM_ASSIGN_OR_RETURN(const checkpoint::CommittedCheckpoint c,
                            SaveActorCheckpoint(*writer, {net.get(), &trainer->optimizer(), progress, fingerprint,
                                                          o.model_dir, metrics_path}));
    log::Info("actor", "checkpoint of step {} in {} ({:.2f} s)", progress.step, c.path, Seconds(c0));
    last_checkpoint = progress.step;
    return Status::Ok();
  };

  for (int64_t step = progress.step + 1; step <= o.steps; ++step) {
    const Clock::time_point t_step = Clock::now();
    // Prompts, split over the objectives by weight.
    std::vector<data::Problem> problems;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<size_t> objective_of;  // per prompt
    const std::vector<int64_t> split = SplitPrompts(objectives, o.prompts_per_step);
    for (size_t obj = 0; obj < n_objectives; ++obj)
      for (int64_t i = 0; i < split[obj]; ++i) {
        TANDEM_ASSIGN_OR_RETURN(data::Problem p, streams[obj].Next(), "actor");
        TANDEM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, prompt_ids(p));
        prompts.push_back(std::move(ids));
        problems.push_back(std::move(p));
        objective_of.push_back(obj);
      }
    // ROLLOUT.
    Clock::time_point t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(phase("rollout", std::nullopt), "actor step " + std::to_string(step));
    const uint64_t seed = (o.seed * 1000003 + static_cast<uint64_t>(step)) & 0x7fffffff;
    std::vector<train::Trajectory> trajectories;
    int64_t rewarded = 0, response_tokens = 0, oldest = -1, sampled = 0;
    std::vector<int64_t> rewarded_of(n_objectives, 0), samples_of(n_objectives, 0);
    json episode_metrics = json::object();
    if (episodes) {  // the workflow's episodes (actor_episodes.h)
      std::vector<std::pair<size_t, const data::Problem*>> asked;
      for (size_t p = 0; p < problems.size(); ++p) asked.emplace_back(objective_of[p], &problems[p]);
      TANDEM_ASSIGN_OR_RETURN(EpisodeBatch batch,
                              episodes->Run(episode_tasks(asked), o.group_size, o.temperature, seed,
                                            "step" + std::to_string(step)),
                              "actor step " + std::to_string(step));
      for (const std::string& why : batch.stats.errors) log::Warn("actor", "step {}: dropped {}", step, why);
      for (size_t i = 0; i < batch.solved.size(); ++i) {
        const size_t obj = objective_of[i / static_cast<size_t>(o.group_size)];
        if (batch.solved[i] < 0) continue;
        rewarded += batch.solved[i];
        rewarded_of[obj] += batch.solved[i];
        ++samples_of[obj];
        ++sampled;
      }
      for (const train::Trajectory& t : batch.trajectories) response_tokens += static_cast<int64_t>(t.response.size());
      oldest = batch.stats.oldest_version;
      AddEpisodeMetrics(batch.stats, "episode/", episode_metrics);
      trajectories = std::move(batch.trajectories);
    }
    GenerateCall call;
    call.n = o.group_size;
    call.temperature = o.temperature;
    call.max_new_tokens = o.max_new_tokens;
    call.stop_token_ids = {*end};
    call.seed = static_cast<int64_t>(seed);
    std::vector<RolloutSample> samples;
    if (!episodes) {
      TANDEM_ASSIGN_OR_RETURN(samples, GenerateOnAll(o, job, rollouts, prompts, call, progress.version, request_timeout),
                              "actor step " + std::to_string(step));
    }
    for (size_t i = 0; i < samples.size(); ++i) {
      const size_t p = i / static_cast<size_t>(o.group_size);
      const size_t obj = objective_of[p];
      train::Trajectory t;
      t.prompt = prompts[p];
      t.response = samples[i].output_ids;
      t.old_logprobs = samples[i].logprobs;
      t.group = static_cast<int64_t>(p);
      t.route = objectives.routes[obj];
      StatusOr<std::string> text = tok.Decode(samples[i].output_ids, {.skip_special_tokens = true});
      t.reward = text.ok() ? sets[obj].train->verifier().Verify(*text, problems[p].answer).reward : 0.0;
      rewarded += t.reward >= 1.0;
      rewarded_of[obj] += t.reward >= 1.0;
      ++samples_of[obj];
      ++sampled;
      response_tokens += static_cast<int64_t>(t.response.size());
      if (samples[i].weight_version >= 0 && (oldest < 0 || samples[i].weight_version < oldest)) oldest = samples[i].weight_version;
      trajectories.push_back(std::move(t));
    }
    const double rollout_s = Seconds(t0);
    // TEACHER(k), each teacher on some route in turn.
    t0 = Clock::now();
    std::vector<TeacherTurn> turns;
    if (objectives.any_teacher()) {
      const double temperature = o.temperature > 0 ? o.temperature : 1.0;  // the trainer's
      TANDEM_ASSIGN_OR_RETURN(turns,
                              ScoreWithTeachers(o, job, objectives, teachers,
                                                [&](const std::string& name) { return phase(name, std::nullopt); },
                                                {temperature, built.distill_top_k}, trajectories),
                              "actor step " + std::to_string(step));
    }
    const double teacher_s = Seconds(t0);
    // TRAIN.
    t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(phase("train", std::nullopt), "actor step " + std::to_string(step));
    const double done = o.steps > 0 ? static_cast<double>(step - 1) / static_cast<double>(o.steps) : 0.0;
    ReplicaMessage deal;
    deal.kind = ReplicaMessage::Kind::kStep;
    deal.step = step;
    deal.progress = done;
    deal.shares = DealGroups(trajectories, dp.world_size());
    deal.check = step == o.steps || (o.checkpoint_every > 0 && step % o.checkpoint_every == 0);
    if (dp.world_size() > 1) TANDEM_RETURN_IF_ERROR(tell_replicas(deal));
    TANDEM_ASSIGN_OR_RETURN(const train::GrpoStepStats st, trainer->Step(deal.shares[0], done), "actor");
    for (const std::string& why : st.dropped) log::Warn("actor", "step {}: dropped {}", step, why);
    if (st.dropped_total > static_cast<int64_t>(st.dropped.size()))
      log::Warn("actor", "step {}: the other replicas dropped {} trajectories (their logs say why)", step,
                st.dropped_total - static_cast<int64_t>(st.dropped.size()));
    if (dp.world_size() > 1 && deal.check) {
      TANDEM_RETURN_IF_ERROR(trainer->CheckReplicasAgree(!o.checkpoint_dir.empty()), "actor step " + std::to_string(step));
      log::Info("actor", "step {}: the {} replicas hold the same parameters", step, dp.world_size());
    }
    const double train_s = Seconds(t0);
    // SYNC(v).
    t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(phase("sync", progress.version + 1), "actor step " + std::to_string(step));
    ++progress.version;
    const double sync_s = Seconds(t0);

    json m = {{"step", step},
              {"reward/mean", st.reward_mean},
              {"reward/std", st.reward_std},
              {"accuracy", sampled == 0 ? 0.0 : static_cast<double>(rewarded) / static_cast<double>(sampled)},
              {"response_length/mean",
               trajectories.empty() ? 0.0 : static_cast<double>(response_tokens) / static_cast<double>(trajectories.size())},
              {"grad_norm", st.grad_norm},
              {"lr", st.lr},
              {"updated", st.updated},
              {"groups/all_equal", st.groups_all_equal},
              {"dropped", st.dropped_total},
              {"tokens/packed", st.packed_tokens},
              {"tokens/sequence", st.sequence_tokens},
              {"tokens_per_s", train_s > 0 ? static_cast<double>(st.sequence_tokens) / train_s : 0.0},
              {"micro_batches", st.micro_batches},
              {"weight_version/min", oldest},
              {"seconds/rollout", rollout_s},
              {"seconds/train", train_s},
              {"seconds/sync", sync_s}};
    for (const auto& [k, v] : st.loss) m["loss/" + k] = v;
    m.update(episode_metrics);
    if (objectives.any_teacher()) {
      m["seconds/teacher"] = teacher_s;
      for (const TeacherTurn& turn : turns) m["seconds/teacher/" + turn.teacher] = turn.seconds;
      for (const auto& [k, v] : st.distill) m["distill/" + k] = v;
    }
    if (n_objectives > 1)
      for (size_t i = 0; i < n_objectives; ++i)
        m["accuracy/" + objectives.list[i].name] =
            samples_of[i] > 0 ? static_cast<double>(rewarded_of[i]) / static_cast<double>(samples_of[i]) : 0.0;
    if (o.eval_every > 0 && step % o.eval_every == 0 && step != o.steps) {
      TANDEM_RETURN_IF_ERROR(phase("rollout", std::nullopt), "actor eval");
      TANDEM_ASSIGN_OR_RETURN(const EvalResult e, evaluate());
      AddEval(e, objectives, eval_count, m);
    }
    m["seconds/step"] = Seconds(t_step);
    if (step == 1) progress.reward_first = st.reward_mean;
    progress.reward_last = st.reward_mean;
    progress.step = step;
    metrics.Write(m);
    (void)client.SendMetrics(m, step);
    log::Info("actor", "step {} reward={:.3f} accuracy={:.3f} grad_norm={:.3f} rollout={:.1f}s{} train={:.1f}s sync={:.2f}s",
              step, st.reward_mean, m["accuracy"].get<double>(), st.grad_norm, rollout_s,
              objectives.any_teacher() ? fmt::format(" teacher={:.1f}s", teacher_s) : "", train_s, sync_s);
    if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && step != o.steps)
      TANDEM_RETURN_IF_ERROR(save_checkpoint(), "actor step " + std::to_string(step));
  }

  // Before the final eval, whose line a run resumed from it writes again.
  TANDEM_RETURN_IF_ERROR(save_checkpoint(), "actor: the last checkpoint");
  ActorResult result;
  result.steps = progress.step;
  result.accuracy_before = progress.accuracy_before;
  result.reward_first = progress.reward_first;
  result.reward_last = progress.reward_last;
  TANDEM_RETURN_IF_ERROR(phase("rollout", std::nullopt), "actor final eval");
  TANDEM_ASSIGN_OR_RETURN(const EvalResult after, evaluate());
  result.accuracy_after = after.accuracy;
  json last = {{"step", result.steps}};
  AddEval(after, objectives, eval_count, last);
  last["final"] = true;
  metrics.Write(last);
  log::Info("actor", "done: {} steps, held-out accuracy {:.3f} -> {:.3f}, reward {:.3f} -> {:.3f}", result.steps,
            result.accuracy_before, result.accuracy_after, result.reward_first, result.reward_last);
  if (!o.out_dir.empty()) {
    TANDEM_RETURN_IF_ERROR(model::SavePretrained(*net, o.out_dir), "actor: --out");
    TANDEM_RETURN_IF_ERROR(CopyTokenizer(o.model_dir, o.out_dir), "actor: --out");
  }
  if (durable_copies) TANDEM_RETURN_IF_ERROR(durable_copies->Wait(), "actor: the last durable copy");
  publisher->ReleaseAll();
  return result;
}

}  // namespace

StatusOr<ActorResult> RunActor(const ActorOptions& o) {
  TANDEM_RETURN_IF_ERROR(CheckOptions(o));
  if (o.threads > 0) {
    at::set_num_threads(o.threads);
    kernels::SetParallelForThreads(o.threads);  // the CPU kernels' loops too
  }
  at::manual_seed(o.seed);
  std::string control_text = o.control.empty() ? Env("TANDEM_CONTROL") : o.control;
  if (control_text.empty())
    return InvalidArgument("actor: needs tandemd, which runs the handoff and tells the rollouts to load each version "
                           "(--control or $TANDEM_CONTROL; run the job with `tandem run`)");
  TANDEM_ASSIGN_OR_RETURN(const control::Endpoint endpoint, control::ParseEndpoint(control_text), "actor: --control");
  control::Hello hello = control::HelloFromEnvironment();
  if (hello.role.empty()) hello.role = "actor";
  TANDEM_RETURN_IF_ERROR(WaitForModelDir(o.model_dir, o.wait_for_model_s, "actor"));
  if (hello.rank > 0) return RunReplica(o, endpoint, hello);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<collective::Group> dp, JoinActorReplicas(o, hello));
  StatusOr<ActorResult> r = RunController(o, endpoint, hello, *dp);
  if (dp->world_size() > 1) {  // the replicas end with rank 0 (actor_replicas.h)
    ReplicaMessage last;
    last.kind = r.ok() ? ReplicaMessage::Kind::kEnd : ReplicaMessage::Kind::kAbort;
    if (!r.ok()) last.error = r.status().ToString();
    std::string bytes = EncodeReplicaMessage(last);
    if (Status s = dp->Broadcast(bytes, std::chrono::milliseconds(1)); !s.ok())
      log::Warn("actor", "telling the replicas the run ended: {}", s.message());
  }
  return r;
}

}  // namespace tandem::roles
