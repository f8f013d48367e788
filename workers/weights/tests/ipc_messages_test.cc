// cuda-ipc's source URIs and messages (ipc_messages.h) on CPU: round trips,
// and hostile offers refused naming the field.
#include "workers/weights/ipc_messages.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tandem::weights::ipc {
namespace {

using nlohmann::json;

WeightManifest SmallManifest(int64_t version) {
  WeightManifest m;
  m.version = version;
  m.buffers = {{model::DType::kBF16, 10000}, {model::DType::kF32, 4096}};
  m.tensors = {{"model.embed_tokens.weight", model::DType::kBF16, {50, 100}, 0, 0},
               {"model.norm.weight", model::DType::kF32, {1024}, 1, 0}};
  return m;
}

IpcOffer GoodOffer() {
  IpcOffer o;
  o.version = 3;
  o.sealed = true;
  o.device_uuid = "GPU-0123456789abcdef0123456789abcdef";
  o.allocation_bytes = 2 << 20;
  o.publisher_pid = 4242;
  o.manifest = SmallManifest(3);
  return o;
}

TEST(IpcMessagesTest, UrisRoundTripAndBadOnesNameTheForm) {
  for (const char* text : {"@tandem-j-actor_0#v3", "/run/t/ipc/tandem-j-a.sock#v0", "@x#v123456789012345678"}) {
    auto u = ParseIpcUri(text);
    ASSERT_TRUE(u.ok()) << text << ": " << u.status().ToString();
    EXPECT_EQ(FormatIpcUri(*u), std::string("ipc:") + text);
  }
  auto u = ParseIpcUri("@a#b#v7");  // the last #v is the version's
  EXPECT_EQ(u.status().code(), StatusCode::kInvalidArgument) << "'#' is not a name byte";
  EXPECT_EQ(ParseIpcUri("/p#q.sock#v7")->address.name, "/p#q.sock");
  for (const char* bad : {"v1", "@name", "@name#v", "@name#v-1", "@name#v01", "@name#vx", "@name#v1234567890123456789",
                          "relative#v1", "#v1", "@#v1", "@a b#v1"}) {
    auto r = ParseIpcUri(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("expected ipc:@NAME#vVERSION"), std::string::npos) << r.status().message();
  }
}

TEST(IpcMessagesTest, PublisherAddressesAreSanitised) {
  auto a = PublisherAddress("job-1", "actor/0");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->ToString(), "@tandem-job_1-actor_0");
  auto p = PublisherAddress("j", "t", "/run/x/ipc/");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ToString(), "/run/x/ipc/tandem-j-t.sock");
  EXPECT_FALSE(PublisherAddress("j", "t", "/" + std::string(200, 'd')).ok()) << "too long for a socket path";
}

TEST(IpcMessagesTest, BuffersAreLaidOutAtPageMultiples) {
  uint64_t end = 0;
  EXPECT_EQ(IpcBufferOffsets(SmallManifest(1), &end), (std::vector<uint64_t>{0, 12288}));
  EXPECT_EQ(end, 12288u + 4096u);
}

TEST(IpcMessagesTest, OfferRoundTrips) {
  const IpcOffer o = GoodOffer();
  auto back = ParseOffer(EncodeOffer(o), 3);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->device_uuid, o.device_uuid);
  EXPECT_EQ(back->allocation_bytes, o.allocation_bytes);
  EXPECT_EQ(back->publisher_pid, 4242);
  EXPECT_EQ(ToJson(back->manifest), ToJson(o.manifest));
}

TEST(IpcMessagesTest, HostileOffersAreRefusedNamingTheField) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"another version", [](json& j) { j["version"] = 4; }, "offer.version: 4, the reader asked for 3"},
      {"negative version", [](json& j) { j["version"] = -3; }, "offer.version: expected a non-negative integer"},
      {"not sealed", [](json& j) { j["sealed"] = false; }, "offer.sealed: false"},
      {"sealed as a string", [](json& j) { j["sealed"] = "true"; }, "offer.sealed: expected true or false"},
      {"short uuid", [](json& j) { j["device_uuid"] = "GPU-0123"; }, "offer.device_uuid"},
      {"uppercase uuid", [](json& j) { j["device_uuid"] = "GPU-0123456789ABCDEF0123456789abcdef"; }, "offer.device_uuid"},
      {"zero bytes", [](json& j) { j["allocation_bytes"] = 0; }, "offer.allocation_bytes: 0"},
      {"huge allocation", [](json& j) { j["allocation_bytes"] = uint64_t{1} << 50; }, "above the limit"},
      {"fractional bytes", [](json& j) { j["allocation_bytes"] = 4096.5; }, "offer.allocation_bytes: expected"},
      {"allocation smaller than the buffers", [](json& j) { j["allocation_bytes"] = 12288; }, "(truncated)"},
      {"unknown key", [](json& j) { j["fds"] = 2; }, "offer: unknown key \"fds\""},
      {"missing key", [](json& j) { j.erase("manifest"); }, "offer.manifest: missing"},
      {"manifest of another version", [](json& j) { j["manifest"]["version"] = 2; }, "offer.manifest.version: 2"},
      {"misaligned tensor", [](json& j) { j["manifest"]["tensors"][1]["offset"] = 2; }, "offer.manifest: tensors[1].offset: 2 is not a multiple of 4"},
      {"tensor past its buffer", [](json& j) { j["manifest"]["tensors"][0]["shape"] = {60, 100}; }, "offer.manifest: tensors[0]"},
      {"bad pid", [](json& j) { j["publisher_pid"] = "me"; }, "offer.publisher_pid"},
  };
  for (const Case& c : cases) {
    json j = json::parse(EncodeOffer(GoodOffer()));
    c.edit(j);
    auto r = ParseOffer(j.dump(), 3);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << c.what;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << c.what << ": " << r.status().message();
  }
  for (const char* text : {"", "[]", "{", "null", "{\"version\": 3}"})
    EXPECT_EQ(ParseOffer(text, 3).status().code(), StatusCode::kDataLoss) << text;
  // Every truncation of a good offer is refused, never accepted as something else.
  const std::string good = EncodeOffer(GoodOffer());
  for (size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(ParseOffer(good.substr(0, n), 3).ok()) << n;
}

TEST(IpcMessagesTest, SmallMessagesRoundTrip) {
  auto v = ParseVersionMessage(EncodeVersionMessage(17), "request");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 17);
  EXPECT_NE(ParseVersionMessage("{\"version\": 1, \"x\": 2}", "ack").status().message().find("ack: unknown key"),
            std::string::npos);
  EXPECT_FALSE(ParseVersionMessage("{\"version\": -1}", "ack").ok());
  auto a = ParseAcked(EncodeAcked({5, 2, 3, false}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->acks, 2u);
  EXPECT_EQ(a->expected, 3u);
  EXPECT_FALSE(a->freed);
  for (StatusCode code : {StatusCode::kNotFound, StatusCode::kFailedPrecondition, StatusCode::kPermissionDenied,
                          StatusCode::kResourceExhausted, StatusCode::kInvalidArgument}) {
    const Status back = ParseError(EncodeError(Status(code, "why")));
    EXPECT_EQ(back.code(), code);
    EXPECT_NE(back.message().find("the publisher says: why"), std::string::npos) << back.message();
  }
  EXPECT_EQ(ParseError("{\"code\": \"ok\", \"message\": \"x\"}").code(), StatusCode::kDataLoss);
  EXPECT_EQ(ParseError("{\"code\": 1, \"message\": \"x\"}").code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tandem::weights::ipc
