// The engines' control commands (engine_control.h).
#include "workers/roles/engine_control.h"

#include <optional>
#include <string>
#include <vector>

#include "common/log.h"
#include "workers/inference/generation.h"
#include "workers/inference/tagged_model.h"
#include "workers/weights/weight_source.h"

namespace tandem::roles {
namespace {

using nlohmann::json;

// The tags a release/resume names (all the engine holds when none).
StatusOr<std::vector<std::string>> TagsOf(const control::Command& c, const memory::TaggedMemory& mem) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<std::string> tags, c.Tags());
  return tags.empty() ? mem.TagNames() : tags;
}

}  // namespace

void RegisterEngineControl(control::RoleHost& host, EngineParts p) {
  host.On("pause", [p](const control::Command& c) -> StatusOr<json> {
    TANDEM_ASSIGN_OR_RETURN(std::string name, c.Mode());
    TANDEM_ASSIGN_OR_RETURN(inference::PauseMode mode, inference::ParsePauseMode(name), "pause");
    TANDEM_RETURN_IF_ERROR(p.engine.Pause(mode));
    return json{{"mode", name}};
  });
  host.On("continue", [p](const control::Command&) -> StatusOr<json> {
    TANDEM_RETURN_IF_ERROR(p.engine.Continue());
    return json::object();
  });
  host.On("release", [p](const control::Command& c) -> StatusOr<json> {
    TANDEM_ASSIGN_OR_RETURN(std::vector<std::string> tags, TagsOf(c, p.memory));
    TANDEM_ASSIGN_OR_RETURN(memory::TaggedMemory::Moved moved, inference::ReleaseEngineMemory(p.engine, p.memory, tags));
    log::Info(p.component, "released {} freed_bytes={} copied_bytes={}", json(tags).dump(), moved.freed_bytes,
              moved.copied_bytes);
    return json{{"freed_bytes", moved.freed_bytes}, {"copied_bytes", moved.copied_bytes}};
  });
  host.On("resume", [p](const control::Command& c) -> StatusOr<json> {
    TANDEM_ASSIGN_OR_RETURN(std::vector<std::string> tags, TagsOf(c, p.memory));
    TANDEM_ASSIGN_OR_RETURN(memory::TaggedMemory::Moved moved, inference::ResumeEngineMemory(p.engine, p.memory, tags));
    log::Info(p.component, "resumed {} mapped_bytes={} copied_bytes={}", json(tags).dump(), moved.mapped_bytes,
              moved.copied_bytes);
    return json{{"mapped_bytes", moved.mapped_bytes}, {"copied_bytes", moved.copied_bytes}};
  });
  host.On("load_weights", [p](const control::Command& c) -> StatusOr<json> {
    TANDEM_ASSIGN_OR_RETURN(int64_t version, c.Version());
    if (p.frozen_weights) {
      log::Info(p.component, "load_weights version {}: kept its own weights (--frozen-weights)", version);
      return json{{"version", version}, {"frozen", true}};
    }
    TANDEM_ASSIGN_OR_RETURN(std::string source, c.Source());
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<weights::WeightSource> from, weights::OpenWeightSource(source));
    if (const std::optional<int64_t> held = from->version(); held && *held != version)
      return InvalidArgument("load_weights: " + from->Describe() + " holds version " + std::to_string(*held) +
                             ", not " + std::to_string(version));
    TANDEM_RETURN_IF_ERROR(p.engine.LoadWeights(version, [&] { return from->LoadInto(p.model); }), "load_weights");
    // The publisher may free the version once its readers said so; a lost
    // ack only keeps it until the next publish or the job's end.
    if (const Status acked = from->Acknowledge(); !acked.ok())
      log::Warn(p.component, "load_weights: acknowledge {}: {}", from->Describe(), acked.ToString());
    log::Info(p.component, "loaded weights version {} from {}", version, from->Describe());
    return json{{"version", version}, {"source", from->Describe()}};
  });
}

}  // namespace tandem::roles
