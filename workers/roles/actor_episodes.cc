// The actor's workflow episodes (actor_episodes.h).
#include "workers/roles/actor_episodes.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <span>
#include <thread>

#include "common/log.h"
#include "workers/agents/proxy_role.h"
#include "workers/roles/actor_rollouts.h"
#include "workers/roles/model_wait.h"
#include "workers/roles/port_file.h"

namespace tandem::roles {
namespace {

constexpr size_t kKeptErrors = 5;

// One episode's outcome, before its session is cut.
struct Outcome {
  Status status;
  agents::Episode episode;
  std::vector<agents::EpisodeSequence> sequences;
  std::string sample;  // episode 0's: EpisodeStats::sample
};

// A session's conversation after its first prompt: its last call's tokens,
// decoded with the special ones shown, cut at kSampleBytes.
std::string SampleOf(const agents::SessionExport& e, const data::Tokenizer& tokenizer) {
  if (e.turns.empty()) return "";
  const agents::TokenRecord& last = e.turns.back();
  const size_t from = std::min(e.turns.front().prompt_tokens, last.ids.size());
  StatusOr<std::string> text = tokenizer.Decode(std::span<const int32_t>(last.ids).subspan(from), {});
  if (!text.ok()) return "(" + text.status().ToString() + ")";
  return text->size() > kSampleBytes ? text->substr(0, kSampleBytes) + "..." : *text;
}

}  // namespace

Status CheckEpisodeOptions(const ActorOptions& o) {
  TANDEM_RETURN_IF_ERROR(agents::MakeWorkflow(o.workflow).status(), "actor: --workflow");
  if (o.advantage_unit != "turn" && o.advantage_unit != "episode")
    return InvalidArgument("actor: --advantage-unit: expected episode or turn, got " + o.advantage_unit);
  if (o.episode_threads < 1 || o.episode_threads > 4096)
    return InvalidArgument("actor: --episode-threads: expected 1 to 4096");
  return Status::Ok();
}

namespace {

// Proxy options over `replicas` replicas whose port files are `pattern`
// ("{rank}" replaced).
StatusOr<agents::ProxyOptions> ProxyOver(const ActorOptions& o, const std::string& job, const std::string& pattern,
                                         int64_t replicas) {
  agents::ProxyOptions po;
  TANDEM_ASSIGN_OR_RETURN(po.replicas.port_files, agents::ReplicaPortFiles(pattern, static_cast<int>(replicas)));
  po.replicas.host = o.rollout_host;
  po.replicas.job = job;
  po.request_timeout = Millis(o.request_timeout_s);
  po.pause_wait = Millis(o.phase_timeout_s);
  return po;
}

agents::ChatEndpointOptions ClientOf(const ActorOptions& o, int port) {
  agents::ChatEndpointOptions c;
  c.port = port;
  c.timeout = Millis(o.request_timeout_s + 5);  // the proxy's own deadline answers first
  return c;
}

}  // namespace

StatusOr<std::unique_ptr<EpisodeRunner>> EpisodeRunner::Start(const ActorOptions& o, const std::string& job,
                                                             data::Tokenizer tokenizer) {
  TANDEM_RETURN_IF_ERROR(CheckEpisodeOptions(o));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<agents::Workflow> workflow, agents::MakeWorkflow(o.workflow), "actor: --workflow");
  const agents::AdvantageUnit unit =
      o.advantage_unit == "turn" ? agents::AdvantageUnit::kTurn : agents::AdvantageUnit::kEpisode;
  std::unique_ptr<EpisodeRunner> r(new EpisodeRunner(o, std::move(workflow), unit, tokenizer));
  TANDEM_ASSIGN_OR_RETURN(agents::ProxyOptions po, ProxyOver(o, job, o.rollout_port_file, o.rollouts), "actor");
  r->proxy_ = std::make_unique<agents::Proxy>(std::move(tokenizer), po);
  TANDEM_RETURN_IF_ERROR(r->proxy_->Start(), "actor: the workflow's proxy");
  r->client_ = std::make_unique<agents::ChatClient>(ClientOf(o, r->proxy_->port()));
  if (!o.proxy_port_file.empty())
    TANDEM_RETURN_IF_ERROR(WritePortFile(o.proxy_port_file, r->proxy_->port()), "actor: --proxy-port-file");
  if (r->workflow_->user_endpoint() != nullptr) TANDEM_RETURN_IF_ERROR(r->StartUser(job));
  log::Info("actor", "workflow {} through the proxy on port {} ({} advantages)", r->workflow_->name(),
            r->proxy_->port(), o.advantage_unit);
  return r;
}

Status EpisodeRunner::StartUser(const std::string& job) {
  const agents::UserEndpoint& u = *workflow_->user_endpoint();
  agents::ChatEndpointOptions c;
  if (!u.port_file.empty()) {
    TANDEM_RETURN_IF_ERROR(WaitForModelDir(u.tokenizer, o_.wait_for_model_s, "actor: the simulated user"));
    TANDEM_ASSIGN_OR_RETURN(data::Tokenizer tok, data::Tokenizer::FromDirectory(u.tokenizer),
                            "actor: the simulated user's tokenizer");
    TANDEM_ASSIGN_OR_RETURN(agents::ProxyOptions po, ProxyOver(o_, job, u.port_file, u.replicas),
                            "actor: the simulated user");
    user_proxy_ = std::make_unique<agents::Proxy>(std::move(tok), po);
    TANDEM_RETURN_IF_ERROR(user_proxy_->Start(), "actor: the simulated user's proxy");
    c = ClientOf(o_, user_proxy_->port());
    log::Info("actor", "the simulated user through a proxy on port {} over {} ({} replicas)", user_proxy_->port(),
              u.port_file, u.replicas);
  } else {
    TANDEM_ASSIGN_OR_RETURN(c, agents::ParseChatUrl(u.url), "actor: the simulated user");
    c.timeout = Millis(o_.request_timeout_s);
    if (!u.api_key_file.empty()) {
      TANDEM_ASSIGN_OR_RETURN(c.api_key, agents::ReadApiKey(u.api_key_file), "actor: the simulated user");
    }
    log::Info("actor", "the simulated user at {}{}", u.url, u.api_key_file.empty() ? "" : " (with a key)");
  }
  c.model = u.model;
  user_client_ = std::make_unique<agents::ChatClient>(c);
  return Status::Ok();
}

EpisodeRunner::~EpisodeRunner() {
  if (user_proxy_) user_proxy_->Stop();
  if (proxy_) proxy_->Stop();
}

void EpisodeRunner::Pause() {
  proxy_->Pause();
  if (user_proxy_) user_proxy_->Pause();
}

void EpisodeRunner::Resume() {
  proxy_->Resume();
  if (user_proxy_) user_proxy_->Resume();
}

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
      ctx.user = user_client_.get();
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
        if (i == 0 && exported.ok()) out.sample = SampleOf(*exported, tokenizer_);
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
  if (!outcomes.empty()) st.sample = std::move(outcomes.front().sample);
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
