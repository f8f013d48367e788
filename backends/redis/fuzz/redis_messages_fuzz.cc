// libFuzzer target: what the daemon and the node agents read from Redis
// (docs/redis.md "Signed commands", "Signed events"). Whoever can write to
// Redis chooses those bytes; only a cluster key holder can sign them. The
// first byte picks the side:
//   even: the bytes are a value stored at a key (a node record, a task's
//         signed state, a log-tail reply): OpenEnvelope must refuse them
//         unsigned; signed for one key they open there to exactly the same
//         bytes and nowhere else; then, as a signed message, they go through
//         ParseMessage and the decoders the agent and the executor use
//         (RequestFromJson, ExitFromJson, AddControlToken), whose accepted
//         values encode and decode back to the same values;
//   odd:  the bytes are a stream entry's fields msg, ts, nonce, sig (split
//         at newlines) for CommandVerifier::Verify, as sent, then signed
//         with the given timestamp (any, so stale checks see extremes); an
//         accepted nonce is refused under another entry id (a replay) and
//         accepted again under the same one (a redelivery).
// Nothing may crash, throw, leak or trip a sanitizer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "backends/redis/command_signing.h"
#include "backends/redis/redis_protocol.h"

namespace {

using namespace tandem::backends;
using namespace tandem::backends::redis;
using nlohmann::json;

const ClusterKey& Key() {
  static const ClusterKey key = ClusterKey::FromBytes("fuzz-cluster-key-0123456789");
  return key;
}

bool ValidUtf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

void Decode(const json& j) {
  if (auto r = RequestFromJson(j); r.ok()) {
    const json encoded = RequestToJson(*r);
    auto back = RequestFromJson(encoded);
    if (!back.ok() || RequestToJson(*back) != encoded) std::abort();
    AddControlToken(*r, Key().bytes());
  }
  if (auto x = ExitFromJson(j); x.ok()) {
    const json encoded = x->ToJson();
    auto back = ExitFromJson(encoded);
    if (!back.ok() || back->ToJson() != encoded || back->succeeded() != x->succeeded()) std::abort();
  }
}

void Value(const std::string& text) {
  const std::string domain = "tandem:task:fuzz";
  const long long now = NowMs();
  (void)OpenEnvelope(Key(), domain, text, now, std::chrono::milliseconds(60000));
  (void)OpenEnvelope(Key(), domain, text, 0, std::chrono::milliseconds(0));
  if (ValidUtf8(text)) {
    const std::string envelope = SignEnvelope(Key(), domain, text);
    auto opened = OpenEnvelope(Key(), domain, envelope, now, std::chrono::milliseconds(60000));
    if (!opened.ok() || *opened != text) std::abort();
    if (OpenEnvelope(Key(), domain + "x", envelope, now, std::chrono::milliseconds(60000)).ok()) std::abort();
  }
  auto msg = ParseMessage(text);
  if (!msg.ok()) return;
  Decode(*msg);
  for (const char* field : {"request", "exit"})
    if (msg->contains(field)) Decode((*msg)[field]);
}

void Entry(std::string_view text) {
  std::string parts[4];
  for (int i = 0; i < 4; ++i) {
    const size_t nl = i < 3 ? text.find('\n') : std::string_view::npos;
    parts[i] = std::string(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  }
  const std::string stream = "tandem:agent:fuzz:cmds";
  const long long now = NowMs();
  CommandVerifier verifier(Key(), stream, std::chrono::milliseconds(60000));
  StreamEntry raw{"1-1", {{"msg", parts[0]}, {"ts", parts[1]}, {"nonce", parts[2]}, {"sig", parts[3]}}};
  (void)verifier.Verify(raw, now);
  char* end = nullptr;
  const long long ts = std::strtoll(parts[1].c_str(), &end, 10);
  if (parts[1].empty() || *end != '\0' || parts[2].empty()) return;
  auto signed_at = [&](long long at, const std::string& id) {
    return StreamEntry{id, {{"msg", parts[0]}, {"ts", std::to_string(at)}, {"nonce", parts[2]},
                            {"sig", CommandMac(Key(), stream, at, parts[2], parts[0])}}};
  };
  (void)verifier.Verify(signed_at(ts, "2-1"), now);  // any timestamp: mostly stale
  // Within the window: accepted, redelivered, replayed.
  const StreamEntry fresh = signed_at(now + ts % 30000, "3-1");
  if (!verifier.Verify(fresh, now).ok()) {
    if (verifier.Verify(signed_at(ts, "2-1"), now).ok()) return;  // its nonce was accepted under 2-1 above
    std::abort();
  }
  if (!verifier.Verify(fresh, now).ok()) std::abort();
  StreamEntry replay = fresh;
  replay.id = "4-1";
  if (verifier.Verify(replay, now).ok()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) Value(text);
  else Entry(text);
  return 0;
}
