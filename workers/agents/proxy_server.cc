// The OpenAI-compatible proxy (proxy_server.h): routes, the flow of a call
// between the io thread and the pool, pause, retries, stop.
#include "workers/agents/proxy_server.h"

#include <atomic>
#include <deque>
#include <future>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include "common/bounded_json.h"
#include "common/log.h"
#include "workers/agents/openai_error.h"
#include "workers/agents/proxy_call.h"
#include "workers/agents/upstream_call.h"

namespace tandem::agents {

namespace asio = boost::asio;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using inference::HttpExchange;
using inference::HttpRequest;

namespace {

constexpr std::string_view kSessionsPrefix = "/v1/sessions/";

// One call from its arrival to its answer. Its fields are the io thread's,
// except `gone` (read by the pool) and what the pool fills before posting
// back (prepared).
struct CallState {
  uint64_t key = 0;
  std::shared_ptr<HttpExchange> exchange;
  bool chat = true;
  std::string body, header_session;
  Clock::time_point deadline;
  std::atomic<bool> gone{false};
  PreparedCall prepared;
  std::vector<bool> tried;
  std::shared_ptr<UpstreamCall> upstream;
  std::optional<asio::steady_timer> timer;
  bool waiting_paused = false;
  std::string last_error;
  std::string answer_id;
  int64_t created = 0;
  // A stream forwarded as the rollout generates (proxy_call.h ForwardsStream).
  bool forward_stream = false;  // io thread, from here down to `strand`
  std::string stream_body;      // the /generate body with "stream": true
  bool streaming = false;       // the client's stream has begun: no retry from here
  uint64_t attempt = 0;         // bumped at each dispatch; older attempts' events are dropped
  std::string sse;              // bytes of events not yet complete
  Answer head;                  // id, created, model of every chunk
  std::optional<asio::strand<asio::thread_pool::executor_type>> strand;  // the call's events, in order
  StreamState stream;           // the strand's
  uint64_t stream_attempt = 0;  // the strand's: the attempt `stream` belongs to
};

std::string NewAnswerId(bool chat) {
  static constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = chat ? "chatcmpl-" : "cmpl-";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % kAlphabet.size()];
  return id;
}

// The message of a rollout's {"error": {"message": ...}}, else the body's start.
std::string RolloutMessage(const std::string& body) {
  auto j = ParseJsonBounded(body, 8);
  if (j.ok() && j->is_object() && j->contains("error") && (*j)["error"].is_object() &&
      (*j)["error"].contains("message") && (*j)["error"]["message"].is_string())
    return (*j)["error"]["message"].get<std::string>();
  return body.substr(0, 300);
}

}  // namespace

struct Proxy::Impl {
  Impl(data::Tokenizer t, ProxyOptions o)
      : tokenizer(std::move(t)),
        options(std::move(o)),
        sessions(options.sessions),
        pool(static_cast<size_t>(std::max(1, options.worker_threads))),
        replicas(options.replicas) {
    ctx.tokenizer = &tokenizer;
    ctx.sessions = &sessions;
    ctx.limits = options.request;
  }

  data::Tokenizer tokenizer;
  const ProxyOptions options;
  SessionStore sessions;
  CallContext ctx;
  // Before `io`, so destroyed after it: handlers the io_context still holds
  // at its destruction may own the last reference to a call, whose strand
  // is the pool's.
  asio::thread_pool pool;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::thread io_thread;
  std::unique_ptr<inference::HttpServer> server;
  ReplicaSet replicas;  // io thread
  std::map<uint64_t, std::shared_ptr<CallState>> calls;  // io thread
  std::deque<std::shared_ptr<CallState>> paused_calls;   // io thread
  uint64_t next_key = 1;
  bool stopping = false;  // io thread
  std::atomic<bool> started{false}, stopped{false}, paused{false};
  std::atomic<size_t> n_calls{0}, n_paused{0};
  std::atomic<uint64_t> n_retried{0};

  // --- answers (io thread)
  void Forget(const std::shared_ptr<CallState>& c) {
    if (c->timer) c->timer->cancel();
    if (c->waiting_paused) {
      c->waiting_paused = false;
      std::erase(paused_calls, c);
      n_paused = paused_calls.size();
    }
    calls.erase(c->key);
    n_calls = calls.size();
  }
  void RespondError(const std::shared_ptr<CallState>& c, const ApiError& e) {
    Forget(c);
    if (c->gone || c->exchange->closed()) return;
    inference::HttpHeaders extra;
    if (e.http_status == 503 || e.http_status == 429)
      extra.emplace_back("Retry-After", std::to_string(options.retry_after_s));
    c->exchange->RespondJson(e.http_status, ApiErrorJson(e), extra);
  }
  void RespondStatus(const std::shared_ptr<CallState>& c, const Status& s) { RespondError(c, ApiErrorFrom(s)); }

  // --- routes (io thread)
  void Handle(const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
    const std::string& p = req.path;
    if (p == "/v1/chat/completions" || p == "/v1/completions") {
      if (req.method != "POST") return MethodNotAllowed(ex, "POST");
      return Accept(req, std::move(ex), p == "/v1/chat/completions");
    }
    if (p == "/v1/models") {
      if (req.method != "GET") return MethodNotAllowed(ex, "GET");
      return ex->RespondJson(200, {{"object", "list"},
                                   {"data", json::array({{{"id", options.model},
                                                          {"object", "model"},
                                                          {"created", 0},
                                                          {"owned_by", "tandem"}}})}});
    }
    if (p == "/health") {
      replicas.Pick("", std::vector<bool>(replicas.size(), false));  // reads the port files of those down
      size_t up = 0;
      for (size_t i = 0; i < replicas.size(); ++i) up += replicas.up(i) ? 1 : 0;
      return ex->RespondJson(up > 0 ? 200 : 503, {{"status", up > 0 ? "ok" : "no replica up"},
                                                  {"replicas_up", up},
                                                  {"replicas", replicas.size()},
                                                  {"paused", paused.load()}});
    }
    if (p == "/metrics") {
      if (req.method != "GET") return MethodNotAllowed(ex, "GET");
      return ex->Respond(200, "text/plain; version=0.0.4", Metrics());
    }
    if (p == "/pause_generation" || p == "/continue_generation") {
      if (req.method != "POST") return MethodNotAllowed(ex, "POST");
      if (p == "/pause_generation") {
        SetPaused(true);
      } else {
        SetPaused(false);
      }
      return ex->RespondJson(200, {{"paused", paused.load()}});
    }
    if (p.starts_with(kSessionsPrefix)) {
      const std::string id = p.substr(kSessionsPrefix.size());
      if (Status s = CheckSessionId(id, "session"); !s.ok()) return ex->RespondJson(400, ApiErrorJson(ApiErrorFrom(s)));
      if (req.method == "DELETE") {
        const Status s = sessions.Close(id);
        replicas.ForgetSession(id);
        if (!s.ok()) return ex->RespondJson(404, ApiErrorJson(ApiErrorFrom(s)));
        return ex->RespondJson(200, {{"id", id}, {"deleted", true}});
      }
      if (req.method != "GET") return MethodNotAllowed(ex, "GET, DELETE");
      // The export's JSON is built on the pool.
      asio::post(pool, [this, id, ex] {
        int status = 200;
        std::string body;
        try {
          auto e = sessions.Export(id);
          if (e.ok()) {
            body = DumpJson(ExportJson(*e)) + "\n";
          } else {
            const ApiError err = ApiErrorFrom(e.status());
            status = err.http_status;
            body = DumpJson(ApiErrorJson(err)) + "\n";
          }
        } catch (const std::exception& e) {
          log::Error("proxy", "export failed with an exception session={} what={}", id, e.what());
          status = 500;
          body = DumpJson(ApiErrorJson(ApiErrorFrom(Internal(std::string("internal error: ") + e.what())))) + "\n";
        }
        asio::post(io, [this, ex, status, body = std::move(body)]() mutable {
          if (!stopping && !ex->closed()) ex->Respond(status, "application/json", std::move(body));
        });
      });
      return;
    }
    ApiError e;
    e.http_status = 404;
    e.code = "not_found";
    e.message = "no such endpoint: " + req.method + " " + p.substr(0, 200);
    ex->RespondJson(404, ApiErrorJson(e));
  }

  // Prometheus text (docs/agents.md "Metrics").
  std::string Metrics() const {
    std::string out;
    auto metric = [&out](const char* name, const char* type, const char* help, const std::string& samples) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + samples;
    };
    auto one = [](const char* name, double v) { return std::string(name) + " " + fmt::format("{}", v) + "\n"; };
    size_t up = 0;
    std::string outstanding;
    for (size_t i = 0; i < replicas.size(); ++i) {
      up += replicas.up(i) ? 1 : 0;
      outstanding += fmt::format("tandem_proxy_replica_outstanding_calls{{replica=\"{}\"}} {}\n", i, replicas.outstanding(i));
    }
    metric("tandem_proxy_calls_in_flight", "gauge", "calls accepted and not yet answered",
           one("tandem_proxy_calls_in_flight", static_cast<double>(n_calls.load())));
    metric("tandem_proxy_calls_paused", "gauge", "calls waiting while the proxy is paused",
           one("tandem_proxy_calls_paused", static_cast<double>(n_paused.load())));
    metric("tandem_proxy_calls_retried_total", "counter", "calls sent again after a replica failed them",
           one("tandem_proxy_calls_retried_total", static_cast<double>(n_retried.load())));
    metric("tandem_proxy_sessions_open", "gauge", "sessions recorded and not closed",
           one("tandem_proxy_sessions_open", static_cast<double>(sessions.sessions())));
    metric("tandem_proxy_paused", "gauge", "1 while paused", one("tandem_proxy_paused", paused ? 1 : 0));
    metric("tandem_proxy_replicas_up", "gauge", "replicas that can take calls",
           one("tandem_proxy_replicas_up", static_cast<double>(up)));
    metric("tandem_proxy_replica_outstanding_calls", "gauge", "calls at each replica", outstanding);
    return out;
  }

  static void MethodNotAllowed(const std::shared_ptr<HttpExchange>& ex, const std::string& allow) {
    ApiError e;
    e.http_status = 405;
    e.code = "method_not_allowed";
    e.message = "method not allowed; use " + allow;
    ex->RespondJson(405, ApiErrorJson(e), {{"Allow", allow}});
  }

  void Accept(const HttpRequest& req, std::shared_ptr<HttpExchange> ex, bool chat) {
    auto c = std::make_shared<CallState>();
    c->key = next_key++;
    c->exchange = ex;
    c->chat = chat;
    c->body = req.body;
    if (const auto it = req.headers.find("x-session-id"); it != req.headers.end()) {
      c->header_session = it->second;
      if (c->header_session.empty()) c->header_session = " ";  // refused as an id, not taken as "none"
    }
    c->deadline = Clock::now() + options.request_timeout;
    c->tried.assign(replicas.size(), false);
    c->answer_id = NewAnswerId(chat);
    c->strand.emplace(asio::make_strand(pool));
    c->created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    calls[c->key] = c;
    n_calls = calls.size();
    std::weak_ptr<CallState> weak = c;
    ex->OnClose([this, weak] {
      if (auto call = weak.lock()) Gone(call);
    });
    OnPool(c, [this, c] { Prepare(c); });
  }

  void Gone(const std::shared_ptr<CallState>& c) {
    c->gone = true;
    if (c->upstream) c->upstream->Cancel();
    Forget(c);
  }

  // --- the pool's part. Nothing a client sends throws there (errors are
  // values); a bug or an allocation failure that does is answered 500 and
  // logged, never let out of a pool thread.
  template <typename F>
  void Guarded(const std::shared_ptr<CallState>& c, F&& work) {
    try {
      work();
    } catch (const std::exception& e) {
      log::Error("proxy", "call failed with an exception call={} what={}", c->key, e.what());
      asio::post(io, [this, c, what = std::string(e.what())] {
        if (stopping || c->gone) return;
        if (c->streaming) return StreamFailed(c, Internal("internal error: " + what));
        RespondStatus(c, Internal("internal error: " + what));
      });
    }
  }
  template <typename F>
  void OnPool(const std::shared_ptr<CallState>& c, F work) {
    asio::post(pool, [this, c, work = std::move(work)]() mutable { Guarded(c, work); });
  }

  void Prepare(const std::shared_ptr<CallState>& c) {
    if (c->gone) return;
    StatusOr<PreparedCall> p = c->chat ? PrepareChat(c->body, c->header_session, ctx)
                                       : PrepareCompletion(c->body, c->header_session, ctx);
    c->body.clear();
    c->body.shrink_to_fit();
    std::string stream_body;
    if (p.ok() && ForwardsStream(*p)) stream_body = StreamingGenerateBody(*p);
    asio::post(io, [this, c, p = std::move(p), stream_body = std::move(stream_body)]() mutable {
      if (stopping || c->gone) return;
      if (!p.ok()) return RespondStatus(c, p.status());
      c->prepared = std::move(p).value();
      c->forward_stream = !stream_body.empty();
      c->stream_body = std::move(stream_body);
      c->head.id = c->answer_id;
      c->head.created = c->created;
      c->head.model = c->prepared.model.empty() ? options.model : c->prepared.model;
      Dispatch(c);
    });
  }

  void Finish(const std::shared_ptr<CallState>& c, std::string answer) {
    if (c->gone) return;
    StatusOr<FinishedCall> f = FinishCall(c->prepared, answer, ctx, c->answer_id, c->created);
    std::vector<std::string> events;
    std::string body;
    if (f.ok() && !f->aborted) {
      if (f->answer.model.empty()) f->answer.model = options.model;
      if (c->prepared.sampling.stream) {
        events = c->chat ? ChatCompletionEvents(f->answer) : CompletionEvents(f->answer);
      } else {
        body = DumpJson(c->chat ? ChatCompletionJson(f->answer) : CompletionJson(f->answer)) + "\n";
      }
    }
    asio::post(io, [this, c, f = std::move(f), events = std::move(events), body = std::move(body)]() mutable {
      if (stopping || c->gone) return;
      if (!f.ok()) {
        ApiError e;
        e.http_status = 502;
        e.type = "server_error";
        e.code = "bad_gateway";
        e.message = f.status().message();
        return RespondError(c, e);
      }
      if (f->aborted) {
        log::Info("proxy", "call aborted by the rollout, sent again call={}", c->key);
        c->tried.assign(replicas.size(), false);
        ++n_retried;
        return Dispatch(c);
      }
      Forget(c);
      if (c->exchange->closed()) return;
      if (events.empty()) return c->exchange->Respond(200, "application/json", std::move(body));
      c->exchange->BeginStream("text/event-stream");
      for (std::string& e : events) c->exchange->Write(std::move(e));
      c->exchange->End();
    });
  }

  // --- the io thread's part
  void Dispatch(const std::shared_ptr<CallState>& c) {
    if (stopping || c->gone) return;
    const auto now = Clock::now();
    if (now >= c->deadline) return RespondStatus(c, DeadlineExceeded("no answer from the rollout within the call's "
                                                                     "deadline" + LastError(c)));
    if (paused) return Wait(c);
    std::optional<size_t> i = replicas.Pick(c->prepared.session_id, c->tried);
    if (!i && std::find(c->tried.begin(), c->tried.end(), true) != c->tried.end()) {
      c->tried.assign(replicas.size(), false);  // a new round over those back up
      i = replicas.Pick(c->prepared.session_id, c->tried);
    }
    if (!i) {
      if (now + options.retry_wait >= c->deadline)
        return RespondStatus(c, Unavailable("no rollout replica is up" + LastError(c)));
      c->timer.emplace(io);
      c->timer->expires_after(options.retry_wait);
      c->timer->async_wait([this, c](boost::system::error_code ec) {
        if (!ec) Dispatch(c);
      });
      return;
    }
    const size_t r = *i;
    replicas.Begin(r);
    const uint64_t attempt = ++c->attempt;
    if (c->forward_stream) {
      c->sse.clear();
      c->upstream = PostAsync(
          io, replicas.host(), replicas.port(r), "/generate", c->stream_body, c->deadline, options.max_upstream_bytes,
          [this, c, r](UpstreamResult res) { OnUpstream(c, r, std::move(res)); },
          [this, c, attempt](std::string_view bytes) { OnStreamBytes(c, attempt, bytes); });
      return;
    }
    c->upstream = PostAsync(io, replicas.host(), replicas.port(r), "/generate", c->prepared.generate_body, c->deadline,
                            options.max_upstream_bytes,
                            [this, c, r](UpstreamResult res) { OnUpstream(c, r, std::move(res)); });
  }

  // --- a stream forwarded as the rollout generates: its events, in order on
  // the call's strand of the pool; their chunks written on the io thread.
  void OnStreamBytes(const std::shared_ptr<CallState>& c, uint64_t attempt, std::string_view bytes) {
    if (stopping || c->gone || attempt != c->attempt) return;
    c->sse.append(bytes);
    size_t consumed = 0;
    for (size_t end; (end = c->sse.find("\n\n", consumed)) != std::string::npos; consumed = end + 2) {
      std::string_view event = std::string_view(c->sse).substr(consumed, end - consumed);
      if (!event.starts_with("data: ")) continue;
      event.remove_prefix(6);
      if (event == "[DONE]") continue;
      asio::post(*c->strand, [this, c, attempt, e = std::string(event)] {
        Guarded(c, [&] {
          if (c->gone) return;
          if (c->stream_attempt != attempt) {
            c->stream = StreamState{};
            c->stream_attempt = attempt;
          }
          auto chunks = StreamEvent(c->prepared, e, ctx, &c->stream, c->head);
          asio::post(io, [this, c, attempt, chunks = std::move(chunks)]() mutable {
            WriteStream(c, attempt, std::move(chunks), false);
          });
        });
      });
    }
    c->sse.erase(0, consumed);
    if (c->sse.size() > options.max_upstream_bytes) StreamFailed(c, DataLoss("rollout stream: an event over the size limit"));
  }

  void EndStream(const std::shared_ptr<CallState>& c) {
    const uint64_t attempt = c->attempt;
    asio::post(*c->strand, [this, c, attempt] {
      Guarded(c, [&] {
        if (c->gone) return;
        if (c->stream_attempt != attempt) {
          c->stream = StreamState{};
          c->stream_attempt = attempt;
        }
        auto chunks = StreamEnd(c->prepared, ctx, &c->stream, c->head);
        asio::post(io, [this, c, attempt, chunks = std::move(chunks)]() mutable {
          WriteStream(c, attempt, std::move(chunks), true);
        });
      });
    });
  }

  void WriteStream(const std::shared_ptr<CallState>& c, uint64_t attempt, StatusOr<std::vector<std::string>> chunks,
                   bool end) {
    if (stopping || c->gone || attempt != c->attempt) return;
    if (!chunks.ok()) return StreamFailed(c, chunks.status());
    if (!c->streaming) {
      if (chunks->empty() && !end) return;
      c->exchange->BeginStream("text/event-stream");
      c->streaming = true;
    }
    for (std::string& chunk : *chunks) c->exchange->Write(std::move(chunk));
    if (end) {
      c->exchange->End();
      Forget(c);
    }
  }

  // A forwarded stream that cannot go on: before its first chunk, a sample
  // the rollout aborted is sent again and any other error is answered as
  // usual; after it, the stream ends with an error event.
  void StreamFailed(const std::shared_ptr<CallState>& c, const Status& s) {
    if (c->upstream) c->upstream->Cancel();
    if (!c->streaming) {
      if (s.code() == StatusCode::kUnavailable) {
        ++n_retried;
        c->tried.assign(replicas.size(), false);
        return Dispatch(c);
      }
      if (s.code() == StatusCode::kDataLoss) return RespondError(c, BadGateway(s.message()));
      return RespondStatus(c, s);
    }
    log::Warn("proxy", "stream ended by an error call={} error={}", c->key, s.message());
    ApiError e = s.code() == StatusCode::kDataLoss ? BadGateway(s.message()) : ApiErrorFrom(s);
    c->exchange->Write("data: " + DumpJson(ApiErrorJson(e)) + "\n\n");
    c->exchange->End();
    Forget(c);
  }

  static ApiError BadGateway(std::string message) {
    ApiError e;
    e.http_status = 502;
    e.type = "server_error";
    e.code = "bad_gateway";
    e.message = std::move(message);
    return e;
  }

  static std::string LastError(const std::shared_ptr<CallState>& c) {
    return c->last_error.empty() ? std::string() : " (last: " + c->last_error + ")";
  }

  void OnUpstream(const std::shared_ptr<CallState>& c, size_t r, UpstreamResult res) {
    using O = UpstreamResult::Outcome;
    replicas.Done(r, res.outcome == O::kReplicaDown);
    c->upstream.reset();
    if (stopping || c->gone || res.outcome == O::kCancelled) return;
    switch (res.outcome) {
      case O::kOk:
        if (c->forward_stream) return EndStream(c);
        OnPool(c, [this, c, body = std::move(res.body)]() mutable { Finish(c, std::move(body)); });
        return;
      case O::kReplicaDown:
        c->last_error = "replica " + std::to_string(r) + ": " + res.error;
        if (c->streaming) return StreamFailed(c, Unavailable("rollout " + c->last_error + " (mid-stream)"));
        log::Warn("proxy", "replica failed a call, trying another call={} replica={} error={}", c->key, r, res.error);
        c->tried[r] = true;
        ++n_retried;
        return Dispatch(c);
      case O::kTimeout: {
        const Status s = DeadlineExceeded("rollout replica " + std::to_string(r) + ": " + res.error);
        return c->streaming ? StreamFailed(c, s) : RespondStatus(c, s);
      }
      case O::kRefused: {
        ApiError e;
        if (res.http_status == 400) {
          e.message = "rollout: " + RolloutMessage(res.body);
          e.code = "invalid_value";
        } else {
          e = BadGateway("rollout replica " + std::to_string(r) + ": " + res.error);
        }
        if (c->streaming) return StreamFailed(c, Internal(e.message));
        return RespondError(c, e);
      }
      case O::kCancelled:
        return;
    }
  }

  void Wait(const std::shared_ptr<CallState>& c) {
    if (paused_calls.size() >= options.max_paused)
      return RespondStatus(c, Unavailable("the proxy is paused and " + std::to_string(options.max_paused) +
                                          " calls wait already"));
    c->waiting_paused = true;
    paused_calls.push_back(c);
    n_paused = paused_calls.size();
    const auto until = std::min(Clock::now() + options.pause_wait, c->deadline);
    c->timer.emplace(io);
    c->timer->expires_at(until);
    c->timer->async_wait([this, c](boost::system::error_code ec) {
      if (ec || !c->waiting_paused) return;
      RespondStatus(c, Unavailable("the proxy stayed paused longer than the call may wait"));
    });
  }

  void SetPaused(bool on) {
    paused = on;
    if (on) return;
    std::deque<std::shared_ptr<CallState>> waiting;
    waiting.swap(paused_calls);
    n_paused = 0;
    for (auto& c : waiting) {
      c->waiting_paused = false;
      if (c->timer) c->timer->cancel();
      Dispatch(c);
    }
  }
};

Proxy::Proxy(data::Tokenizer tokenizer, ProxyOptions options)
    : impl_(std::make_shared<Impl>(std::move(tokenizer), std::move(options))) {}

Proxy::~Proxy() { Stop(); }

Status Proxy::Start() {
  Impl& m = *impl_;
  if (m.started.exchange(true)) return FailedPrecondition("proxy: already started");
  if (m.replicas.size() == 0) return InvalidArgument("proxy: no rollout replica (port files) given");
  m.server = std::make_unique<inference::HttpServer>(
      m.io, [&m](const HttpRequest& req, std::shared_ptr<HttpExchange> ex) { m.Handle(req, std::move(ex)); },
      m.options.http);
  TANDEM_RETURN_IF_ERROR(m.server->Listen(m.options.host, m.options.port, m.options.allow_remote), "proxy");
  m.guard.emplace(m.io.get_executor());
  m.io_thread = std::thread([&m] { m.io.run(); });
  log::Info("proxy", "serving port={} replicas={} workers={}", m.server->port(), m.replicas.size(),
            m.options.worker_threads);
  return Status::Ok();
}

int Proxy::port() const { return impl_->server ? impl_->server->port() : 0; }

void Proxy::Stop() {
  Impl& m = *impl_;
  if (!m.started || m.stopped.exchange(true)) return;
  if (m.io_thread.joinable()) {
    std::promise<void> closed;
    asio::post(m.io, [&m, &closed] {
      m.stopping = true;
      m.server->Close();
      for (auto& [key, c] : m.calls) {
        c->gone = true;
        if (c->upstream) c->upstream->Cancel();
        if (c->timer) c->timer->cancel();
      }
      m.calls.clear();
      m.paused_calls.clear();
      m.n_calls = 0;
      m.n_paused = 0;
      closed.set_value();
    });
    closed.get_future().wait();
  }
  m.pool.join();
  m.guard.reset();
  m.io.stop();
  if (m.io_thread.joinable()) m.io_thread.join();
}

void Proxy::Pause() {
  Impl& m = *impl_;
  m.paused = true;  // new calls wait from now on
  asio::post(m.io, [&m] { m.SetPaused(true); });  // ordered with Resume's
}

void Proxy::Resume() {
  Impl& m = *impl_;
  asio::post(m.io, [&m] { m.SetPaused(false); });
}

bool Proxy::paused() const { return impl_->paused; }

StatusOr<SessionExport> Proxy::ExportSession(const std::string& id) const { return impl_->sessions.Export(id); }

Status Proxy::CloseSession(const std::string& id) {
  Impl& m = *impl_;
  asio::post(m.io, [&m, id] { m.replicas.ForgetSession(id); });
  return m.sessions.Close(id);
}

size_t Proxy::open_sessions() const { return impl_->sessions.sessions(); }
size_t Proxy::calls_in_flight() const { return impl_->n_calls; }
size_t Proxy::calls_paused() const { return impl_->n_paused; }
uint64_t Proxy::calls_retried() const { return impl_->n_retried; }

}  // namespace tandem::agents
