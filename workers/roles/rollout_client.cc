// POST /generate to a rollout (rollout_client.h).
#include "workers/roles/rollout_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <cmath>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

namespace tandem::roles {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;
using nlohmann::json;

// Runs the io_context until the pending operation completed.
void Run(boost::asio::io_context& io) {
  io.run();
  io.restart();
}

}  // namespace

std::string GenerateBody(const GenerateCall& call) {
  json sp = {{"temperature", call.temperature}, {"max_new_tokens", call.max_new_tokens}, {"n", call.n}};
  if (!call.stop_token_ids.empty()) sp["stop_token_ids"] = call.stop_token_ids;
  if (call.seed >= 0) sp["seed"] = call.seed;
  return json{{"input_ids", call.prompts}, {"sampling_params", sp}, {"return_logprob", true}}.dump();
}

StatusOr<std::vector<RolloutSample>> ParseGenerateAnswer(const std::string& body, size_t expected) {
  TANDEM_ASSIGN_OR_RETURN(const json j, ParseJsonBounded(body), "answer");
  const json list = j.is_array() ? j : json::array({j});
  if (list.size() != expected)
    return DataLoss("answer: " + std::to_string(list.size()) + " samples, asked for " + std::to_string(expected));
  std::vector<RolloutSample> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& s = list[i];
    const std::string where = "answer sample " + std::to_string(i);
    if (!s.is_object() || !s.contains("output_ids") || !s["output_ids"].is_array() || !s.contains("meta_info") ||
        !s["meta_info"].is_object())
      return DataLoss(where + ": expected an object with output_ids and meta_info");
    const json& meta = s["meta_info"];
    RolloutSample r;
    for (const json& id : s["output_ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        return DataLoss(where + ": output_ids: expected token ids");
      r.output_ids.push_back(id.get<int32_t>());
    }
    const auto lps = meta.find("output_token_logprobs");
    if (lps == meta.end() || !lps->is_array() || lps->size() != r.output_ids.size())
      return DataLoss(where + ": meta_info.output_token_logprobs: expected one per output id");
    for (size_t k = 0; k < lps->size(); ++k) {
      const json& e = (*lps)[k];
      if (!e.is_array() || e.size() < 2 || !e[0].is_number() || !e[1].is_number_integer() ||
          e[1].get<int64_t>() != r.output_ids[k] || !std::isfinite(e[0].get<double>()))
        return DataLoss(where + ": output_token_logprobs[" + std::to_string(k) + "]: expected [logprob, id, ...] of output " +
                        std::to_string(k));
      r.logprobs.push_back(static_cast<float>(e[0].get<double>()));
    }
    if (const auto fr = meta.find("finish_reason"); fr != meta.end() && fr->is_object() && fr->contains("type") &&
                                                     (*fr)["type"].is_string())
      r.finish_reason = (*fr)["type"].get<std::string>();
    if (const auto wv = meta.find("weight_version"); wv != meta.end()) {
      if (wv->is_string()) {
        try {
          r.weight_version = std::stoll(wv->get<std::string>());
        } catch (const std::exception&) {
          return DataLoss(where + ": meta_info.weight_version: not a number");
        }
      } else if (wv->is_number_integer()) {
        r.weight_version = wv->get<int64_t>();
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

StatusOr<std::vector<RolloutSample>> Generate(const RolloutEndpoint& rollout, const GenerateCall& call,
                                              std::chrono::milliseconds timeout) {
  const std::string where = "rollout " + rollout.Describe() + " /generate";
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  stream.expires_after(timeout);
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(rollout.host, std::to_string(rollout.port), ec);
  if (ec) return Unavailable(where + ": resolve: " + ec.message());
  stream.async_connect(endpoints, [&ec](beast::error_code e, const tcp::endpoint&) { ec = e; });
  Run(io);
  if (ec == beast::error::timeout) return DeadlineExceeded(where + ": no connection within the timeout");
  if (ec) return Unavailable(where + ": connect: " + ec.message());

  http::request<http::string_body> req{http::verb::post, "/generate", 11};
  req.set(http::field::host, rollout.host);
  req.set(http::field::content_type, "application/json");
  req.body() = GenerateBody(call);
  req.prepare_payload();
  http::async_write(stream, req, [&ec](beast::error_code e, size_t) { ec = e; });
  Run(io);
  if (ec == beast::error::timeout) return DeadlineExceeded(where + ": the request was not taken within the timeout");
  if (ec) return Unavailable(where + ": write: " + ec.message());

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxResponseBytes);
  http::async_read(stream, buffer, parser, [&ec](beast::error_code e, size_t) { ec = e; });
  Run(io);
  if (ec == beast::error::timeout) return DeadlineExceeded(where + ": no answer within the timeout");
  if (ec) return Unavailable(where + ": read: " + ec.message());
  const auto& res = parser.get();
  if (res.result_int() != 200)
    return Unavailable(where + ": HTTP " + std::to_string(res.result_int()) + ": " + res.body().substr(0, 300));
  const size_t expected = call.prompts.size() * static_cast<size_t>(call.n);
  TANDEM_ASSIGN_OR_RETURN(std::vector<RolloutSample> samples, ParseGenerateAnswer(res.body(), expected), where);
  return samples;
}

}  // namespace tandem::roles
