// `tandem-worker probe`: pattern fill, protocol handlers, verification after
// resume (probe_worker.h; schemas/control.schema.json).
#include "workers/probe_worker.h"

#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>

#include "common/log.h"
#include "workers/runtime/control_client.h"

namespace tandem::worker {
namespace {

using nlohmann::json;

constexpr size_t kChunk = 4u << 20;

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t NameHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The probe's memory and what each tag should hold now.
class Probe {
 public:
  Probe(std::unique_ptr<memory::TaggedMemory> mem, std::string corrupt_tag)
      : mem_(std::move(mem)), corrupt_tag_(std::move(corrupt_tag)) {}

  memory::TaggedMemory& mem() { return *mem_; }

  // Byte i of tag's pattern of generation g is byte (i%8) of Mix(seed ^ i/8).
  void PatternChunk(const std::string& tag, uint64_t gen, size_t offset, size_t n, std::vector<uint64_t>& words) {
    uint64_t seed = NameHash(tag) ^ (gen << 32);
    words.resize((n + 7) / 8);
    for (size_t w = 0; w < words.size(); ++w) words[w] = Mix(seed ^ (offset / 8 + w));
  }

  Status Fill(const std::string& tag, uint64_t gen) {
    TANDEM_ASSIGN_OR_RETURN(size_t size, mem_->Size(tag));
    std::vector<uint64_t> words;
    for (size_t off = 0; off < size; off += kChunk) {
      size_t n = std::min(kChunk, size - off);
      PatternChunk(tag, gen, off, n, words);
      TANDEM_RETURN_IF_ERROR(mem_->Write(tag, off, words.data(), n), "fill " + tag);
    }
    gen_[tag] = gen;
    return Status::Ok();
  }

  // kDataLoss naming the count and first offset of differing bytes.
  Status Verify(const std::string& tag) {
    TANDEM_ASSIGN_OR_RETURN(size_t size, mem_->Size(tag));
    uint64_t gen = gen_[tag];
    std::vector<uint64_t> want;
    // One chunk at most, and no larger than the tag: a 4 KiB tag must not pay
    // for zeroing a 4 MiB buffer on every resume (it did: most of a small
    // probe's time per command, docs/benchmarks.md "Handoff control overhead").
    std::vector<unsigned char> got(std::min(kChunk, size));
    uint64_t bad = 0;
    size_t first = 0;
    for (size_t off = 0; off < size; off += kChunk) {
      size_t n = std::min(kChunk, size - off);
      PatternChunk(tag, gen, off, n, want);
      TANDEM_RETURN_IF_ERROR(mem_->Read(tag, off, got.data(), n), "verify " + tag);
      if (std::memcmp(got.data(), want.data(), n) == 0) continue;
      const auto* w = reinterpret_cast<const unsigned char*>(want.data());
      for (size_t i = 0; i < n; ++i)
        if (got[i] != w[i]) {
          if (bad++ == 0) first = off + i;
        }
    }
    if (bad) {
      ++mismatches_;
      return DataLoss("tag " + tag + ": " + std::to_string(bad) + " of " + std::to_string(size) +
                      " bytes differ after resume, first at offset " + std::to_string(first));
    }
    ++verified_;
    return Status::Ok();
  }

  StatusOr<std::vector<std::string>> Resolve(const control::Command& c) {
    TANDEM_ASSIGN_OR_RETURN(auto tags, c.Tags());
    if (tags.empty()) return mem_->TagNames();
    for (const auto& t : tags)
      if (!mem_->Size(t).ok()) return NotFound(c.type + ": tag " + t + " is not managed by this worker");
    return tags;
  }

  StatusOr<json> Release(const control::Command& c) {
    TANDEM_ASSIGN_OR_RETURN(auto tags, Resolve(c));
    uint64_t freed = 0, copied = 0;
    for (const auto& t : tags) {
      if (t == corrupt_tag_ && mem_->Resident(t)) TANDEM_RETURN_IF_ERROR(Corrupt(t));
      TANDEM_ASSIGN_OR_RETURN(auto moved, mem_->Release(t));
      freed += moved.freed_bytes;
      copied += moved.copied_bytes;
    }
    return json{{"freed_bytes", freed}, {"copied_bytes", copied}};
  }

  StatusOr<json> Resume(const control::Command& c) {
    TANDEM_ASSIGN_OR_RETURN(auto tags, Resolve(c));
    uint64_t mapped = 0, copied = 0;
    std::vector<std::string> verified;
    for (const auto& t : tags) {
      TANDEM_ASSIGN_OR_RETURN(auto moved, mem_->Resume(t));
      mapped += moved.mapped_bytes;
      copied += moved.copied_bytes;
      if (moved.no_op) continue;
      if (moved.copied_bytes > 0) {
        TANDEM_RETURN_IF_ERROR(Verify(t), "resume");
        verified.push_back(t);
      } else {
        // Discarded: whatever it held is gone; the worker rebuilds it.
        TANDEM_RETURN_IF_ERROR(Fill(t, gen_[t] + 1), "resume");
      }
    }
    return json{{"mapped_bytes", mapped}, {"copied_bytes", copied}, {"verified", verified}};
  }

  StatusOr<json> LoadWeights(const control::Command& c) {
    TANDEM_ASSIGN_OR_RETURN(int64_t v, c.Version());
    TANDEM_ASSIGN_OR_RETURN(std::string source, c.Source());
    json detail = {{"version", v}, {"source", source}};
    if (mem_->Size("weights").ok()) {
      if (!mem_->Resident("weights")) return FailedPrecondition("load_weights: tag weights is released; resume it first");
      TANDEM_RETURN_IF_ERROR(Fill("weights", static_cast<uint64_t>(v) + 1000), "load_weights");
      detail["bytes"] = *mem_->Size("weights");
    }
    loaded_version_ = v;
    return detail;
  }

  Status CycleLocally() {
    for (const auto& t : mem_->TagNames()) TANDEM_RETURN_IF_ERROR(mem_->Release(t).status());
    for (const auto& t : mem_->TagNames()) {
      TANDEM_ASSIGN_OR_RETURN(auto moved, mem_->Resume(t));
      if (moved.copied_bytes) TANDEM_RETURN_IF_ERROR(Verify(t));
      else TANDEM_RETURN_IF_ERROR(Fill(t, gen_[t] + 1));
    }
    return Status::Ok();
  }

  // Flips one byte in the middle of the tag (the --corrupt-tag test hook).
  Status Corrupt(const std::string& tag) {
    TANDEM_ASSIGN_OR_RETURN(size_t size, mem_->Size(tag));
    unsigned char b = 0;
    TANDEM_RETURN_IF_ERROR(mem_->Read(tag, size / 2, &b, 1));
    b ^= 0x40;
    log::Warn("probe", "corrupting tag={} offset={} (test hook)", tag, size / 2);
    return mem_->Write(tag, size / 2, &b, 1);
  }

  uint64_t verified() const { return verified_; }
  uint64_t mismatches() const { return mismatches_; }
  int64_t published_version = -1;
  int64_t loaded_version_ = -1;
  std::string pause_mode;

 private:
  std::unique_ptr<memory::TaggedMemory> mem_;
  std::string corrupt_tag_;
  std::map<std::string, uint64_t> gen_;
  uint64_t verified_ = 0;
  uint64_t mismatches_ = 0;
};

StatusOr<std::unique_ptr<memory::MemoryBackend>> MakeBackend(const ProbeOptions& o) {
  if (o.backend == "cpu") return memory::MakeCpuBackend(o.cpu_capacity);
  auto cuda = memory::MakeCudaBackend(o.device);
  if (o.backend == "cuda" || cuda.ok()) return cuda;
  log::Info("probe", "no CUDA backend ({}); using host memory", cuda.status().message());
  return memory::MakeCpuBackend(o.cpu_capacity);
}

void RegisterHandlers(control::ControlClient& client, Probe& probe) {
  client.On("pause", [&](const control::Command& c) -> StatusOr<json> {
    TANDEM_ASSIGN_OR_RETURN(probe.pause_mode, c.Mode());
    return json{{"mode", probe.pause_mode}};
  });
  client.On("continue", [&](const control::Command&) -> StatusOr<json> {
    probe.pause_mode.clear();
    return json::object();
  });
  client.On("release", [&](const control::Command& c) { return probe.Release(c); });
  client.On("resume", [&](const control::Command& c) { return probe.Resume(c); });
  client.On("publish_weights", [&](const control::Command& c) -> StatusOr<json> {
    TANDEM_ASSIGN_OR_RETURN(probe.published_version, c.Version());
    return json{{"version", probe.published_version}};
  });
  client.On("load_weights", [&](const control::Command& c) { return probe.LoadWeights(c); });
}

}  // namespace

int RunProbe(const ProbeOptions& o) {
  auto backend = MakeBackend(o);
  if (!backend.ok()) {
    log::Error("probe", "{}", backend.status().message());
    return 1;
  }
  auto mem = memory::TaggedMemory::Create(std::move(*backend), o.tags);
  if (!mem.ok()) {
    log::Error("probe", "{}", mem.status().message());
    return 1;
  }
  Probe probe(std::move(*mem), o.corrupt_tag);
  for (const auto& t : probe.mem().TagNames()) {
    Status st = probe.Fill(t, 1);
    if (!st.ok()) {
      log::Error("probe", "{}", st.message());
      return 1;
    }
  }
  if (o.start_released) {
    for (const auto& t : probe.mem().TagNames()) {
      auto released = probe.mem().Release(t);
      if (!released.ok()) {
        log::Error("probe", "{}", released.status().message());
        return 1;
      }
    }
  }
  log::Info("probe", "ready backend={} tags={} resident_bytes={}", probe.mem().backend().name(),
            probe.mem().TagNames().size(), probe.mem().ResidentBytes());

  if (!o.endpoint) {
    for (int i = 0; i < o.cycles; ++i) {
      Status st = probe.CycleLocally();
      if (!st.ok()) {
        log::Error("probe", "cycle {}: {}", i, st.message());
        return 1;
      }
    }
    std::cout << json{{"cycles", o.cycles}, {"verified", probe.verified()}, {"mismatches", probe.mismatches()},
                      {"residency", control::ToJson(probe.mem().Residency())}}.dump()
              << std::endl;
    return 0;
  }

  control::ControlClient::Options co;
  co.endpoint = *o.endpoint;
  co.hello = o.hello;
  for (const auto& s : probe.mem().Specs()) co.hello.tags.push_back({s.name, s.bytes, s.backup});
  co.residency = [&probe] { return probe.mem().Residency(); };
  co.connect_timeout = o.connect_timeout;
  control::ControlClient client(co);
  RegisterHandlers(client, probe);
  Status st = client.Connect();
  if (!st.ok()) {
    log::Error("probe", "{}", st.message());
    return 1;
  }

  if (o.controller) {
    for (int cycle = 1; cycle <= o.cycles && st.ok(); ++cycle) {
      for (const auto& phase : o.phases) {
        std::optional<int64_t> version;
        if (phase == "sync") version = cycle;
        st = client.RequestPhase(phase, version, o.phase_timeout);
        // A restarted daemon: reconnect (a fresh hello with our residency)
        // and ask again; the daemon runs a phase once however often it is asked.
        while (st.code() == StatusCode::kUnavailable && o.reconnect_window.count() > 0) {
          log::Warn("probe", "controller: {}; reconnecting for up to {}ms", st.message(), o.reconnect_window.count());
          st = client.Connect(o.reconnect_window);
          if (!st.ok()) break;
          st = client.RequestPhase(phase, version, o.phase_timeout);
        }
        if (!st.ok()) break;
      }
      if (st.ok()) {
        // Best effort: a daemon gone now is met, and reconnected to, at the next request_phase.
        Status sent = client.SendMetrics(
            {{"cycle", cycle}, {"verified", probe.verified()}, {"mismatches", probe.mismatches()}}, cycle);
        if (!sent.ok()) log::Warn("probe", "controller: metrics of cycle {} not sent: {}", cycle, sent.message());
      }
      if (st.ok()) log::Info("probe", "cycle {} done verified={} mismatches={}", cycle, probe.verified(), probe.mismatches());
    }
    if (!st.ok()) {
      log::Error("probe", "controller: {}", st.message());
      return 1;
    }
    return probe.mismatches() ? 1 : 0;
  }

  for (;;) {
    st = client.Serve();
    if (st.ok()) break;  // shutdown acked
    if (st.code() == StatusCode::kUnavailable && o.reconnect_window.count() > 0) {
      log::Warn("probe", "{}; reconnecting for up to {}ms", st.message(), o.reconnect_window.count());
      Status rc = client.Connect(o.reconnect_window);
      if (rc.ok()) continue;
      st = rc;
    }
    log::Error("probe", "{}", st.message());
    return 1;
  }
  log::Info("probe", "shut down verified={} mismatches={}", probe.verified(), probe.mismatches());
  return 0;
}

}  // namespace tandem::worker
