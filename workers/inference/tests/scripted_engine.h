// Test double for the HTTP API's tests: an Engine (engine.h) with no model
// whose output is a function of the request, so that what the server sends
// can be checked token for token. It keeps engine.h's threading contract:
// its own thread runs one step every `step`, emitting one token per running
// sample and calling the callbacks from that thread.
//
// Script: sample j of a prompt whose last token is L emits at step k the
// token (L + 1 + k + 7j) mod vocab with log-prob -0.5 (k + 1). It stops at a
// token of stop_token_ids (kStop, the token included), when its text (token
// id -> letter 'a' + id mod 26) contains a stop string (kStop, matched_stop
// set), or after max_new_tokens (kLength). cached_tokens is min(2, prompt).
// Also the text codec of the tests: a byte is a token id, a token decodes to
// its letter; byte 0x01 cannot be encoded (an Encode error).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "workers/inference/engine.h"
#include "workers/inference/generate_json.h"

namespace tandem::inference::testing {

inline char Letter(int32_t id) { return static_cast<char>('a' + id % 26); }

class LetterCodec : public TextCodec {
 public:
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto b = static_cast<unsigned char>(text[i]);
      if (b == 0x01) return InvalidArgument("cannot encode byte 0x01 at offset " + std::to_string(i));
      ids.push_back(b);
    }
    return ids;
  }
  StatusOr<std::string> Decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (const int32_t id : ids) s.push_back(Letter(id));
    return s;
  }
};

class ScriptedEngine : public Engine {
 public:
  struct Options {
    int64_t vocab = 1000;
    int64_t context = 256;
    std::chrono::microseconds step{200};
    int64_t weight_version = 7;
  };

  static int32_t Token(int32_t last, int64_t sample, int64_t k, int64_t vocab) {
    return static_cast<int32_t>((last + 1 + k + 7 * sample) % vocab);
  }
  static float Logprob(int64_t k) { return -0.5f * static_cast<float>(k + 1); }

  explicit ScriptedEngine(Options o) : o_(o), thread_([this] { Loop(); }) {}
  ScriptedEngine() : ScriptedEngine(Options{}) {}
  ~ScriptedEngine() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::atomic<bool> full{false};     // Submit answers ResourceExhausted
  std::atomic<bool> refuse{false};   // Submit answers InvalidArgument
  std::atomic<bool> healthy{true};

  StatusOr<RequestId> Submit(GenerateRequest request, SampleCallback cb) override {
    if (full) return ResourceExhausted("the request queue is full (scripted)");
    if (refuse) return InvalidArgument("scripted: this engine refuses the request");
    std::lock_guard<std::mutex> l(mu_);
    const RequestId id = ++next_id_;
    Req r{id, std::move(request), std::move(cb), {}, false};
    r.samples.resize(static_cast<size_t>(r.request.params.n));
    prompt_tokens_ += r.request.input_ids.size();
    reqs_.emplace(id, std::move(r));
    cv_.notify_all();
    return id;
  }
  void Abort(RequestId id) override {
    std::lock_guard<std::mutex> l(mu_);
    abort_calls_.insert(id);
    if (auto it = reqs_.find(id); it != reqs_.end()) it->second.abort = true;
    cv_.notify_all();
  }
  Status Pause(PauseMode mode) override {
    std::lock_guard<std::mutex> l(mu_);
    paused_ = true;
    last_pause_ = mode;
    if (mode == PauseMode::kAbort)
      for (auto& [id, r] : reqs_) r.abort = true;
    cv_.notify_all();
    return Status::Ok();
  }
  Status Continue() override {
    std::lock_guard<std::mutex> l(mu_);
    paused_ = false;
    cv_.notify_all();
    return Status::Ok();
  }
  Status FlushCache() override {
    std::lock_guard<std::mutex> l(mu_);
    if (!reqs_.empty()) return FailedPrecondition("cannot flush the cache: " + std::to_string(reqs_.size()) +
                                                  " requests are running");
    ++flushes_;
    return Status::Ok();
  }
  Status Health() const override { return healthy ? Status::Ok() : Unavailable("scripted: unhealthy"); }
  EngineInfo Info() const override {
    return {"/models/scripted", R"({"model_type": "scripted", "vocab_size": )" + std::to_string(o_.vocab) + "}",
            o_.context, o_.vocab, o_.weight_version};
  }
  EngineStats Stats() const override {
    std::lock_guard<std::mutex> l(mu_);
    EngineStats s;
    s.running_requests = paused_ ? 0 : static_cast<int64_t>(reqs_.size());
    s.queued_requests = paused_ ? static_cast<int64_t>(reqs_.size()) : 0;
    s.generated_tokens_total = generated_;
    s.prompt_tokens_total = prompt_tokens_;
    s.kv_blocks_used = 3;
    s.kv_blocks_free = 97;
    s.prefix_cache_hit_tokens_total = 1;
    s.prefix_cache_query_tokens_total = 4;
    s.paused = paused_;
    s.steps_total = 5;
    s.step_wait_seconds = 0.25;
    return s;
  }

  bool AbortCalled(RequestId id) const {
    std::lock_guard<std::mutex> l(mu_);
    return abort_calls_.count(id) > 0;
  }
  size_t AbortCalls() const {
    std::lock_guard<std::mutex> l(mu_);
    return abort_calls_.size();
  }
  size_t Running() const {
    std::lock_guard<std::mutex> l(mu_);
    return reqs_.size();
  }
  RequestId LastId() const {
    std::lock_guard<std::mutex> l(mu_);
    return next_id_;
  }
  int Flushes() const {
    std::lock_guard<std::mutex> l(mu_);
    return flushes_;
  }
  std::optional<PauseMode> LastPause() const {
    std::lock_guard<std::mutex> l(mu_);
    return last_pause_;
  }

 private:
  struct Sample {
    std::vector<int32_t> ids;
    std::vector<float> logprobs;
    std::string text;
    bool done = false;
  };
  struct Req {
    RequestId id;
    GenerateRequest request;
    SampleCallback cb;
    std::vector<Sample> samples;
    bool abort;
  };

  // One step of sample j of r; fills *u. Holds mu_.
  void Step(Req& r, int64_t j, SampleUpdate* u) {
    Sample& s = r.samples[static_cast<size_t>(j)];
    const GenerateRequest& q = r.request;
    u->sample = j;
    std::optional<FinishReason> finish;
    std::string matched;
    if (r.abort) {
      finish = FinishReason::kAbort;
    } else {
      const auto k = static_cast<int64_t>(s.ids.size());
      const int32_t t = Token(q.input_ids.back(), j, k, o_.vocab);
      s.ids.push_back(t);
      u->new_ids.push_back(t);
      if (q.return_logprob) {
        s.logprobs.push_back(Logprob(k));
        u->new_logprobs.push_back(Logprob(k));
      }
      s.text.push_back(Letter(t));
      ++generated_;
      const auto& stops = q.params.stop_token_ids;
      if (std::find(stops.begin(), stops.end(), t) != stops.end()) finish = FinishReason::kStop;
      for (const auto& str : q.params.stop)
        if (!finish && s.text.find(str) != std::string::npos) {
          finish = FinishReason::kStop;
          matched = str;
        }
      if (!finish && k + 1 >= q.params.max_new_tokens) finish = FinishReason::kLength;
    }
    if (!finish) return;
    s.done = true;
    SampleResult res;
    res.output_ids = s.ids;
    res.output_token_logprobs = s.logprobs;
    res.finish_reason = *finish;
    res.matched_stop = matched;
    res.prompt_tokens = static_cast<int64_t>(q.input_ids.size());
    res.completion_tokens = static_cast<int64_t>(s.ids.size());
    res.cached_tokens = std::min<int64_t>(2, res.prompt_tokens);
    res.weight_version = o_.weight_version;
    u->finished = std::move(res);
  }

  void Loop() {
    for (;;) {
      std::vector<std::pair<SampleCallback, SampleUpdate>> out;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] {
          if (stop_) return true;
          for (const auto& [id, r] : reqs_)
            if (!paused_ || r.abort) return true;
          return false;
        });
        if (stop_) return;
        for (auto it = reqs_.begin(); it != reqs_.end();) {
          Req& r = it->second;
          if (paused_ && !r.abort) {
            ++it;
            continue;
          }
          bool all_done = true;
          for (int64_t j = 0; j < static_cast<int64_t>(r.samples.size()); ++j) {
            if (r.samples[static_cast<size_t>(j)].done) continue;
            SampleUpdate u;
            Step(r, j, &u);
            out.emplace_back(r.cb, std::move(u));
            all_done = all_done && r.samples[static_cast<size_t>(j)].done;
          }
          it = all_done ? reqs_.erase(it) : std::next(it);
        }
      }
      for (auto& [cb, u] : out) cb(std::move(u));
      std::this_thread::sleep_for(o_.step);
    }
  }

  const Options o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<RequestId, Req> reqs_;
  std::set<RequestId> abort_calls_;
  RequestId next_id_ = 0;
  uint64_t generated_ = 0, prompt_tokens_ = 0;
  int flushes_ = 0;
  bool paused_ = false, stop_ = false;
  std::optional<PauseMode> last_pause_;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace tandem::inference::testing
