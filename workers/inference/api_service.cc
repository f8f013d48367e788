// The HTTP APIs' shared io thread, counters and replies (api_service.h).
#include "workers/inference/api_service.h"

#include <exception>
#include <future>

#include "common/bounded_json.h"
#include "common/log.h"
#include "workers/inference/generate_json.h"

namespace tandem::inference {

namespace asio = boost::asio;
using json = nlohmann::json;

HttpError ToHttp(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument: return {400, "invalid_argument"};
    case StatusCode::kNotFound: return {404, "not_found"};
    case StatusCode::kFailedPrecondition: return {409, "failed_precondition"};
    case StatusCode::kResourceExhausted: return {503, "resource_exhausted"};
    case StatusCode::kUnavailable: return {503, "unavailable"};
    case StatusCode::kPermissionDenied: return {403, "permission_denied"};
    case StatusCode::kDeadlineExceeded: return {504, "deadline_exceeded"};
    default: return {500, "internal"};
  }
}

ApiService::ApiService(std::string component, HttpLimits limits, int retry_after_s)
    : component_(std::move(component)), limits_(limits), retry_after_s_(retry_after_s) {}

ApiService::~ApiService() { Stop(); }

Status ApiService::Start(const std::string& host, int port, bool allow_remote, HttpHandler handler,
                         std::function<uint64_t()> counter) {
  if (server_) return FailedPrecondition("the HTTP API is started already");
  counter_ = std::move(counter);
  server_ = std::make_unique<HttpServer>(io_, std::move(handler), limits_);
  if (Status st = server_->Listen(host, port, allow_remote); !st.ok()) {
    server_.reset();
    return st.WithContext("HTTP API");
  }
  work_.emplace(asio::make_work_guard(io_));
  asio::post(io_, [this] { SampleRate(); });
  thread_ = std::thread([this] {
    // Handlers catch their own exceptions (http_server); this is the last guard.
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        log::Error(component_, "io thread caught error={}", e.what());
      }
    }
  });
  return Status::Ok();
}

int ApiService::port() const { return server_ ? server_->port() : 0; }

void ApiService::Stop(const std::function<void()>& before_close) {
  if (stopped_ || !thread_.joinable()) return;
  stopped_ = true;
  std::promise<void> closed;
  asio::post(io_, [this, &before_close, &closed] {
    rate_timer_.cancel();
    if (before_close) before_close();
    server_->Close();  // each open exchange's OnClose runs
    mailbox_->Close();
    closed.set_value();
  });
  closed.get_future().wait();
  work_.reset();
  io_.stop();
  thread_.join();
  // What is still queued (aborted socket operations) runs against closed
  // sessions and finishes; then the io context holds nothing.
  io_.restart();
  io_.run();
}

namespace {
constexpr auto kRateWindow = std::chrono::seconds(10);
}  // namespace

void ApiService::SampleRate() {
  const auto now = std::chrono::steady_clock::now();
  samples_.emplace_back(now, counter_ ? counter_() : 0);
  while (samples_.size() > 1 && now - samples_.front().first > kRateWindow) samples_.pop_front();
  rate_timer_.expires_after(std::chrono::seconds(1));
  rate_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && !stopped_) SampleRate();
  });
}

double ApiService::rate() const {
  if (samples_.empty() || !counter_) return 0;
  const auto& [t0, n0] = samples_.front();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t n = counter_();
  return dt > 0 && n >= n0 ? static_cast<double>(n - n0) / dt : 0;
}

void ApiService::Reply(const std::shared_ptr<HttpExchange>& ex, const std::string& endpoint, int status,
                       const json& body, const HttpHeaders& headers) {
  Count(endpoint, status);
  ex->RespondJson(status, body, headers);
}

void ApiService::ReplyError(const std::shared_ptr<HttpExchange>& ex, const std::string& endpoint, const Status& st) {
  const HttpError e = ToHttp(st.code());
  HttpHeaders headers;
  if (e.status == 503) headers.emplace_back("Retry-After", std::to_string(retry_after_s_));
  if (e.status >= 500) log::Warn(component_, "answered {} path={} error={}", e.status, endpoint, st.message());
  else log::Debug(component_, "answered {} path={} error={}", e.status, endpoint, st.message());
  Reply(ex, endpoint, e.status, ErrorJson(e.code, st.message()), headers);
}

bool ApiService::Allow(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex, const std::string& endpoint,
                       std::initializer_list<std::string_view> methods) {
  std::string allowed;
  for (const auto m : methods) {
    if (req.method == m) return true;
    allowed += (allowed.empty() ? "" : ", ") + std::string(m);
  }
  Reply(ex, endpoint, 405,
        ErrorJson("method_not_allowed", req.method.substr(0, 16) + " " + endpoint + ": method not allowed (allowed: " +
                                            allowed + ")"),
        {{"Allow", allowed}});
  return false;
}

bool ApiService::ServeInfo(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex,
                           const std::function<Status()>& health, const std::function<EngineInfo()>& info,
                           bool is_generation) {
  const std::string& p = req.path;
  if (p == "/health") {
    if (!Allow(req, ex, p, {"GET"})) return true;
    const Status st = health();
    if (st.ok()) Reply(ex, p, 200, {{"status", "ok"}});
    else ReplyError(ex, p, Unavailable(st.message()));
    return true;
  }
  if (p != "/get_model_info") return false;
  if (!Allow(req, ex, p, {"GET"})) return true;
  const EngineInfo i = info();
  auto config = ParseJsonBounded(i.config_json);  // SGLang's fields; the config parsed
  Reply(ex, p, 200,
        {{"model_path", i.model_path},
         {"is_generation", is_generation},
         {"config", config.ok() ? *config : json(nullptr)},
         {"max_context_length", i.max_context_length},
         {"vocab_size", i.vocab_size},
         {"weight_version", std::to_string(i.weight_version)}});
  return true;
}

void ApiService::ReplyNoEndpoint(const std::shared_ptr<HttpExchange>& ex, const std::string& path) {
  Reply(ex, "other", 404, ErrorJson("not_found", "no endpoint " + path.substr(0, 128)));
}

}  // namespace tandem::inference
