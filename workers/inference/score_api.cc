// The teacher's HTTP API; see score_api.h for the endpoints and the contract.
#include "workers/inference/score_api.h"

#include <map>

#include "common/log.h"
#include "workers/inference/api_metrics.h"
#include "workers/inference/api_service.h"
#include "workers/inference/generate_json.h"

namespace tandem::inference {

using json = nlohmann::json;

namespace {

struct ScoreCall {
  std::shared_ptr<HttpExchange> ex;
  ScoreRequest request;
  RequestId id = 0;
};

}  // namespace

struct ScoreApiServer::Impl {
  ScoreEngine& engine;
  ScoreApiOptions options;
  ApiService api;
  std::map<uint64_t, std::shared_ptr<ScoreCall>> calls;  // io thread only
  uint64_t next_call = 0;

  Impl(ScoreEngine& e, ScoreApiOptions o)
      : engine(e), options(std::move(o)), api("teacher-api", options.http, options.retry_after_s) {}

  void Handle(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex);
  void Score(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex);
  void Done(uint64_t key, StatusOr<ScoreResult> result);
  void Metrics(const std::shared_ptr<HttpExchange>& ex);
};

void ScoreApiServer::Impl::Handle(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex) {
  const std::string& p = req.path;
  if (api.ServeInfo(req, ex, [this] { return engine.Health(); }, [this] { return engine.Info(); }, false)) return;
  if (p == "/score") {
    if (api.Allow(req, ex, p, {"POST"})) Score(req, ex);
  } else if (p == "/metrics") {
    if (api.Allow(req, ex, p, {"GET"})) Metrics(ex);
  } else {
    api.ReplyNoEndpoint(ex, p);
  }
}

void ScoreApiServer::Impl::Score(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex) {
  const std::string ep = "/score";
  const EngineInfo info = engine.Info();
  ScoreLimits limits = options.score;
  limits.vocab_size = info.vocab_size;
  limits.max_context_length = info.max_context_length;
  StatusOr<ScoreRequest> parsed = ParseScoreBody(req.body, limits);
  if (!parsed.ok()) return api.ReplyError(ex, ep, parsed.status());
  auto call = std::make_shared<ScoreCall>();
  call->ex = ex;
  call->request = *parsed;
  const uint64_t key = ++next_call;
  auto mailbox = api.mailbox();
  StatusOr<RequestId> id = engine.Submit(std::move(parsed).value(), [mailbox, this, key](StatusOr<ScoreResult> r) {
    mailbox->Post([this, key, r = std::move(r)]() mutable { Done(key, std::move(r)); });
  });
  if (!id.ok()) return api.ReplyError(ex, ep, id.status());
  call->id = *id;
  calls[key] = call;
  ex->OnClose([this, key] {
    auto it = calls.find(key);
    if (it == calls.end()) return;
    log::Info("teacher-api", "aborted request id={}: the connection closed", it->second->id);
    engine.Abort(it->second->id);
    calls.erase(it);
  });
}

void ScoreApiServer::Impl::Done(uint64_t key, StatusOr<ScoreResult> result) {
  auto it = calls.find(key);
  if (it == calls.end()) return;  // the client went away
  const std::shared_ptr<ScoreCall> call = it->second;
  calls.erase(it);
  call->ex->OnClose(nullptr);
  if (!result.ok()) return api.ReplyError(call->ex, "/score", result.status());
  api.Reply(call->ex, "/score", 200, ScoreResponseJson(call->request, *result, std::to_string(call->id)));
}

void ScoreApiServer::Impl::Metrics(const std::shared_ptr<HttpExchange>& ex) {
  ScoreApiMetrics m;
  m.stats = engine.Stats();
  m.weight_version = engine.Info().weight_version;
  m.tokens_per_second = api.rate();
  m.http = &api.counters();
  m.open_score_calls = static_cast<int64_t>(calls.size());
  m.responses = &api.responses();
  api.Count("/metrics", 200);
  ex->Respond(200, "text/plain; version=0.0.4; charset=utf-8", ScorePrometheusText(m));
}

ScoreApiServer::ScoreApiServer(ScoreEngine& engine, ScoreApiOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {}

ScoreApiServer::~ScoreApiServer() { Stop(); }

Status ScoreApiServer::Start() {
  Impl* raw = impl_.get();
  return raw->api.Start(
      raw->options.host, raw->options.port, raw->options.allow_remote,
      [raw](const HttpRequest& req, std::shared_ptr<HttpExchange> ex) { raw->Handle(req, ex); },
      [raw] { return raw->engine.Stats().scored_tokens_total; });
}

int ScoreApiServer::port() const { return impl_->api.port(); }

void ScoreApiServer::Stop() {
  Impl* raw = impl_.get();
  raw->api.Stop([raw] {
    for (const auto& [key, call] : raw->calls) raw->engine.Abort(call->id);
    raw->calls.clear();
  });
}

}  // namespace tandem::inference
