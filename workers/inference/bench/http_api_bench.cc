// The HTTP API's own cost (docs/inference.md "HTTP API", "Figures"): the
// server over loopback in front of tests/scripted_engine.h with no step
// delay, so the engine is (nearly) free and what is measured is parsing,
// posting the engine's updates to the io thread, building the JSON and the
// sockets. Prints one line per case:
//   round trips     POST /generate of 1 token, a fresh connection each, 1 and 8 clients
//   GRPO batch      64 prompts x n=8 x 128 tokens, one non-streamed call
//   stream          one sample of 2048 tokens streamed to a reader in the same process
// Usage: http_api_bench [round_trips=2000]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "workers/inference/http_api.h"
#include "workers/inference/tests/http_test_client.h"
#include "workers/inference/tests/scripted_engine.h"

using namespace tandem::inference;
using namespace tandem::inference::testing;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void RoundTrips(int port, int clients, int each) {
  const std::string body = R"({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1}})";
  std::vector<std::thread> threads;
  std::vector<int> failed(static_cast<size_t>(clients), 0);
  const auto t0 = Clock::now();
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      for (int i = 0; i < each; ++i)
        if (Request(port, "POST", "/generate", body).status != 200) ++failed[static_cast<size_t>(c)];
    });
  for (auto& t : threads) t.join();
  const double s = Seconds(t0);
  int bad = 0;
  for (const int f : failed) bad += f;
  std::printf("round trips     clients=%d requests=%d  %.0f req/s  mean %.1f us/request/client  failed=%d\n", clients,
              clients * each, clients * each / s, 1e6 * s / each, bad);
}

}  // namespace

int main(int argc, char** argv) {
  tandem::log::Init("warn");
  const int round_trips = argc > 1 ? std::atoi(argv[1]) : 2000;
  ScriptedEngine engine({.vocab = 1000, .context = 4096, .step = std::chrono::microseconds(0)});
  HttpApiOptions o;
  o.codec = std::make_shared<LetterCodec>();
  // The engine here is faster than any reader of cumulative chunks (~12 MB for
  // 2048 tokens): a roomy stream queue, so that the reader is not dropped.
  o.http.max_stream_queue_bytes = size_t{256} << 20;
  HttpApiServer server(engine, o);
  if (auto st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  const int port = server.port();

  RoundTrips(port, 1, round_trips);
  RoundTrips(port, 8, round_trips / 8);

  {
    json ids = json::array();
    for (int p = 0; p < 64; ++p) ids.push_back(json::array({p + 1, p + 2, p + 3}));
    const json body = {{"input_ids", ids}, {"return_logprob", true},
                       {"sampling_params", {{"n", 8}, {"max_new_tokens", 128}}}};
    const auto t0 = Clock::now();
    const auto r = Request(port, "POST", "/generate", body.dump(), std::chrono::seconds(120));
    const double s = Seconds(t0);
    const auto out = json::parse(r.body, nullptr, false);
    std::printf("GRPO batch      64 prompts x n=8 x 128 tokens: %.3f s  %.0f tokens/s  response %.1f MB  status=%d samples=%zu\n",
                s, 64 * 8 * 128 / s, r.body.size() / 1e6, r.status, out.is_array() ? out.size() : 0);
  }
  {
    const std::string body = R"({"input_ids": [1], "stream": true, "sampling_params": {"max_new_tokens": 2048}})";
    const auto t0 = Clock::now();
    const auto r = Request(port, "POST", "/generate", body, std::chrono::seconds(120));
    const double s = Seconds(t0);
    std::printf("stream          1 sample x 2048 tokens (cumulative chunks): %.3f s  %.0f tokens/s  %.1f MB sent  events=%zu\n",
                s, 2048 / s, r.raw_body.size() / 1e6, SseData(r.body).size());
  }
  server.Stop();
  return 0;
}
