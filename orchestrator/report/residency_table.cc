// `tandem residency` as text: one block per GPU (residency_model.h;
// docs/cli.md shows an example), then a legend saying what the GPU lines'
// readings are against the ledger: a device-wide reading (CUDA's, every
// process on the GPU) vs the sum of ledger bytes, and a CPU probe's
// worker-reported pools; and where the capacity comes from.
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

// What the numbers of a GPU line are, for the kinds of reading this run has.
std::string Legend(bool device_wide, bool worker_reported, bool spec_capacity) {
  std::string out =
      "\nledger: the bytes the workers hold by their own account, the sum of the HOLDER rows (a worker\n"
      "  on several GPUs counts on each); the ledger checks every resume against the capacity.\n";
  if (device_wide) {
    out +=
        "device: the GPU's own reading (CUDA: every process and context on it), so it is at least the\n"
        "  ledger; untracked = device used - ledger (CUDA contexts, allocator caches, other processes).\n";
  }
  if (worker_reported) {
    out +=
        "worker-reported: no device-wide reading (CPU workers): the bytes mapped in the pools of the\n"
        "  worker named, of its own capacity (a probe's --cpu-capacity, else the host's memory), at its\n"
        "  last answer; not the GPU's total, and not compared with the ledger.\n";
  }
  out += spec_capacity ? "capacity: the spec's handoff.gpu_memory, per GPU.\n"
                       : "capacity: the device's total (the spec sets no handoff.gpu_memory).\n";
  return out;
}

}  // namespace

std::string ResidencyText(const ResidencyModel& m) {
  std::string out = fmt::format("run dir {}  ({} residency lines", m.run_dir, m.lines);
  if (m.lines > 0) out += fmt::format(", {} .. {}", ClockTime(m.first_ts), ClockTime(m.last_ts));
  out += fmt::format(", {} leak{})\n", m.leaks, m.leaks == 1 ? "" : "s");
  if (m.gpus.empty()) return out + "no GPU holds anything: residency.jsonl is empty or missing\n";
  bool device_wide = false, worker_reported = false, spec_capacity = false;
  for (const GpuResidency& g : m.gpus) {
    out += fmt::format("\nGPU {}", g.gpu);
    if (g.reading && g.reading->device_wide) {
      out += fmt::format("  device {} used of {} (at {})", HumanBytes(g.reading->used), HumanBytes(g.reading->total),
                         ClockTime(g.reading_ts));
      device_wide = true;
    } else if (g.reading) {
      out += fmt::format("  worker-reported {} used of {} ({}, at {})", HumanBytes(g.reading->used),
                         HumanBytes(g.reading->total), g.reading_worker, ClockTime(g.reading_ts));
      worker_reported = true;
    }
    out += fmt::format("  ledger {}", HumanBytes(g.ledger_bytes));
    if (g.reading && g.reading->device_wide) {
      const int64_t u = g.Untracked();
      out += fmt::format("  untracked {}{}", u < 0 ? "-" : "", HumanBytes(static_cast<uint64_t>(u < 0 ? -u : u)));
    }
    if (g.capacity) {
      out += fmt::format("  capacity {} (handoff.gpu_memory)", HumanBytes(*g.capacity));
      spec_capacity = true;
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
  return out + Legend(device_wide, worker_reported, spec_capacity);
}

}  // namespace tandem::report
