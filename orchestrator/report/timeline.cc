// The timeline page's data and assembly (timeline.h).
#include "orchestrator/report/timeline.h"

#include <unordered_map>

namespace tandem::report {
namespace {

using json = nlohmann::json;

class Strings {
 public:
  json Id(const std::string& s) {
    auto [it, added] = ids_.try_emplace(s, list_.size());
    if (added) list_.push_back(s);
    return it->second;
  }
  json Opt(const std::string& s) { return s.empty() ? json(nullptr) : Id(s); }
  json List() const { return list_; }

 private:
  std::unordered_map<std::string, size_t> ids_;
  std::vector<std::string> list_;
};

}  // namespace

json TimelineData(const RunLogs& logs, const TimelineOptions& o) {
  Strings strings;
  json residency = json::array();
  for (const ResidencyLine& l : logs.residency) {
    json devices = json::array();
    for (const DeviceReading& d : l.devices) devices.push_back({d.gpu, d.used, d.total});
    residency.push_back({l.ts, strings.Id(l.group), strings.Id(l.role), l.rank, l.gpus, strings.Id(l.tag), l.bytes,
                         l.leak ? 1 : 0, strings.Opt(l.note), devices});
  }
  json handoff = json::array();
  for (const HandoffLine& l : logs.handoff) {
    handoff.push_back({l.start, l.duration, strings.Id(l.group), strings.Id(l.phase), l.step, strings.Id(l.stage),
                       strings.Id(l.role), l.rank, l.gpus, strings.Id(l.command), strings.Opt(l.tag), l.bytes,
                       strings.Id(l.outcome), strings.Opt(l.message),
                       l.version ? json(*l.version) : json(nullptr)});
  }
  return {{"v", 1},
          {"run_dir", logs.run_dir},
          {"limits", {{"bars", o.max_bars}, {"marks", o.max_marks}}},
          {"strings", strings.List()},
          {"residency", std::move(residency)},
          {"handoff", std::move(handoff)},
          {"skipped", logs.skipped},
          {"warnings", logs.warnings}};
}

std::string TimelineHtml(const RunLogs& logs, const TimelineOptions& o) {
  // "<" only occurs inside JSON strings, where \u003c means the same: the
  // data cannot close its <script> element.
  std::string data;
  for (char c : TimelineData(logs, o).dump(-1, ' ', false, json::error_handler_t::replace)) {
    if (c == '<') data += "\\u003c";
    else data += c;
  }
  return std::string(kTimelinePageHead) + data + kTimelinePageTail;
}

}  // namespace tandem::report
