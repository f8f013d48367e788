// The actor's workflow episodes (actor_episodes.h).
#include "workers/roles/actor_episodes.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "workers/roles/actor_rollouts.h"
#include "workers/roles/port_file.h"

namespace tandem::roles {
namespace {

constexpr size_t kKeptErrors = 5;

// One episode's outcome, before its session is cut.
struct Outcome {
  Status status;
  agents::Episode episode;
  std::vector<agents::EpisodeSequence> sequences;
};

}  // namespace

StatusOr<std::unique_ptr<EpisodeRunner>> EpisodeRunner::Start(const ActorOptions& o, const std::string& job,
                                                             data::Tokenizer tokenizer) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<agents::Workflow> workflow, agents::MakeWorkflow(o.workflow), "actor: --workflow");
  agents::AdvantageUnit unit = agents::AdvantageUnit::kEpisode;
  if (o.advantage_unit == "turn") {
    unit = agents::AdvantageUnit::kTurn;
  } else if (o.advantage_unit != "episode") {
    return InvalidArgument("actor: --advantage-unit: expected episode or turn, got " + o.advantage_unit);
  }
  if (o.episode_threads < 1 || o.episode_threads > 4096)
    return InvalidArgument("actor: --episode-threads: expected 1 to 4096");
  agents::ProxyOptions po;
  for (int64_t r = 0; r < o.rollouts; ++r) po.replicas.port_files.push_back(RolloutPortFile(o, r));
  po.replicas.host = o.rollout_host;
  po.replicas.job = job;
  po.request_timeout = Millis(o.request_timeout_s);
  po.pause_wait = Millis(o.phase_timeout_s);
  po.worker_threads = 2;
  auto proxy = std::make_unique<agents::Proxy>(std::move(tokenizer), po);
  TANDEM_RETURN_IF_ERROR(proxy->Start(), "actor: the workflow's proxy");
  if (!o.proxy_port_file.empty()) TANDEM_RETURN_IF_ERROR(WritePortFile(o.proxy_port_file, proxy->port()), "actor: --proxy-port-file");
  log::Info("actor", "workflow {} through the proxy on port {} ({} advantages)", workflow->name(), proxy->port(),
            o.advantage_unit);
  return std::unique_ptr<EpisodeRunner>(new EpisodeRunner(o, std::move(workflow), unit, std::move(proxy)));
}

EpisodeRunner::EpisodeRunner(const ActorOptions& o, std::unique_ptr<agents::Workflow> workflow,
                             agents::AdvantageUnit unit, std::unique_ptr<agents::Proxy> proxy)
    : o_(o), workflow_(std::move(workflow)), unit_(unit), proxy_(std::move(proxy)) {
  agents::ChatEndpointOptions c;
  c.port = proxy_->port();
  c.timeout = Millis(o.request_timeout_s + 5);  // the proxy's own deadline answers first
  client_ = std::make_unique<agents::ChatClient>(c);
}

EpisodeRunner::~EpisodeRunner() { proxy_->Stop(); }

StatusOr<EpisodeBatch> EpisodeRunner::Run(const std::vector<EpisodeTask>& tasks, int64_t samples, double temperature,
                                          uint64_t seed, const std::string& tag) {
  const size_t n = tasks.size() * static_cast<size_t>(samples);
  std::vector<Outcome> outcomes(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      const EpisodeTask& task = tasks[i / static_cast<size_t>(samples)];
      const std::string session = tag + "-" + std::to_string(i);
      agents::EpisodeContext ctx;
      ctx.problem = task.problem;
      ctx.verifier = task.verifier;
      ctx.model = client_.get();
      ctx.session = session;
      ctx.params.temperature = temperature;
      ctx.params.max_tokens = o_.max_new_tokens;
      ctx.params.seed = static_cast<int64_t>((seed * 1000003 + i) & 0x7fffffff);
      Outcome& out = outcomes[i];
      StatusOr<agents::Episode> ep = workflow_->Run(ctx);
      if (ep.ok()) {
        out.episode = std::move(*ep);
        StatusOr<agents::SessionExport> exported = proxy_->ExportSession(session);
        StatusOr<std::vector<agents::EpisodeSequence>> seqs =
            exported.ok() ? agents::EpisodeSequences(*exported, out.episode, unit_)
                          : StatusOr<std::vector<agents::EpisodeSequence>>(exported.status());
        if (seqs.ok()) {
          out.sequences = std::move(*seqs);
        } else {
          out.status = seqs.status();
        }
      } else {
        out.status = ep.status();
      }
      (void)proxy_->CloseSession(session);  // NotFound when no call was recorded
    }
  };
  std::vector<std::thread> pool;
  const size_t threads = std::min<size_t>(n, static_cast<size_t>(o_.episode_threads));
  for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();

  EpisodeBatch batch;
  EpisodeStats& st = batch.stats;
  for (size_t i = 0; i < n; ++i) {
    const Outcome& out = outcomes[i];
    ++st.episodes;
    batch.solved.push_back(!out.status.ok() ? -1 : out.episode.solved ? 1 : 0);
    if (!out.status.ok()) {
      ++st.failed;
      if (st.errors.size() < kKeptErrors) st.errors.push_back("episode " + std::to_string(i) + ": " + out.status.ToString());
      continue;
    }
    const agents::Episode& e = out.episode;
    st.solved += e.solved;
    st.reward_sum += e.reward;
    st.turns += static_cast<int64_t>(e.turn_rewards.size());
    st.tool_calls += e.tool_calls;
    st.tool_errors += e.tool_errors;
    if (st.reached.size() < e.turn_rewards.size()) {
      st.reached.resize(e.turn_rewards.size(), 0);
      st.solved_at.resize(e.turn_rewards.size(), 0);
    }
    for (size_t k = 0; k < e.turn_rewards.size(); ++k) ++st.reached[k];
    if (e.solved_turn > 0 && static_cast<size_t>(e.solved_turn) <= st.solved_at.size()) ++st.solved_at[e.solved_turn - 1];
    const size_t p = i / static_cast<size_t>(samples);
    for (const agents::EpisodeSequence& s : out.sequences) {
      train::Trajectory t;
      t.prompt = s.prompt;
      t.response = s.response;
      t.old_logprobs = s.logprobs;
      t.trained = s.trained;
      t.reward = s.reward;
      t.group = static_cast<int64_t>(p);
      t.route = tasks[p].route;
      if (s.weight_version >= 0 && (st.oldest_version < 0 || s.weight_version < st.oldest_version))
        st.oldest_version = s.weight_version;
      batch.trajectories.push_back(std::move(t));
    }
  }
  if (st.failed * 2 > st.episodes)
    return Unavailable("actor: " + std::to_string(st.failed) + " of " + std::to_string(st.episodes) +
                       " episodes failed; the first: " + (st.errors.empty() ? "" : st.errors[0]));
  return batch;
}

void AddEpisodeMetrics(const EpisodeStats& s, const std::string& prefix, nlohmann::json& m) {
  const double done = static_cast<double>(s.episodes - s.failed);
  auto share = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  m[prefix + "solved"] = share(static_cast<double>(s.solved), done);
  m[prefix + "reward/mean"] = share(s.reward_sum, done);
  m[prefix + "turns/mean"] = share(static_cast<double>(s.turns), done);
  m[prefix + "failed"] = s.failed;
  if (s.tool_calls > 0 || s.tool_errors > 0) {
    m[prefix + "tool_calls"] = s.tool_calls;
    m[prefix + "tool_errors"] = s.tool_errors;
  }
  for (size_t k = 0; k < s.reached.size(); ++k)
    m[prefix + "turn" + std::to_string(k + 1) + "/accuracy"] =
        share(static_cast<double>(s.solved_at[k]), static_cast<double>(s.reached[k]));
}

}  // namespace tandem::roles
