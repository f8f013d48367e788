// `tandem residency` as text: one block per GPU (residency_model.h;
// docs/cli.md shows an example).
#include <algorithm>

#include <fmt/format.h>

#include "orchestrator/report/human_units.h"
#include "orchestrator/report/residency_model.h"

namespace tandem::report {
namespace {

std::string Table(const std::vector<std::vector<std::string>>& rows, const std::string& indent) {
  std::vector<size_t> w;
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line = indent;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string PeakHolders(const std::vector<Holding>& hs) {
  std::string out;
  for (const Holding& h : hs) {
    out += fmt::format("{}{} {} {}", out.empty() ? "" : ", ", h.Worker(), h.tag, HumanBytes(h.bytes));
  }
  return out;
}

}  // namespace

std::string ResidencyText(const ResidencyModel& m) {
  std::string out = fmt::format("run dir {}  ({} residency lines", m.run_dir, m.lines);
  if (m.lines > 0) out += fmt::format(", {} .. {}", ClockTime(m.first_ts), ClockTime(m.last_ts));
  out += fmt::format(", {} leak{})\n", m.leaks, m.leaks == 1 ? "" : "s");
  if (m.gpus.empty()) return out + "no GPU holds anything: residency.jsonl is empty or missing\n";
  for (const GpuResidency& g : m.gpus) {
    out += fmt::format("\nGPU {}", g.gpu);
    if (g.reading) {
      out += fmt::format("  {} {} used of {} (at {})", g.reading->device_wide ? "device" : "worker-reported",
                         HumanBytes(g.reading->used), HumanBytes(g.reading->total), ClockTime(g.reading_ts));
    }
    out += fmt::format("  ledger {}", HumanBytes(g.ledger_bytes));
    if (g.reading && g.reading->device_wide) {
      const int64_t u = g.Untracked();
      out += fmt::format("  untracked {}{}", u < 0 ? "-" : "", HumanBytes(static_cast<uint64_t>(u < 0 ? -u : u)));
    }
    out += "\n";
    if (g.peak_bytes > 0) {
      out += fmt::format("  peak {} at {}{}: {}\n", HumanBytes(g.peak_bytes), ClockTime(g.peak_ts),
                         g.peak_phase.empty() ? "" : " (" + g.peak_phase + ")", PeakHolders(g.peak_holders));
    }
    if (g.holders.empty()) {
      out += "  nothing resident now\n";
    } else {
      std::vector<std::vector<std::string>> rows{{"HOLDER", "TAG", "BYTES", "SINCE"}};
      for (const Holding& h : g.holders) rows.push_back({h.Worker(), h.tag, HumanBytes(h.bytes), ClockTime(h.since)});
      out += Table(rows, "  ");
    }
    if (!g.leaks.empty()) {
      out += fmt::format("  LEAKS ({}): releases after which the device's used memory did not fall\n",
                         g.leaks.size());
      std::vector<std::vector<std::string>> rows;
      for (const LeakMark& l : g.leaks) {
        rows.push_back({ClockTime(l.ts), l.role + "/" + std::to_string(l.rank), l.tag,
                        "released " + HumanBytes(static_cast<uint64_t>(l.delta < 0 ? -l.delta : l.delta)), l.note});
      }
      out += Table(rows, "  ! ");
    }
  }
  return out;
}

}  // namespace tandem::report
