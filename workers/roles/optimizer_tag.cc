// The optimizer tag (optimizer_tag.h).
#include "workers/roles/optimizer_tag.h"

#include "common/log.h"

namespace tandem::roles {

using nlohmann::json;

void OptimizerTag::Declare(control::ControlClient::Options& options) {
  const auto lock = this->lock();
  options.hello.tags.push_back({"optimizer", static_cast<uint64_t>(optimizer_.resident_bytes()), !staged_});
  options.residency = [this] { return Residency(); };
}

control::Residency OptimizerTag::Residency() const {
  const auto lock = this->lock();
  control::Residency r;
  const auto bytes = static_cast<uint64_t>(optimizer_.device_bytes());
  r.tags["optimizer"] = bytes;
  r.device.used = bytes;
  r.device.source = "pool";
  return r;
}

void OptimizerTag::Serve(control::ControlClient& client) {
  client.On("release", [this](const control::Command& c) { return Move(c, true); });
  client.On("resume", [this](const control::Command& c) { return Move(c, false); });
}

StatusOr<json> OptimizerTag::Move(const control::Command& c, bool release) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<std::string> tags, c.Tags());
  for (const std::string& t : tags) {
    if (t != "optimizer") return NotFound("the actor's only tagged memory is its optimizer (tag " + t + ")");
  }
  const auto lock = this->lock();
  const int64_t before = optimizer_.device_bytes();
  TANDEM_RETURN_IF_ERROR(release ? optimizer_.Release() : optimizer_.Resume(), "actor");
  const int64_t after = optimizer_.device_bytes();
  log::Info("actor", "{} optimizer: {} -> {} bytes on the device", release ? "released" : "resumed", before, after);
  return json{{release ? "freed_bytes" : "mapped_bytes", release ? before - after : after - before}};
}

}  // namespace tandem::roles
