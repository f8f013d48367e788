// The actor's tagged memory (actor_tags.h).
#include "workers/roles/actor_tags.h"

#include <set>

#include "common/log.h"

namespace tandem::roles {

using nlohmann::json;

void ActorTags::Declare(control::ControlClient::Options& options) {
  const auto lock = this->lock();
  options.hello.tags.push_back({"optimizer", static_cast<uint64_t>(optimizer_.resident_bytes()), !staged_});
  if (exports_) options.hello.tags.push_back({"ipc_exports", 0, false});
  options.residency = [this] { return Residency(); };
}

control::Residency ActorTags::Residency() const {
  const auto lock = this->lock();
  control::Residency r;
  const auto optimizer = static_cast<uint64_t>(optimizer_.device_bytes());
  r.tags["optimizer"] = optimizer;
  r.device.used = optimizer;
  if (exports_) {
    const uint64_t exported = exports_->ExportedBytes();
    r.tags["ipc_exports"] = exported;
    r.device.used += exported;
  }
  r.device.source = "pool";
  return r;
}

void ActorTags::Serve(control::ControlClient& client) {
  auto move = [this](const control::Command& c, bool release) -> StatusOr<json> {
    TANDEM_ASSIGN_OR_RETURN(const std::vector<std::string> tags, c.Tags());
    return Move(tags, release);
  };
  client.On("release", [move](const control::Command& c) { return move(c, true); });
  client.On("resume", [move](const control::Command& c) { return move(c, false); });
}

StatusOr<json> ActorTags::Move(const std::vector<std::string>& named, bool release) {
  std::set<std::string> tags(named.begin(), named.end());
  if (tags.empty()) {  // no tags: all of them
    tags.insert("optimizer");
    if (exports_) tags.insert("ipc_exports");
  }
  for (const std::string& t : tags) {
    if (t != "optimizer" && !(t == "ipc_exports" && exports_))
      return NotFound("the actor's tagged memory is its optimizer" +
                      std::string(exports_ ? " and its ipc_exports" : "") + " (tag " + t + ")");
  }
  const auto lock = this->lock();
  int64_t moved = 0;
  for (const std::string& t : tags) {
    if (t == "ipc_exports") {
      if (!release) continue;  // nothing to bring back: the next publish exports anew
      const auto before = static_cast<int64_t>(exports_->ExportedBytes());
      exports_->ReleaseAll();
      moved += before - static_cast<int64_t>(exports_->ExportedBytes());
      log::Info("actor", "released ipc_exports: {} bytes", before);
      continue;
    }
    const int64_t before = optimizer_.device_bytes();
    TANDEM_RETURN_IF_ERROR(release ? optimizer_.Release() : optimizer_.Resume(), "actor");
    const int64_t after = optimizer_.device_bytes();
    moved += release ? before - after : after - before;
    log::Info("actor", "{} optimizer: {} -> {} bytes on the device", release ? "released" : "resumed", before, after);
  }
  return json{{release ? "freed_bytes" : "mapped_bytes", moved}};
}

}  // namespace tandem::roles
