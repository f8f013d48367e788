// The control protocol's codec (common/control/control_codec.h,
// control_messages.h): bounded parsing, and decoders that type-check every
// field and name the bad one; encoders and decoders agree.
#include <gtest/gtest.h>

#include "common/bounded_json.h"
#include "common/control/control_codec.h"
#include "common/control/control_messages.h"

namespace tandem::control {
namespace {

using json = nlohmann::json;

TEST(ControlCodecTest, ParseLineBoundsNestingAndNeedsAStringType) {
  EXPECT_TRUE(JsonDepthWithin(R"({"a":[1,{"b":"[[[["}]})", 3));
  EXPECT_FALSE(JsonDepthWithin(R"({"a":[1,{"b":"[[[["}]})", 2));
  EXPECT_TRUE(ParseLine(R"({"type":"metrics","v":)" + std::string(kMaxDepth - 1, '[') +
                        std::string(kMaxDepth - 1, ']') + "}")
                  .ok());
  auto deep = ParseLine(R"({"type":"metrics","v":)" + std::string(100000, '[') + std::string(100000, ']') + "}");
  EXPECT_EQ(deep.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(deep.status().message().find("nested deeper"), std::string::npos);
  std::optional<int64_t> id;
  EXPECT_FALSE(ParseLine(R"({"type":5,"id":3})", &id).ok());
  EXPECT_EQ(id, 3);
  EXPECT_FALSE(ParseLine("[1]").ok());
  EXPECT_FALSE(ParseLine("{").ok());
  auto ok = ParseLine("{\"type\":\"ack\",\"id\":4}\r");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->type, "ack");
  EXPECT_EQ(ok->id, 4);
}

TEST(ControlCodecTest, HelloRoundTripsAndMistypedFieldsAreNamed) {
  Hello h;
  h.job_id = "j";
  h.task_id = "j.rollout.0";
  h.role = "rollout";
  h.rank = 2;
  h.devices = {0, 1};
  h.tags = {{"weights", 64, true}};
  h.token = "tok";
  Residency r;
  r.tags["weights"] = 64;
  r.device = {1, 10, 100, "cuda"};
  auto back = DecodeHello(ToJson(h, r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->task_id, "j.rollout.0");
  EXPECT_EQ(back->rank, 2);
  EXPECT_EQ(back->token, "tok");
  ASSERT_EQ(back->tags.size(), 1u);
  EXPECT_TRUE(back->tags[0].backup);
  ASSERT_TRUE(back->residency);
  EXPECT_EQ(back->residency->tags.at("weights"), 64u);
  EXPECT_EQ(back->residency->device.source, "cuda");
  EXPECT_GT(back->pid, 0);

  const json good = ToJson(h, r);
  for (const auto& [field, value, named] : std::vector<std::tuple<std::string, json, std::string>>{
           {"job_id", 7, "hello.job_id"},
           {"rank", "2", "hello.rank"},
           {"rank", 1ull << 40, "hello.rank"},
           {"token", json::array(), "hello.token"},
           {"devices", {-1}, "hello.devices"},
           {"tags", {{{"name", "w"}, {"bytes", 1.5}}}, "hello.tags[].bytes"},
           {"residency", {{"device", {{"index", "0"}}}}, "hello.residency.device.index"},
           {"residency", {{"tags", {{"w", -1}}}}, "hello.residency.tags.w"}}) {
    json bad = good;
    bad[field] = value;
    auto st = DecodeHello(bad);
    ASSERT_FALSE(st.ok()) << bad.dump();
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.status().message().find(named), std::string::npos) << st.status().message();
  }
  json no_rank = good;
  no_rank.erase("rank");
  EXPECT_FALSE(DecodeHello(no_rank).ok());
}

TEST(ControlCodecTest, WorkerMessagesDecodeWhatTheWorkerEncodes) {
  Command c{"release", 77, json{{"type", "release"}, {"id", 77}}};
  Residency r;
  r.tags["kv_cache"] = 0;
  auto ack = DecodeAnswer(*ParseLine(MakeAck(c, r, 5, json::object()).dump()));
  ASSERT_TRUE(ack.ok()) << ack.status().ToString();
  EXPECT_FALSE(ack->error);
  EXPECT_EQ(ack->id, 77);
  EXPECT_EQ(ack->command, "release");
  auto err = DecodeAnswer(*ParseLine(MakeError(std::nullopt, "resume", "data_loss", "bad", r).dump()));
  ASSERT_TRUE(err.ok());
  EXPECT_TRUE(err->error);
  EXPECT_FALSE(err->id);
  EXPECT_EQ(err->code, "data_loss");
  EXPECT_FALSE(DecodeAnswer(*ParseLine(R"({"type":"ack","id":1,"command":5})")).ok());
  EXPECT_FALSE(DecodeAnswer(*ParseLine(R"({"type":"error","id":"x"})")).ok());
  // A publish_weights ack's detail.source: a weight source URI, or refused.
  auto pub = DecodeAnswer(*ParseLine(R"({"type":"ack","id":2,"command":"publish_weights","detail":{"source":"shm:/tandem-j-a-v3"}})"));
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  EXPECT_EQ(pub->source, "shm:/tandem-j-a-v3");
  EXPECT_EQ(DecodeAnswer(*ParseLine(R"({"type":"ack","id":2,"detail":{"version":3}})"))->source, "");
  for (const char* bad : {R"({"type":"ack","id":2,"detail":{"source":7}})", R"({"type":"ack","id":2,"detail":{"source":""}})",
                          R"({"type":"ack","id":2,"detail":{"source":"http://x"}})",
                          R"({"type":"ack","id":2,"detail":{"source":"shm:/a\u0001b"}})"}) {
    auto a = DecodeAnswer(*ParseLine(bad));
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_NE(a.status().message().find("detail.source"), std::string::npos) << a.status().message();
  }
  EXPECT_FALSE(DecodeAnswer(*ParseLine(R"({"type":"ack","id":2,"detail":{"source":"shm:/)" + std::string(5000, 'a') + R"("}})")).ok());

  auto p = DecodePhaseRequest(*ParseLine(R"({"type":"request_phase","id":3,"phase":"sync","version":4})"));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->version, 4);
  EXPECT_FALSE(DecodePhaseRequest(*ParseLine(R"({"type":"request_phase","phase":"sync"})")).ok());
  EXPECT_FALSE(DecodePhaseRequest(*ParseLine(R"({"type":"request_phase","id":3,"phase":["sync"]})")).ok());
  EXPECT_FALSE(DecodeMetrics(*ParseLine(R"({"type":"metrics","values":[1]})")).ok());

  // The worker's reading of daemon lines uses the same parser.
  EXPECT_FALSE(ParseDaemonLine(R"({"type":"release"})").command);
  const ParsedLine e = ParseDaemonLine(R"({"type":"error","id":null,"code":{},"message":7})");
  ASSERT_TRUE(e.command);
  EXPECT_EQ(e.command->StringField("message"), "");
  EXPECT_EQ(ErrorLine(5, "malformed", "m")["id"], 5);
  EXPECT_TRUE(ErrorLine(std::nullopt, "malformed", "m")["id"].is_null());
  EXPECT_EQ(ErrorCodeFor(StatusCode::kPermissionDenied), "unauthenticated");
}

}  // namespace
}  // namespace tandem::control
