// A scripted rollout replica for the proxy's tests: the rollout's HTTP
// server (workers/inference/http_server.h) on its own io thread, answering
// POST /generate in SGLang's shape with a fixed reply per sample, or
// misbehaving as told: 503, never answering, answering late. It writes its
// port file as `tandem-worker rollout --port-file` does.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "workers/inference/http_server.h"
#include "workers/roles/port_file.h"

namespace tandem::agents::testing {

class FakeRollout {
 public:
  enum class Mode { kAnswer, k503, kHang };

  // `reply`: the output ids of every sample.
  explicit FakeRollout(std::vector<int32_t> reply) : reply_(std::move(reply)) {
    server_ = std::make_unique<inference::HttpServer>(
        io_, [this](const inference::HttpRequest& req, std::shared_ptr<inference::HttpExchange> ex) {
          Handle(req, std::move(ex));
        });
    const Status s = server_->Listen("127.0.0.1", 0, false);
    if (!s.ok()) throw std::runtime_error(s.ToString());
    thread_ = std::thread([this] { io_.run(); });
  }
  ~FakeRollout() { Stop(); }

  void Stop() {
    if (!thread_.joinable()) return;
    std::promise<void> closed;
    boost::asio::post(io_, [this, &closed] {
      server_->Close();  // the port refuses from now on
      held_.clear();
      timers_.clear();
      closed.set_value();
    });
    closed.get_future().wait();
    work_.reset();
    io_.stop();
    thread_.join();
  }

  int port() const { return server_->port(); }
  void WritePortFile(const std::string& path) const { (void)roles::WritePortFile(path, port()); }
  void set_mode(Mode m) { mode_ = m; }
  // Each sample's output ids from the /generate body (its input_ids), in
  // place of the fixed reply; set before any call (it runs on the io thread).
  void set_replier(std::function<std::vector<int32_t>(const nlohmann::json& body)> f) { replier_ = std::move(f); }
  void set_delay(std::chrono::milliseconds d) { delay_ms_ = d.count(); }
  int calls() const { return calls_; }
  int closed_early() const { return closed_early_; }
  // The bodies of the /generate calls, in order.
  std::vector<nlohmann::json> bodies() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }

 private:
  void Handle(const inference::HttpRequest& req, std::shared_ptr<inference::HttpExchange> ex) {
    if (req.path != "/generate") return ex->RespondError(404, "not_found", "no");
    ++calls_;
    const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    {
      std::lock_guard<std::mutex> lock(mu_);
      bodies_.push_back(body);
    }
    ex->OnClose([this] { ++closed_early_; });
    if (mode_ == Mode::k503) return ex->RespondError(503, "unavailable", "paused");
    if (mode_ == Mode::kHang) return held_.push_back(ex);
    const std::vector<int32_t> reply = replier_ ? replier_(body) : reply_;
    const int n = body.value("sampling_params", nlohmann::json::object()).value("n", 1);
    nlohmann::json list = nlohmann::json::array();
    for (int i = 0; i < n; ++i) {
      nlohmann::json lps = nlohmann::json::array();
      for (const int32_t id : reply) lps.push_back({-0.125, id, nullptr});
      list.push_back({{"output_ids", reply},
                      {"meta_info",
                       {{"finish_reason", {{"type", "stop"}}}, {"weight_version", "5"}, {"output_token_logprobs", lps}}}});
    }
    if (body.value("stream", false)) {
      // SGLang's stream: per sample and token the cumulative object, then [DONE].
      ex->BeginStream("text/event-stream");
      for (size_t k = 1; k <= reply.size(); ++k) {
        for (int i = 0; i < n; ++i) {
          nlohmann::json e = list[static_cast<size_t>(i)];
          e["output_ids"] = std::vector<int32_t>(reply.begin(), reply.begin() + static_cast<std::ptrdiff_t>(k));
          auto& lps = e["meta_info"]["output_token_logprobs"];
          lps = nlohmann::json(std::vector<nlohmann::json>(lps.begin(), lps.begin() + static_cast<std::ptrdiff_t>(k)));
          if (k < reply.size()) e["meta_info"]["finish_reason"] = nullptr;
          if (n > 1) e["index"] = i;
          ex->Write("data: " + e.dump() + "\n\n");
        }
      }
      ex->Write("data: [DONE]\n\n");
      return ex->End();
    }
    std::string answer = (n == 1 ? list[0] : list).dump();
    if (delay_ms_ == 0) return ex->Respond(200, "application/json", answer);
    auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(delay_ms_.load()));
    timers_.push_back(timer);
    timer->async_wait([ex, answer, timer](boost::system::error_code ec) {
      if (!ec) ex->Respond(200, "application/json", answer);
    });
  }

  std::vector<int32_t> reply_;
  std::function<std::vector<int32_t>(const nlohmann::json&)> replier_;
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{io_.get_executor()};
  std::unique_ptr<inference::HttpServer> server_;
  std::thread thread_;
  std::atomic<Mode> mode_{Mode::kAnswer};
  std::atomic<int64_t> delay_ms_{0};
  std::atomic<int> calls_{0}, closed_early_{0};
  std::vector<std::shared_ptr<inference::HttpExchange>> held_;             // io thread
  std::vector<std::shared_ptr<boost::asio::steady_timer>> timers_;        // io thread
  mutable std::mutex mu_;
  std::vector<nlohmann::json> bodies_;
};

}  // namespace tandem::agents::testing
