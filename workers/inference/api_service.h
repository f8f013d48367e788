// What the rollout's and the teacher's HTTP APIs share (http_api.h,
// score_api.h): the io thread that runs an HttpServer, a mailbox through
// which engine threads post to it, the per-(endpoint, status) response
// counts for /metrics, the mapping of Status codes to HTTP, and the
// endpoints both serve the same way (/get_model_info's body).
//
// Threading: Start, Stop and port() from the owner's thread; Reply,
// ReplyError, Allow and responses() on the io thread only (inside handlers
// and posted work); Mailbox::Post from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/inference/engine.h"
#include "workers/inference/http_server.h"

namespace tandem::inference {

// InvalidArgument 400, NotFound 404, FailedPrecondition 409,
// PermissionDenied 403, ResourceExhausted and Unavailable 503,
// DeadlineExceeded 504, anything else 500; `code` is the error body's.
struct HttpError {
  int status;
  const char* code;
};
HttpError ToHttp(StatusCode code);

// Posts work to the io thread from any thread, until closed (an engine may
// call a callback after the server stopped).
class Mailbox {
 public:
  explicit Mailbox(boost::asio::io_context* io) : io_(io) {}
  template <typename F>
  void Post(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    if (open_) boost::asio::post(*io_, std::forward<F>(f));
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }

 private:
  std::mutex mu_;
  boost::asio::io_context* io_;
  bool open_ = true;
};

using ResponseCounts = std::map<std::pair<std::string, int>, uint64_t>;  // (endpoint, status) -> count

class ApiService {
 public:
  // `component` names the log lines ("inference-api", "teacher-api").
  ApiService(std::string component, HttpLimits limits, int retry_after_s);
  ~ApiService();  // Stop()
  ApiService(const ApiService&) = delete;
  ApiService& operator=(const ApiService&) = delete;

  boost::asio::io_context& io() { return io_; }
  const std::shared_ptr<Mailbox>& mailbox() const { return mailbox_; }

  // Binds (port 0 picks one) and starts the io thread running `handler`.
  // `counter` (read once a second on the io thread) is what rate() reports
  // the growth of: the tokens generated or scored.
  Status Start(const std::string& host, int port, bool allow_remote, HttpHandler handler,
               std::function<uint64_t()> counter);
  int port() const;
  // On the io thread: runs `before_close` (the owner aborts what is in
  // flight), closes every connection and the mailbox; then joins the
  // thread. Idempotent; not from the io thread.
  void Stop(const std::function<void()>& before_close = {});
  const HttpCounters& counters() const { return server_->counters(); }

  void Reply(const std::shared_ptr<HttpExchange>& ex, const std::string& endpoint, int status,
             const nlohmann::json& body, const HttpHeaders& headers = {});
  // The error body of `st` with ToHttp's status; a 503 carries Retry-After.
  void ReplyError(const std::shared_ptr<HttpExchange>& ex, const std::string& endpoint, const Status& st);
  // True when the request's method is one of `methods`; else answers 405
  // with Allow and returns false.
  bool Allow(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex, const std::string& endpoint,
             std::initializer_list<std::string_view> methods);
  // GET /health (200 while `health` is ok, else 503 with its message) and
  // GET /get_model_info, as both APIs serve them. False, answering nothing,
  // for another path.
  bool ServeInfo(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex,
                 const std::function<Status()>& health, const std::function<EngineInfo()>& info, bool is_generation);
  // 404 naming the path.
  void ReplyNoEndpoint(const std::shared_ptr<HttpExchange>& ex, const std::string& path);
  // Counts a response sent some other way (a stream, /metrics' text).
  void Count(const std::string& endpoint, int status) { ++responses_[{endpoint, status}]; }
  const ResponseCounts& responses() const { return responses_; }
  // The counter's growth per second over the last ~10 s (io thread).
  double rate() const;

 private:
  void SampleRate();

  const std::string component_;
  const HttpLimits limits_;
  const int retry_after_s_;
  boost::asio::io_context io_;  // before what uses it: destroyed after it
  std::shared_ptr<Mailbox> mailbox_ = std::make_shared<Mailbox>(&io_);
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
  std::function<uint64_t()> counter_;
  boost::asio::steady_timer rate_timer_{io_};
  // io thread only:
  ResponseCounts responses_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> samples_;
};


}  // namespace tandem::inference
