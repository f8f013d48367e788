// The actor's rollout phase when a workflow makes the episodes (issue #20;
// docs/agents.md "Workflows in the actor"): an in-process OpenAI proxy
// (agents::Proxy) in front of the job's rollouts, episodes run on a bounded
// pool of threads, each episode's session cut into trajectories
// (agents::EpisodeSequences) with the masks the trainer honours.
//
// Per step, prompt p's group_size episodes become group p (contiguous);
// their sequences share the prompt (and, per turn, each episode's history),
// so tree packing computes the shared tokens once. An episode that fails (a
// call past --request-timeout, a session over its bounds) is dropped with
// its reason, its session closed; a step where more than half fail is an
// error (something is broken, not the model). Every session is closed
// before Run returns: nothing is left behind.
//
// The proxy pauses with the handoff: Pause() before the actor's TRAIN
// phase, Resume() once the rollouts are back (calls from an external agent,
// --proxy-port-file, wait meanwhile). A workflow with a simulated user
// served by tandem (rollout replicas with --frozen-weights, colocated and
// handed off like the rollouts) gets a second proxy over those, paused
// alike; an external user endpoint is called directly. Torch-free but for
// the trajectories.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/agents/episode_tokens.h"
#include "workers/agents/proxy_server.h"
#include "workers/agents/workflow.h"
#include "workers/roles/actor_options.h"
#include "workers/train/grpo_trainer.h"

namespace tandem::roles {

// One problem to run episodes of.
struct EpisodeTask {
  const data::Problem* problem = nullptr;
  const data::Verifier* verifier = nullptr;
  std::vector<float> route;  // the trajectories' (MOPD), empty: none
};

struct EpisodeStats {
  int64_t episodes = 0, failed = 0, solved = 0;
  int64_t turns = 0, tool_calls = 0, tool_errors = 0;
  double reward_sum = 0;
  // Per turn k (index k-1): episodes that made a k-th model turn, and those
  // solved at it.
  std::vector<int64_t> reached, solved_at;
  std::vector<std::string> errors;  // the first few failures
  int64_t oldest_version = -1;
  // The first episode's conversation after its prompt, decoded (at most
  // kSampleBytes; special tokens shown), for the logs.
  std::string sample;
};
inline constexpr size_t kSampleBytes = 2000;

struct EpisodeBatch {
  std::vector<train::Trajectory> trajectories;  // group p: task p's episodes, contiguous
  EpisodeStats stats;
  std::vector<int8_t> solved;  // per episode (task-major): 1 solved, 0 not, -1 failed
};

// InvalidArgument naming the flag when --workflow, --advantage-unit or
// --episode-threads is wrong (called before anything starts).
Status CheckEpisodeOptions(const ActorOptions& o);

class EpisodeRunner {
 public:
  // Starts the proxy over the actor's rollouts (their port files, as
  // WaitForRollouts found them) with the model's tokenizer.
  static StatusOr<std::unique_ptr<EpisodeRunner>> Start(const ActorOptions& o, const std::string& job,
                                                       data::Tokenizer tokenizer);
  ~EpisodeRunner();

  // `samples` episodes of each task with the trained model's sampling
  // (temperature 0: greedy, for evals); `tag` names the sessions.
  StatusOr<EpisodeBatch> Run(const std::vector<EpisodeTask>& tasks, int64_t samples, double temperature,
                             uint64_t seed, const std::string& tag);

  // Both proxies (the model's; a simulated user's served by tandem).
  void Pause();
  void Resume();

 private:
  EpisodeRunner(const ActorOptions& o, std::unique_ptr<agents::Workflow> workflow, agents::AdvantageUnit unit,
                data::Tokenizer tokenizer)
      : o_(o), workflow_(std::move(workflow)), unit_(unit), tokenizer_(std::move(tokenizer)) {}
  // The simulated user's endpoint (agents::UserEndpoint): a proxy of its
  // own over its replicas, or the external URL with its key.
  Status StartUser(const std::string& job);

  const ActorOptions& o_;
  std::unique_ptr<agents::Workflow> workflow_;
  agents::AdvantageUnit unit_;
  data::Tokenizer tokenizer_;  // for samples
  std::unique_ptr<agents::Proxy> proxy_, user_proxy_;
  std::unique_ptr<agents::ChatClient> client_, user_client_;
};

// Episode metrics for metrics.jsonl under `prefix` ("episode/", "eval/"):
// solved, reward/mean, turns/mean, failed, tool_calls, tool_errors, and per
// turn k accuracy (solved at k of those that reached k).
void AddEpisodeMetrics(const EpisodeStats& s, const std::string& prefix, nlohmann::json& m);

}  // namespace tandem::roles
