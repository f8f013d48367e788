// The residency ledger (ledger.h).
#include "orchestrator/handoff/ledger.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "orchestrator/handoff/event_codec.h"
#include "orchestrator/report/human_units.h"

namespace tandem::handoff {

void Ledger::SetCapacity(int gpu, uint64_t bytes) { gpus_[gpu].capacity = bytes; }

void Ledger::SetWorkerGpus(const WorkerId& w, std::vector<int> gpus) {
  for (int g : gpus) gpus_.try_emplace(g);
  placement_[w] = std::move(gpus);
}

uint64_t Ledger::Bytes(const WorkerId& w, Tag t) const {
  auto it = bytes_.find(w);
  if (it == bytes_.end()) return 0;
  auto jt = it->second.find(t);
  return jt == it->second.end() ? 0 : jt->second;
}

TagSet Ledger::ResidentTags(const WorkerId& w) const {
  TagSet out;
  auto it = bytes_.find(w);
  if (it == bytes_.end()) return out;
  for (const auto& [tag, b] : it->second) {
    if (b > 0) out.insert(tag);
  }
  return out;
}

const std::vector<int>& Ledger::WorkerGpus(const WorkerId& w) const {
  static const std::vector<int> kNone;
  auto it = placement_.find(w);
  return it == placement_.end() ? kNone : it->second;
}

uint64_t Ledger::Resident(int gpu) const {
  uint64_t sum = 0;
  for (const auto& [w, tags] : bytes_) {
    const std::vector<int>& gs = WorkerGpus(w);
    if (std::find(gs.begin(), gs.end(), gpu) == gs.end()) continue;
    for (const auto& [tag, b] : tags) sum += b;
  }
  return sum;
}

Status Ledger::CheckFits(const std::vector<Planned>& planned) const {
  std::string problems;
  for (const auto& [gpu, state] : gpus_) {
    // Without a configured capacity the device's own total is the bound.
    const uint64_t capacity = state.capacity ? state.capacity : state.reading ? state.reading->total : 0;
    if (capacity == 0) continue;
    uint64_t adding = 0;
    std::string resuming;
    for (const Planned& p : planned) {
      const std::vector<int>& gs = WorkerGpus(p.worker);
      if (std::find(gs.begin(), gs.end(), gpu) == gs.end()) continue;
      adding += p.bytes;
      resuming += fmt::format("{}{} {}={}", resuming.empty() ? "" : ", ", p.worker.ToString(),
                              TagName(p.tag), report::HumanBytes(p.bytes));
    }
    const uint64_t resident = Resident(gpu);
    if (adding == 0 || resident + adding <= capacity) continue;
    std::string holders;
    for (const auto& [w, tags] : bytes_) {
      const std::vector<int>& gs = WorkerGpus(w);
      if (std::find(gs.begin(), gs.end(), gpu) == gs.end()) continue;
      for (const auto& [tag, b] : tags) {
        if (b == 0) continue;
        holders += fmt::format("{}{} {}={}", holders.empty() ? "" : ", ", w.ToString(), TagName(tag),
                               report::HumanBytes(b));
      }
    }
    if (!problems.empty()) problems += "; ";
    problems += fmt::format("gpu {}: {} resident + {} resuming > capacity {} (resident: {}; resuming: {})", gpu,
                            report::HumanBytes(resident), report::HumanBytes(adding), report::HumanBytes(capacity),
                            holders.empty() ? "nothing" : holders, resuming);
  }
  if (problems.empty()) return Status::Ok();
  return ResourceExhausted("the resume would not fit: " + problems);
}

std::vector<ResidencyRecord> Ledger::Report(const WorkerId& w, const std::map<Tag, uint64_t>& resident,
                                            const std::vector<DeviceMemory>& devices,
                                            const TagSet& released, double at) {
  std::map<Tag, uint64_t>& mine = bytes_[w];
  // What the worker claims it freed with this release.
  uint64_t claimed = 0;
  for (Tag t : released) {
    uint64_t before = mine.count(t) ? mine[t] : 0;
    uint64_t after = resident.count(t) ? resident.at(t) : 0;
    if (before > after) claimed += before - after;
  }
  // Did the device's used memory fall by that much on each of its GPUs?
  std::string leak_note;
  for (const DeviceMemory& d : devices) {
    Gpu& g = gpus_[d.gpu];
    std::optional<DeviceMemory> before = g.reading;
    if (!d.device_wide) {
      auto it = own_reading_.find({w, d.gpu});
      before = it == own_reading_.end() ? std::nullopt : std::optional<DeviceMemory>(it->second);
      own_reading_[{w, d.gpu}] = d;
    }
    if (claimed > 0 && before) {
      const uint64_t fell = before->used > d.used ? before->used - d.used : 0;
      if (fell + claimed / 8 < claimed) {
        leak_note += fmt::format("{}gpu {}: used fell by {} bytes, the worker released {}",
                                 leak_note.empty() ? "" : "; ", d.gpu, fell, claimed);
      }
    }
    // A worker's own accounting without a total (the actor's optimizer:
    // no capacity of its own) says nothing of the GPU's bound.
    if (d.device_wide || d.total > 0) g.reading = d;
  }
  std::vector<ResidencyRecord> out;
  TagSet all;
  for (const auto& [t, b] : mine) all.insert(t);
  for (const auto& [t, b] : resident) all.insert(t);
  for (Tag t : all) {
    uint64_t before = mine.count(t) ? mine[t] : 0;
    uint64_t after = resident.count(t) ? resident.at(t) : 0;
    if (before == after) continue;
    mine[t] = after;
    const bool leak = !leak_note.empty() && released.count(t) && after < before;
    out.push_back(ResidencyRecord{.at = at, .worker = w, .tag = t, .bytes = after,
                                  .delta = static_cast<int64_t>(after) - static_cast<int64_t>(before),
                                  .devices = devices, .leak = leak, .note = leak ? leak_note : ""});
  }
  return out;
}

std::vector<ResidencyRecord> Ledger::Forget(const WorkerId& w, double at) {
  std::erase_if(own_reading_, [&](const auto& kv) { return kv.first.first == w; });
  std::vector<ResidencyRecord> out;
  auto it = bytes_.find(w);
  if (it == bytes_.end()) return out;
  for (auto& [t, b] : it->second) {
    if (b == 0) continue;
    out.push_back(ResidencyRecord{.at = at, .worker = w, .tag = t, .bytes = 0,
                                  .delta = -static_cast<int64_t>(b), .note = "worker died"});
    b = 0;
  }
  return out;
}

namespace {
nlohmann::json Who(const WorkerId& w, nlohmann::json fields) {
  fields["role"] = w.role;
  fields["rank"] = w.rank;
  return fields;
}
WorkerId WhoFrom(const nlohmann::json& j) { return {j.at("role").get<std::string>(), j.at("rank").get<int>()}; }
DeviceMemory DeviceFrom(const nlohmann::json& j) {
  auto ds = DevicesFromJson(nlohmann::json::array({j}));
  if (ds.empty()) throw std::invalid_argument("not a device reading: " + j.dump());
  return ds[0];
}
}  // namespace

nlohmann::json Ledger::ToJson() const {
  using json = nlohmann::json;
  json gpus = json::array(), placement = json::array(), bytes = json::array(), own = json::array();
  for (const auto& [gpu, g] : gpus_) {
    json e = {{"gpu", gpu}, {"capacity", g.capacity}};
    if (g.reading) e["reading"] = DevicesToJson({*g.reading})[0];
    gpus.push_back(std::move(e));
  }
  for (const auto& [w, ids] : placement_) placement.push_back(Who(w, {{"gpus", ids}}));
  for (const auto& [w, tags] : bytes_) bytes.push_back(Who(w, {{"resident", TagBytesToJson(tags)}}));
  for (const auto& [key, d] : own_reading_) {
    own.push_back(Who(key.first, {{"gpu", key.second}, {"reading", DevicesToJson({d})[0]}}));
  }
  return {{"gpus", gpus}, {"placement", placement}, {"bytes", bytes}, {"own_readings", own}};
}

StatusOr<Ledger> Ledger::FromJson(const nlohmann::json& j) {
  Ledger l;
  try {
    for (const auto& e : j.at("gpus")) {
      Gpu& g = l.gpus_[e.at("gpu").get<int>()];
      g.capacity = e.at("capacity").get<uint64_t>();
      if (e.contains("reading")) g.reading = DeviceFrom(e["reading"]);
    }
    for (const auto& e : j.at("placement")) l.placement_[WhoFrom(e)] = e.at("gpus").get<std::vector<int>>();
    for (const auto& e : j.at("bytes")) l.bytes_[WhoFrom(e)] = TagBytesFromJson(e.at("resident"));
    for (const auto& e : j.at("own_readings")) {
      l.own_reading_[{WhoFrom(e), e.at("gpu").get<int>()}] = DeviceFrom(e.at("reading"));
    }
  } catch (const std::exception& e) {  // nlohmann's type and range errors, DeviceFrom's
    return DataLoss(fmt::format("ledger snapshot: {}", e.what()));
  }
  return l;
}

}  // namespace tandem::handoff
