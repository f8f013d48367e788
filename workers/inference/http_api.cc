// The rollout worker's HTTP API; see http_api.h for the endpoints and the contract.
#include "workers/inference/http_api.h"

#include <atomic>
#include <map>
#include <mutex>
#include <optional>

#include <boost/asio/post.hpp>

#include "common/bounded_json.h"
#include "common/log.h"
#include "workers/inference/api_metrics.h"
#include "workers/inference/api_service.h"

namespace tandem::inference {

namespace asio = boost::asio;
using json = nlohmann::json;

namespace {

// One POST /generate: its prompts, the engine's id for each, and every
// sample's progress (prompt-major).
struct GenerateCall {
  std::shared_ptr<HttpExchange> ex;
  GenerateBody body;
  std::vector<RequestId> ids;        // per prompt; 0 until submitted
  std::vector<size_t> first_sample;  // per prompt: the index of its sample 0
  std::vector<SampleProgress> samples;
  size_t finished = 0;
  int64_t weight_version = 0;
};

}  // namespace

struct HttpApiServer::Impl {
  Engine& engine;
  HttpApiOptions options;
  ApiService api;

  // io thread only:
  std::map<uint64_t, std::shared_ptr<GenerateCall>> calls;
  uint64_t next_call = 0;
  std::atomic<int64_t> open_calls{0};

  Impl(Engine& e, HttpApiOptions o)
      : engine(e), options(std::move(o)), api("inference-api", options.http, options.retry_after_s) {}

  void Handle(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex);

  void Generate(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex);
  void OnUpdate(uint64_t key, size_t prompt, SampleUpdate update);
  void Complete(uint64_t key);
  void AbortCall(uint64_t key, std::string_view why);
  std::string SampleId(const GenerateCall& call, size_t prompt, int64_t sample) const;
  json SampleBody(const GenerateCall& call, size_t index) const;

  void Pause(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex);
  void Continue(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex);
  void Metrics(const std::shared_ptr<HttpExchange>& ex);
};

void HttpApiServer::Impl::Handle(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex) {
  const std::string& p = req.path;
  if (api.ServeInfo(req, ex, [this] { return engine.Health(); }, [this] { return engine.Info(); }, true)) return;
  if (p == "/generate") {
    if (api.Allow(req, ex, p, {"POST"})) Generate(req, ex);
  } else if (p == "/flush_cache") {
    if (!api.Allow(req, ex, p, {"POST", "GET"})) return;
    const Status st = engine.FlushCache();
    if (st.ok()) log::Info("inference-api", "flushed the prefix cache");
    if (st.ok()) api.Reply(ex, p, 200, {{"flushed", true}});
    else api.ReplyError(ex, p, st);
  } else if (p == "/pause_generation") {
    if (api.Allow(req, ex, p, {"POST"})) Pause(req, ex);
  } else if (p == "/continue_generation") {
    if (api.Allow(req, ex, p, {"POST"})) Continue(req, ex);
  } else if (p == "/metrics") {
    if (api.Allow(req, ex, p, {"GET"})) Metrics(ex);
  } else {
    api.ReplyNoEndpoint(ex, p);
  }
}

namespace {

// A control body: empty, or a JSON object of only `fields` (each a string).
StatusOr<json> ControlBody(const std::string& body, std::initializer_list<std::string_view> fields) {
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return json::object();
  auto j = ParseJsonBounded(body, 4);
  if (!j.ok()) return j.status().WithContext("body");
  if (!j->is_object()) return InvalidArgument(std::string("body: expected a JSON object, got ") + j->type_name());
  for (const auto& [key, value] : j->items()) {
    bool known = false;
    for (const auto f : fields) known = known || key == f;
    if (!known) return InvalidArgument("unknown field \"" + key.substr(0, 64) + "\"");
    if (!value.is_string()) return InvalidArgument(key + ": expected a string, got " + value.type_name());
  }
  return j;
}

}  // namespace

void HttpApiServer::Impl::Pause(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex) {
  const std::string ep = "/pause_generation";
  auto body = ControlBody(req.body, {"mode"});
  if (!body.ok()) return api.ReplyError(ex, ep, body.status());
  const std::string name = body->value("mode", "abort");  // SGLang's default
  const StatusOr<PauseMode> mode = ParsePauseMode(name.substr(0, 64));
  if (!mode.ok()) return api.ReplyError(ex, ep, mode.status());
  const Status st = engine.Pause(*mode);
  if (!st.ok()) return api.ReplyError(ex, ep, st);
  log::Info("inference-api", "paused generation mode={}", name);
  api.Reply(ex, ep, 200, {{"paused", true}, {"mode", name}});
}

void HttpApiServer::Impl::Continue(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex) {
  const std::string ep = "/continue_generation";
  auto body = ControlBody(req.body, {});
  if (!body.ok()) return api.ReplyError(ex, ep, body.status());
  const Status st = engine.Continue();
  if (!st.ok()) return api.ReplyError(ex, ep, st);
  log::Info("inference-api", "continued generation");
  api.Reply(ex, ep, 200, {{"paused", false}});
}

void HttpApiServer::Impl::Metrics(const std::shared_ptr<HttpExchange>& ex) {
  ApiMetrics m;
  m.stats = engine.Stats();
  m.weight_version = engine.Info().weight_version;
  m.http = &api.counters();
  m.open_generate_calls = static_cast<int64_t>(calls.size());
  m.responses = &api.responses();
  m.tokens_per_second = api.rate();
  api.Count("/metrics", 200);
  ex->Respond(200, "text/plain; version=0.0.4; charset=utf-8", PrometheusText(m));
}

// ---- POST /generate ----

std::string HttpApiServer::Impl::SampleId(const GenerateCall& call, size_t prompt, int64_t sample) const {
  const std::string rid = std::to_string(call.ids[prompt]);
  return call.body.prompts[prompt].params.n == 1 ? rid : rid + "-" + std::to_string(sample);
}

json HttpApiServer::Impl::SampleBody(const GenerateCall& call, size_t index) const {
  size_t prompt = 0;
  while (prompt + 1 < call.first_sample.size() && call.first_sample[prompt + 1] <= index) ++prompt;
  const auto sample = static_cast<int64_t>(index - call.first_sample[prompt]);
  return SampleJson(call.body.prompts[prompt], SampleId(call, prompt, sample), call.samples[index],
                    call.weight_version, options.codec.get());
}

void HttpApiServer::Impl::Generate(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex) {
  const std::string ep = "/generate";
  const EngineInfo info = engine.Info();
  GenerateLimits limits = options.generate;
  limits.vocab_size = info.vocab_size;
  limits.max_context_length = info.max_context_length;
  auto parsed = ParseGenerateBody(req.body, limits, options.codec.get());
  if (!parsed.ok()) return api.ReplyError(ex, ep, parsed.status());

  auto call = std::make_shared<GenerateCall>();
  call->ex = ex;
  call->body = std::move(parsed).value();
  call->weight_version = info.weight_version;
  call->ids.assign(call->body.prompts.size(), 0);
  for (const auto& prompt : call->body.prompts) {
    call->first_sample.push_back(call->samples.size());
    call->samples.resize(call->samples.size() + static_cast<size_t>(prompt.params.n));
  }
  const uint64_t key = ++next_call;
  for (size_t p = 0; p < call->body.prompts.size(); ++p) {
    auto mailbox_ref = api.mailbox();
    SampleCallback cb = [mailbox_ref, this, key, p](SampleUpdate u) {
      mailbox_ref->Post([this, key, p, update = std::move(u)]() mutable { OnUpdate(key, p, std::move(update)); });
    };
    auto id = engine.Submit(call->body.prompts[p], std::move(cb));
    if (!id.ok()) {
      for (size_t q = 0; q < p; ++q) engine.Abort(call->ids[q]);
      Status st = id.status();
      if (call->body.prompts.size() > 1) st = st.WithContext("prompt " + std::to_string(p));
      return api.ReplyError(ex, ep, st);
    }
    call->ids[p] = *id;
  }
  calls[key] = call;
  open_calls = static_cast<int64_t>(calls.size());
  ex->OnClose([this, key] {
    AbortCall(key, "the connection closed (the client went away, was dropped, or the server stopped)");
  });
  if (call->body.stream) {
    api.Count(ep, 200);
    ex->BeginStream("text/event-stream");
  }
}

void HttpApiServer::Impl::OnUpdate(uint64_t key, size_t prompt, SampleUpdate u) {
  auto it = calls.find(key);
  if (it == calls.end()) return;  // answered or aborted already
  const std::shared_ptr<GenerateCall> hold = it->second;  // a Write that drops the client erases it
  GenerateCall& call = *hold;
  const int64_t n = call.body.prompts[prompt].params.n;
  if (u.sample < 0 || u.sample >= n) {
    log::Error("inference-api", "engine sent an update for sample {} of request {} (n={}); ignored", u.sample,
               call.ids[prompt], n);
    return;
  }
  const size_t index = call.first_sample[prompt] + static_cast<size_t>(u.sample);
  SampleProgress& s = call.samples[index];
  if (s.result) return;  // finished already (engine contract: it does not happen)
  s.output_ids.insert(s.output_ids.end(), u.new_ids.begin(), u.new_ids.end());
  s.output_token_logprobs.insert(s.output_token_logprobs.end(), u.new_logprobs.begin(), u.new_logprobs.end());
  if (u.finished) {
    s.result = std::move(u.finished);
    ++call.finished;
  }
  if (call.body.stream) {
    json chunk = SampleBody(call, index);
    if (call.body.AnswersList()) chunk["index"] = index;
    const std::shared_ptr<HttpExchange> ex = call.ex;
    ex->Write("data: " + DumpJson(chunk) + "\n\n");
    // A dropped reader: Write closed the exchange and AbortCall ran.
    if (calls.find(key) == calls.end()) return;
  }
  if (call.finished == call.samples.size()) Complete(key);
}

void HttpApiServer::Impl::Complete(uint64_t key) {
  auto it = calls.find(key);
  if (it == calls.end()) return;
  std::shared_ptr<GenerateCall> call = it->second;
  calls.erase(it);
  open_calls = static_cast<int64_t>(calls.size());
  call->ex->OnClose(nullptr);
  if (call->body.stream) {
    call->ex->Write("data: [DONE]\n\n");
    call->ex->End();
    return;
  }
  json out;
  if (call->body.AnswersList()) {
    out = json::array();
    for (size_t i = 0; i < call->samples.size(); ++i) out.push_back(SampleBody(*call, i));
  } else {
    out = SampleBody(*call, 0);
  }
  api.Reply(call->ex, "/generate", 200, out);
}

void HttpApiServer::Impl::AbortCall(uint64_t key, std::string_view why) {
  auto it = calls.find(key);
  if (it == calls.end()) return;
  std::shared_ptr<GenerateCall> call = it->second;
  calls.erase(it);
  open_calls = static_cast<int64_t>(calls.size());
  std::string ids;
  for (const RequestId id : call->ids) {
    engine.Abort(id);
    ids += (ids.empty() ? "" : ",") + std::to_string(id);
  }
  log::Info("inference-api", "aborted requests: {} ids={} finished_samples={}/{}", why, ids, call->finished,
            call->samples.size());
}

// ---- the server ----

HttpApiServer::HttpApiServer(Engine& engine, HttpApiOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {}

HttpApiServer::~HttpApiServer() { Stop(); }

Status HttpApiServer::Start() {
  Impl* raw = impl_.get();
  TANDEM_RETURN_IF_ERROR(raw->api.Start(raw->options.host, raw->options.port, raw->options.allow_remote,
                                        [raw](const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
                                          raw->Handle(req, ex);
                                        },
                                        [raw] { return raw->engine.Stats().generated_tokens_total; }));
  return Status::Ok();
}

int HttpApiServer::port() const { return impl_->api.port(); }

void HttpApiServer::Stop() {
  Impl* raw = impl_.get();
  raw->api.Stop([raw] {
    // Closing each open exchange (after this) aborts its requests; these are
    // the calls whose exchange is gone already.
    for (const auto& [key, call] : raw->calls)
      for (const RequestId id : call->ids) raw->engine.Abort(id);
    raw->calls.clear();
    raw->open_calls = 0;
  });
}

const HttpCounters& HttpApiServer::http_counters() const { return impl_->api.counters(); }

int64_t HttpApiServer::open_generate_calls() const { return impl_->open_calls.load(); }

}  // namespace tandem::inference
