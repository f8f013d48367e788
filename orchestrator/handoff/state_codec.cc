// GroupState as JSON and back (state_codec.h).
#include "orchestrator/handoff/state_codec.h"

#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "orchestrator/handoff/event_codec.h"

namespace tandem::handoff {
namespace {

using json = nlohmann::json;

json Who(const WorkerId& w, json fields = json::object()) {
  fields["role"] = w.role;
  fields["rank"] = w.rank;
  return fields;
}
WorkerId WhoFrom(const json& j) { return {j.at("role").get<std::string>(), j.at("rank").get<int>()}; }

json Tags(const TagSet& tags) {
  json out = json::array();
  for (Tag t : tags) out.push_back(TagName(t));
  return out;
}

// The inverse of a Name function over an enum's values; throws on an unknown name.
template <typename E, typename NameFn>
E Parse(const json& j, std::initializer_list<E> values, NameFn name, const char* what) {
  const std::string text = j.get<std::string>();
  for (E v : values) {
    if (name(v) == text) return v;
  }
  throw std::invalid_argument(fmt::format("unknown {} \"{}\"", what, text));
}

TagSet TagsFrom(const json& j) {
  TagSet out;
  for (const json& t : j) {
    auto tag = ParseTag(t.get<std::string>());
    if (!tag) throw std::invalid_argument("unknown tag " + t.dump());
    out.insert(*tag);
  }
  return out;
}

Phase PhaseFrom(const json& j) {
  auto p = ParsePhaseName(j.get<std::string>());
  if (!p.ok()) throw std::invalid_argument(p.status().message());
  return *p;
}

Stage StageFrom(const json& j) {
  const std::string text = j.get<std::string>();
  for (Stage s : StageOrder()) {
    if (StageName(s) == text) return s;
  }
  throw std::invalid_argument("unknown stage \"" + text + "\"");
}

CommandKind CommandFrom(const json& j) {
  return Parse(j,
               {CommandKind::kPause, CommandKind::kRelease, CommandKind::kResume, CommandKind::kPublishWeights,
                CommandKind::kLoadWeights, CommandKind::kContinue},
               CommandKindName, "command");
}

}  // namespace

json StateToJson(const GroupState& s) {
  json outstanding = json::array(), workers = json::array(), down = json::array();
  for (const Outstanding& o : s.outstanding) {
    outstanding.push_back(Who(o.worker, {{"id", o.command_id},
                                         {"kind", CommandKindName(o.kind)},
                                         {"tags", Tags(o.tags)},
                                         {"version", o.version},
                                         {"step", o.step},
                                         {"stage", StageName(o.stage)},
                                         {"sent_at", o.sent_at}}));
  }
  for (const auto& [w, ws] : s.workers) {
    workers.push_back(Who(w, {{"kind", RoleKindName(ws.kind)},
                              {"hello", ws.hello},
                              {"running", ws.running},
                              {"sizes", TagBytesToJson(ws.tag_sizes)},
                              {"loaded_version", ws.loaded_version},
                              {"restore", Tags(ws.restore)}}));
  }
  for (const WorkerId& w : s.down) down.push_back(Who(w));
  return {{"phase", PhaseName(s.phase)},
          {"target", PhaseName(s.target)},
          {"mode", ModeName(s.mode)},
          {"stage_index", s.stage_index},
          {"step", s.step},
          {"outstanding", outstanding},
          {"workers", workers},
          {"down", down},
          {"ledger", s.ledger.ToJson()},
          {"published_version", s.published_version},
          {"published_before", s.published_before},
          {"next_command_id", s.next_command_id},
          {"fault", s.fault}};
}

StatusOr<GroupState> StateFromJson(const json& j, std::shared_ptr<const GroupConfig> config) {
  // The workers and their kinds come from the config, as in InitialState;
  // the snapshot must name exactly those.
  GroupState s = InitialState(std::move(config));
  try {
    s.phase = PhaseFrom(j.at("phase"));
    s.target = PhaseFrom(j.at("target"));
    s.mode = Parse(j.at("mode"),
                   {Mode::kSettled, Mode::kTransition, Mode::kFaulted, Mode::kRecovering, Mode::kFailed},
                   ModeName, "mode");
    s.stage_index = j.at("stage_index").get<int>();
    s.step = j.at("step").get<int>();
    for (const json& o : j.at("outstanding")) {
      s.outstanding.push_back({o.at("id").get<uint64_t>(), WhoFrom(o), CommandFrom(o.at("kind")),
                               TagsFrom(o.at("tags")), o.at("version").get<int64_t>(), o.at("step").get<int>(),
                               StageFrom(o.at("stage")), o.at("sent_at").get<double>()});
    }
    size_t named = 0;
    for (const json& w : j.at("workers")) {
      auto it = s.workers.find(WhoFrom(w));
      if (it == s.workers.end() || RoleKindName(it->second.kind) != w.at("kind").get<std::string>()) {
        return DataLoss(fmt::format("handoff snapshot: worker {} ({}) is not in the group", WhoFrom(w).ToString(),
                                    w.at("kind").get<std::string>()));
      }
      WorkerState& ws = it->second;
      ws.hello = w.at("hello").get<bool>();
      ws.running = w.at("running").get<bool>();
      ws.tag_sizes = TagBytesFromJson(w.at("sizes"));
      ws.loaded_version = w.at("loaded_version").get<int64_t>();
      ws.restore = TagsFrom(w.at("restore"));
      ++named;
    }
    if (named != s.workers.size()) {
      return DataLoss(fmt::format("handoff snapshot: {} workers, the group has {}", named, s.workers.size()));
    }
    for (const json& w : j.at("down")) s.down.insert(WhoFrom(w));
    TANDEM_ASSIGN_OR_RETURN(s.ledger, Ledger::FromJson(j.at("ledger")));
    s.published_version = j.at("published_version").get<int64_t>();
    s.published_before = j.at("published_before").get<int64_t>();
    s.next_command_id = j.at("next_command_id").get<uint64_t>();
    s.fault = j.at("fault").get<std::string>();
  } catch (const std::exception& e) {  // nlohmann's type and range errors, the parsers above
    return DataLoss(fmt::format("handoff snapshot: {}", e.what()));
  }
  return s;
}

}  // namespace tandem::handoff
