// The residency model (residency_model.h).
#include "orchestrator/report/residency_model.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <tuple>

#include "orchestrator/spec/byte_size.h"

namespace tandem::report {
namespace {

using Key = std::tuple<std::string, int, std::string>;  // role, rank, tag

struct GpuState {
  std::map<Key, Holding> holding;
  uint64_t sum = 0;
  GpuResidency out;
};

// Tags in docs/handoff.md's order (inference roles' first, then the actor's);
// unknown tags after them.
int TagOrder(const std::string& tag) {
  static const char* const kTags[] = {"weights", "kv_cache", "cuda_graph", "params",
                                      "grads", "optimizer", "activations", "ipc_exports"};
  for (int i = 0; i < 8; ++i) {
    if (tag == kTags[i]) return i;
  }
  return 8;
}

std::vector<Holding> Snapshot(const std::map<Key, Holding>& holding) {
  std::vector<Holding> v;
  for (const auto& [k, h] : holding) v.push_back(h);
  std::stable_sort(v.begin(), v.end(), [](const Holding& a, const Holding& b) {
    return std::tie(a.role, a.rank) < std::tie(b.role, b.rank) ||
           (std::tie(a.role, a.rank) == std::tie(b.role, b.rank) && TagOrder(a.tag) < TagOrder(b.tag));
  });
  return v;
}

}  // namespace

std::optional<uint64_t> SpecGpuMemory(const std::string& run_dir) {
  std::ifstream in(std::filesystem::path(run_dir) / "job.json");
  if (!in) return std::nullopt;
  const nlohmann::json job = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!job.is_object()) return std::nullopt;
  // job.json holds the spec as submitted: "spec" (parsed) beside "spec_text".
  auto spec = job.find("spec");
  if (spec == job.end() || !spec->is_object()) return std::nullopt;
  auto handoff = spec->find("handoff");
  if (handoff == spec->end() || !handoff->is_object()) return std::nullopt;
  auto mem = handoff->find("gpu_memory");
  if (mem == handoff->end()) return std::nullopt;
  if (mem->is_number_unsigned()) {
    const uint64_t v = mem->get<uint64_t>();
    return v > 0 && v <= spec::kMaxByteSize ? std::optional<uint64_t>(v) : std::nullopt;
  }
  if (mem->is_string()) {
    auto v = spec::ParseByteSize(mem->get_ref<const std::string&>());
    if (v.ok()) return *v;
  }
  return std::nullopt;
}

ResidencyModel BuildResidencyModel(const RunLogs& logs, std::optional<uint64_t> gpu_memory) {
  ResidencyModel m;
  m.run_dir = logs.run_dir;
  m.lines = logs.residency.size();
  std::vector<size_t> order(logs.residency.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return logs.residency[a].ts < logs.residency[b].ts; });
  const std::vector<PhaseSpan> phases = PhaseSpans(logs.handoff);

  std::map<int, GpuState> gpus;
  for (size_t i : order) {
    const ResidencyLine& l = logs.residency[i];
    if (m.first_ts == 0 || l.ts < m.first_ts) m.first_ts = l.ts;
    m.last_ts = std::max(m.last_ts, l.ts);
    for (int gpu : l.gpus) {
      GpuState& g = gpus[gpu];
      g.out.gpu = gpu;
      const Key key{l.role, l.rank, l.tag};
      auto it = g.holding.find(key);
      const uint64_t before = it == g.holding.end() ? 0 : it->second.bytes;
      g.sum = g.sum - before + l.bytes;
      if (l.bytes == 0) {
        if (it != g.holding.end()) g.holding.erase(it);
      } else if (before != l.bytes) {
        g.holding[key] = Holding{l.group, l.role, l.rank, l.tag, l.bytes, l.ts};
      }
      if (g.sum > g.out.peak_bytes) {
        g.out.peak_bytes = g.sum;
        g.out.peak_ts = l.ts;
        g.out.peak_holders = Snapshot(g.holding);
      }
      if (l.leak) {
        g.out.leaks.push_back(LeakMark{l.ts, l.role, l.rank, l.tag, l.delta, l.note});
        ++m.leaks;
      }
    }
    // Readings may name GPUs the worker's `gpus` does not (they are the device's own).
    for (const DeviceReading& d : l.devices) {
      GpuState& g = gpus[d.gpu];
      g.out.gpu = d.gpu;
      g.out.reading = d;
      g.out.reading_ts = l.ts;
      g.out.reading_worker = l.role + "/" + std::to_string(l.rank);
    }
  }
  for (auto& [id, g] : gpus) {
    g.out.holders = Snapshot(g.holding);
    g.out.ledger_bytes = g.sum;
    g.out.capacity = gpu_memory;
    if (g.out.peak_bytes > 0) g.out.peak_phase = PhaseAt(phases, g.out.peak_ts);
    m.gpus.push_back(std::move(g.out));
  }
  return m;
}

nlohmann::json ResidencyJson(const ResidencyModel& m) {
  auto holdings = [](const std::vector<Holding>& hs) {
    nlohmann::json a = nlohmann::json::array();
    for (const Holding& h : hs) {
      a.push_back({{"group", h.group}, {"role", h.role}, {"rank", h.rank}, {"tag", h.tag}, {"bytes", h.bytes},
                   {"since", h.since}});
    }
    return a;
  };
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuResidency& g : m.gpus) {
    nlohmann::json leaks = nlohmann::json::array();
    for (const LeakMark& l : g.leaks) {
      leaks.push_back({{"ts", l.ts}, {"role", l.role}, {"rank", l.rank}, {"tag", l.tag}, {"delta", l.delta},
                       {"note", l.note}});
    }
    nlohmann::json reading = nullptr;
    if (g.reading) {
      reading = {{"used", g.reading->used}, {"total", g.reading->total}, {"ts", g.reading_ts},
                 {"device_wide", g.reading->device_wide}, {"worker", g.reading_worker}};
    }
    gpus.push_back({{"gpu", g.gpu},
                    {"holders", holdings(g.holders)},
                    {"ledger_bytes", g.ledger_bytes},
                    {"peak", {{"bytes", g.peak_bytes}, {"ts", g.peak_ts}, {"phase", g.peak_phase},
                              {"holders", holdings(g.peak_holders)}}},
                    {"device", reading},
                    {"capacity", g.capacity ? nlohmann::json(*g.capacity) : nlohmann::json(nullptr)},
                    {"untracked_bytes", g.Untracked()},
                    {"leaks", leaks}});
  }
  return {{"run_dir", m.run_dir}, {"lines", m.lines}, {"first_ts", m.first_ts}, {"last_ts", m.last_ts},
          {"leaks", m.leaks}, {"gpus", gpus}};
}

}  // namespace tandem::report
