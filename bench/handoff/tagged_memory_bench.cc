// Offload / restore benchmark of tagged device memory on CUDA (issue #3 part
// 9; docs/benchmarks.md, "offload / restore"). For each size N GiB,
// in one process and one after the other:
//   raw      cudaMemcpyAsync of N bytes device->host then host->device, one
//            stream, pinned host buffer (cudaMallocHost): the baseline;
//   backup   TaggedMemory::Release + Resume of an N-byte tag declared with
//            backup (copy to pinned host + unmap/free; map + copy back);
//   discard  the same for a discardable tag (unmap/free; map only);
//   vmm      the bare driver calls: cuMemUnmap+cuMemRelease, then
//            cuMemCreate+cuMemMap+cuMemSetAccess, no TaggedMemory around them.
// Each figure is the median of --reps timed repetitions after one warm-up.
// The verdict is printed last: backup round trip time against raw's (target
// >= 85%), discard ms per GiB (target <= 1 ms/GiB). --sweep-gib times the
// backup round trip over copy streams x chunk sizes at one size; --anatomy-gib
// splits a restore's host->device copy by kind of destination and source.
// Results: docs/benchmarks.md "Offload / restore (tagged memory, H200)".
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workers/runtime/tagged_memory.h"

namespace {

using tandem::memory::MakeCudaBackend;
using tandem::memory::TaggedMemory;
using tandem::memory::TagSpec;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;

struct Options {
  std::vector<double> sizes_gib = {1, 4, 16, 32};
  int reps = 3;
  int streams = 4;
  size_t chunk_mib = 64;
  double sweep_gib = 0;
  double anatomy_gib = 0;
  std::string json_path;
};

// A failed CUDA call ends the benchmark with a message (a bench, not a worker).
struct Failure {
  std::string what;
};
void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Failure{std::string(what) + ": " + cudaGetErrorString(e)};
}
void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* name = "?";
    cuGetErrorName(r, &name);
    throw Failure{std::string(what) + ": " + name};
  }
}
void Check(const tandem::Status& st, const char* what) {
  if (!st.ok()) throw Failure{std::string(what) + ": " + st.ToString()};
}

double Seconds(const std::function<void()>& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double GBps(uint64_t bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0; }

// Median seconds of each step of a two-step cycle, after one warm-up cycle.
struct Pair {
  double first = 0, second = 0;
  std::vector<double> firsts, seconds;  // every timed repetition
  double total() const { return first + second; }
};
Pair TimeCycle(int reps, const std::function<void()>& a, const std::function<void()>& b) {
  a();
  b();
  Pair p;
  for (int i = 0; i < reps; ++i) {
    double x = Seconds(a), y = Seconds(b);
    p.firsts.push_back(x);
    p.seconds.push_back(y);
  }
  p.first = Median(p.firsts);
  p.second = Median(p.seconds);
  return p;
}

Pair RawCopy(uint64_t bytes, int reps) {
  void* dev = nullptr;
  void* host = nullptr;
  cudaStream_t s = nullptr;
  Check(cudaMalloc(&dev, bytes), "cudaMalloc");
  Check(cudaMallocHost(&host, bytes), "cudaMallocHost");
  Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  Check(cudaMemset(dev, 0x5a, bytes), "cudaMemset");
  Check(cudaDeviceSynchronize(), "sync");
  Pair p = TimeCycle(
      reps,
      [&] {
        Check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s), "D2H");
        Check(cudaStreamSynchronize(s), "sync D2H");
      },
      [&] {
        Check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s), "H2D");
        Check(cudaStreamSynchronize(s), "sync H2D");
      });
  cudaStreamDestroy(s);
  cudaFreeHost(host);
  cudaFree(dev);
  return p;
}

// Release+Resume of one tag; for a backed-up tag, checks that random bytes
// at both ends of the range came back (the GPU test checks every byte).
Pair TaggedCycle(uint64_t bytes, bool backup, int reps, int streams, size_t chunk) {
  auto backend = MakeCudaBackend(0, streams, chunk);
  Check(backend.status(), "cuda backend");
  const std::string tag = backup ? "weights" : "kv_cache";
  auto tm = TaggedMemory::Create(std::move(*backend), {TagSpec{tag, bytes, backup}});
  Check(tm.status(), "tagged memory");
  TaggedMemory& mem = **tm;
  void* base = *mem.Base(tag);
  Check(cudaMemset(base, 0x5a, bytes), "cudaMemset");  // not zeros
  std::vector<unsigned char> head(kMiB), tail(kMiB), got(kMiB);
  std::mt19937_64 rng(std::random_device{}());
  for (auto& c : head) c = static_cast<unsigned char>(rng());
  for (auto& c : tail) c = static_cast<unsigned char>(rng());
  Check(mem.Write(tag, 0, head.data(), kMiB), "write head");
  Check(mem.Write(tag, bytes - kMiB, tail.data(), kMiB), "write tail");
  Pair p = TimeCycle(
      reps, [&] { Check(mem.Release(tag).status(), "release"); }, [&] { Check(mem.Resume(tag).status(), "resume"); });
  if (backup) {
    Check(mem.Read(tag, 0, got.data(), kMiB), "read head");
    if (got != head) throw Failure{"backup: the first MiB differs after resume"};
    Check(mem.Read(tag, bytes - kMiB, got.data(), kMiB), "read tail");
    if (got != tail) throw Failure{"backup: the last MiB differs after resume"};
  }
  return p;
}

// One reserved range and the bare VMM calls on it (no TaggedMemory).
struct VmmRange {
  CUmemAllocationProp prop{};
  CUmemAccessDesc access{};
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  size_t bytes = 0;

  explicit VmmRange(uint64_t n) {
    CUdevice dev = 0;
    Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0;
    Check(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity");
    bytes = (n + gran - 1) / gran * gran;
    Check(cuMemAddressReserve(&va, bytes, gran, 0, 0), "cuMemAddressReserve");
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  ~VmmRange() {
    if (h) Unmap();
    cuMemAddressFree(va, bytes);
  }
  void Map() {
    Check(cuMemCreate(&h, bytes, &prop, 0), "cuMemCreate");
    Check(cuMemMap(va, bytes, 0, h, 0), "cuMemMap");
    Check(cuMemSetAccess(va, bytes, &access, 1), "cuMemSetAccess");
  }
  void Unmap() {
    Check(cuMemUnmap(va, bytes), "cuMemUnmap");
    Check(cuMemRelease(h), "cuMemRelease");
    h = 0;
  }
  void* ptr() const { return reinterpret_cast<void*>(va); }
};

// unmap+release, then create+map+access, on one reserved range.
Pair BareVmm(uint64_t bytes, int reps) {
  VmmRange r(bytes);
  r.Map();
  return TimeCycle(reps, [&] { r.Unmap(); }, [&] { r.Map(); });
}

// Where a restore's host->device copy loses against the raw one: H2D of
// `bytes` into memory just allocated ("fresh") and into the same memory again
// ("touched"), for cudaMalloc and for a VMM mapping, from each kind of pinned
// host memory; a fresh VMM mapping first memset on the GPU; and one first
// touched by small copies (4 KiB per 2 MiB page) before the bulk copy.
json Anatomy(uint64_t bytes, int reps) {
  json rows = json::array();
  cudaStream_t s = nullptr;
  Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  auto h2d = [&](void* dst, const void* src) {
    return Seconds([&] {
      Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "H2D");
      Check(cudaStreamSynchronize(s), "sync");
    });
  };
  struct Src {
    const char* name;
    unsigned flags;  // cuMemHostAlloc flags; ~0u: cudaMallocHost
  };
  for (Src src : {Src{"cudaMallocHost", ~0u}, Src{"cuMemHostAlloc portable", CU_MEMHOSTALLOC_PORTABLE},
                  Src{"cuMemHostAlloc portable+wc", CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_WRITECOMBINED}}) {
    void* host = nullptr;
    if (src.flags == ~0u) Check(cudaMallocHost(&host, bytes), "cudaMallocHost");
    else Check(cuMemHostAlloc(&host, bytes, src.flags), "cuMemHostAlloc");
    std::memset(host, 0x5a, bytes);
    std::vector<double> malloc_fresh, malloc_touched, vmm_fresh, vmm_touched, vmm_memset, memset_s, vmm_ce_touch;
    for (int i = 0; i < reps + 1; ++i) {  // the first round is a warm-up
      void* dev = nullptr;
      Check(cudaMalloc(&dev, bytes), "cudaMalloc");
      double a = h2d(dev, host), b = h2d(dev, host);
      Check(cudaFree(dev), "cudaFree");
      VmmRange r(bytes);
      r.Map();
      double c = h2d(r.ptr(), host), d = h2d(r.ptr(), host);
      r.Unmap();
      r.Map();
      double m = Seconds([&] {
        Check(cudaMemsetAsync(r.ptr(), 0, bytes, s), "memset");
        Check(cudaStreamSynchronize(s), "sync");
      });
      double e = h2d(r.ptr(), host);
      // Fresh again, first touched by the copy engine: 4 KiB per 2 MiB.
      r.Unmap();
      r.Map();
      double t = Seconds([&] {
        for (size_t off = 0; off < bytes; off += 2 * kMiB)
          Check(cudaMemcpyAsync(static_cast<char*>(r.ptr()) + off, static_cast<char*>(host) + off, 4096,
                                cudaMemcpyHostToDevice, s), "touch");
        Check(cudaMemcpyAsync(r.ptr(), host, bytes, cudaMemcpyHostToDevice, s), "H2D");
        Check(cudaStreamSynchronize(s), "sync");
      });
      if (i == 0) continue;
      vmm_ce_touch.push_back(t);
      malloc_fresh.push_back(a);
      malloc_touched.push_back(b);
      vmm_fresh.push_back(c);
      vmm_touched.push_back(d);
      memset_s.push_back(m);
      vmm_memset.push_back(e);
    }
    if (src.flags == ~0u) cudaFreeHost(host);
    else cuMemFreeHost(host);
    json row = {{"source", src.name},
                {"malloc_fresh_gbps", GBps(bytes, Median(malloc_fresh))},
                {"malloc_touched_gbps", GBps(bytes, Median(malloc_touched))},
                {"vmm_fresh_gbps", GBps(bytes, Median(vmm_fresh))},
                {"vmm_touched_gbps", GBps(bytes, Median(vmm_touched))},
                {"vmm_after_memset_gbps", GBps(bytes, Median(vmm_memset))},
                {"memset_ms", Median(memset_s) * 1e3},
                {"vmm_ce_touch_then_copy_gbps", GBps(bytes, Median(vmm_ce_touch))}};
    rows.push_back(row);
  }
  cudaStreamDestroy(s);
  return rows;
}

std::vector<double> ParseList(const std::string& s) {
  std::vector<double> out;
  for (size_t start = 0; start < s.size();) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(std::atof(s.substr(start, comma - start).c_str()));
    start = comma + 1;
  }
  return out;
}

int Usage() {
  std::fprintf(stderr,
               "usage: tagged_memory_bench [--sizes 1,4,16,32] [--reps 3] [--streams 4] [--chunk-mib 64]\n"
               "                           [--sweep-gib 0] [--anatomy-gib 0] [--json FILE]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return Usage();
    std::string v = argv[++i];
    if (a == "--sizes") o.sizes_gib = ParseList(v);
    else if (a == "--reps") o.reps = std::max(1, std::atoi(v.c_str()));
    else if (a == "--streams") o.streams = std::max(1, std::atoi(v.c_str()));
    else if (a == "--chunk-mib") o.chunk_mib = static_cast<size_t>(std::max(1, std::atoi(v.c_str())));
    else if (a == "--sweep-gib") o.sweep_gib = std::atof(v.c_str());
    else if (a == "--anatomy-gib") o.anatomy_gib = std::atof(v.c_str());
    else if (a == "--json") o.json_path = v;
    else return Usage();
  }
  json out = {{"reps", o.reps}, {"streams", o.streams}, {"chunk_mib", o.chunk_mib}};
  try {
    Check(cudaSetDevice(0), "cudaSetDevice");
    Check(cudaFree(nullptr), "context");
    cudaDeviceProp prop{};
    Check(cudaGetDeviceProperties(&prop, 0), "properties");
    int driver = 0;
    cudaDriverGetVersion(&driver);
    std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    out["device"] = prop.name;
    out["cuda_driver"] = driver;
    out["date"] = date;
    std::printf("[bench] %s, CUDA driver %d, %s; copy streams %d, chunk %zu MiB, median of %d\n", prop.name, driver,
                date, o.streams, o.chunk_mib, o.reps);

    if (o.sweep_gib > 0) {
      uint64_t bytes = static_cast<uint64_t>(o.sweep_gib * kGiB);
      Pair raw = RawCopy(bytes, o.reps);
      std::printf("\n[sweep] backup release+resume of %.0f GiB; raw D2H+H2D %.1f ms\n", o.sweep_gib, raw.total() * 1e3);
      std::printf("%8s %10s %12s %12s %8s\n", "streams", "chunk MiB", "release GB/s", "resume GB/s", "ratio");
      for (int streams : {1, 2, 4, 8})
        for (size_t chunk : {16, 64, 256}) {
          Pair t = TaggedCycle(bytes, true, o.reps, streams, chunk * kMiB);
          double ratio = raw.total() / t.total();
          std::printf("%8d %10zu %12.1f %12.1f %8.3f\n", streams, chunk, GBps(bytes, t.first), GBps(bytes, t.second),
                      ratio);
          out["sweep"].push_back({{"gib", o.sweep_gib}, {"streams", streams}, {"chunk_mib", chunk},
                                  {"release_s", t.first}, {"resume_s", t.second}, {"raw_s", raw.total()},
                                  {"ratio", ratio}});
        }
    }

    if (o.anatomy_gib > 0) {
      uint64_t bytes = static_cast<uint64_t>(o.anatomy_gib * kGiB);
      json rows = Anatomy(bytes, o.reps);
      std::printf("\n[anatomy] H2D of %.0f GiB, GB/s: into memory just allocated (fresh) / written before (touched)\n",
                  o.anatomy_gib);
      std::printf("%-28s %12s %14s %10s %12s %14s %10s %14s\n", "pinned source", "malloc fresh", "malloc touched",
                  "vmm fresh", "vmm touched", "memset+fresh", "memset ms", "CE touch+copy");
      for (const auto& r : rows)
        std::printf("%-28s %12.1f %14.1f %10.1f %12.1f %14.1f %10.2f %14.1f\n", std::string(r["source"]).c_str(),
                    double(r["malloc_fresh_gbps"]), double(r["malloc_touched_gbps"]), double(r["vmm_fresh_gbps"]),
                    double(r["vmm_touched_gbps"]), double(r["vmm_after_memset_gbps"]), double(r["memset_ms"]),
                    double(r["vmm_ce_touch_then_copy_gbps"]));
      out["anatomy"] = rows;
    }

    std::vector<json> rows;
    for (double gib : o.sizes_gib) {
      uint64_t bytes = static_cast<uint64_t>(gib * kGiB);
      size_t free_b = 0, total_b = 0;
      Check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
      if (bytes + 2 * kGiB > free_b) {
        std::printf("[bench] %.0f GiB: skipped, %.1f GiB free\n", gib, free_b / double(kGiB));
        continue;
      }
      std::fflush(stdout);
      Pair raw = RawCopy(bytes, o.reps);
      Pair backup = TaggedCycle(bytes, true, o.reps, o.streams, o.chunk_mib * kMiB);
      Pair discard = TaggedCycle(bytes, false, o.reps, o.streams, o.chunk_mib * kMiB);
      Pair vmm = BareVmm(bytes, o.reps);
      json r = {{"gib", gib},
                {"raw_d2h_s", raw.first},
                {"raw_h2d_s", raw.second},
                {"backup_release_s", backup.first},
                {"backup_resume_s", backup.second},
                {"discard_release_s", discard.first},
                {"discard_resume_s", discard.second},
                {"vmm_unmap_release_s", vmm.first},
                {"vmm_create_map_s", vmm.second},
                {"release_vs_d2h", raw.first / backup.first},
                {"resume_vs_h2d", raw.second / backup.second},
                {"ratio", raw.total() / backup.total()},
                {"discard_ms_per_gib", discard.total() * 1e3 / gib},
                {"reps_s",
                 {{"raw_d2h", raw.firsts}, {"raw_h2d", raw.seconds}, {"backup_release", backup.firsts},
                  {"backup_resume", backup.seconds}, {"discard_release", discard.firsts},
                  {"discard_resume", discard.seconds}, {"vmm_unmap_release", vmm.firsts},
                  {"vmm_create_map", vmm.seconds}}}};
      std::printf("[bench] %.0f GiB done: raw %.1f ms, backup %.1f ms, discard %.2f ms\n", gib, raw.total() * 1e3,
                  backup.total() * 1e3, discard.total() * 1e3);
      std::fflush(stdout);
      rows.push_back(r);
      out["rows"].push_back(r);
    }

    std::printf("\nGB/s = 1e9 B/s; ms are medians. ratio = raw (D2H+H2D) time / backup (release+resume) time.\n");
    std::printf("%5s | %8s %8s | %11s %11s | %9s %9s %7s | %9s %9s | %6s %6s %6s\n", "GiB", "raw D2H", "raw H2D",
                "bk release", "bk resume", "kv rel ms", "kv res ms", "ms/GiB", "vmm unmap", "vmm map", "rel/", "res/",
                "ratio");
    std::printf("%5s | %8s %8s | %11s %11s | %9s %9s %7s | %9s %9s | %6s %6s %6s\n", "", "GB/s", "GB/s", "GB/s",
                "GB/s", "", "", "", "ms", "ms", "D2H", "H2D", "");
    for (const auto& r : rows) {
      double gib = r["gib"];
      uint64_t bytes = static_cast<uint64_t>(gib * kGiB);
      std::printf("%5.0f | %8.1f %8.1f | %11.1f %11.1f | %9.2f %9.2f %7.2f | %9.2f %9.2f | %6.3f %6.3f %6.3f\n", gib,
                  GBps(bytes, r["raw_d2h_s"]), GBps(bytes, r["raw_h2d_s"]), GBps(bytes, r["backup_release_s"]),
                  GBps(bytes, r["backup_resume_s"]), double(r["discard_release_s"]) * 1e3,
                  double(r["discard_resume_s"]) * 1e3, double(r["discard_ms_per_gib"]),
                  double(r["vmm_unmap_release_s"]) * 1e3, double(r["vmm_create_map_s"]) * 1e3,
                  double(r["release_vs_d2h"]), double(r["resume_vs_h2d"]), double(r["ratio"]));
    }
    double worst = 1e9, worst_kv = 0;
    for (const auto& r : rows) {
      worst = std::min(worst, double(r["ratio"]));
      worst_kv = std::max(worst_kv, double(r["discard_ms_per_gib"]));
    }
    if (!rows.empty())
      std::printf("\nverdict: backup round trip >= %.1f%% of raw pinned copy (target 85%%: %s); "
                  "discard release+resume <= %.2f ms/GiB (target 1: %s)\n",
                  worst * 100, worst >= 0.85 ? "met" : "NOT met", worst_kv, worst_kv <= 1.0 ? "met" : "NOT met");
  } catch (const Failure& f) {
    std::fprintf(stderr, "tagged_memory_bench: %s\n", f.what.c_str());
    out["error"] = f.what;
    if (!o.json_path.empty()) std::ofstream(o.json_path) << out.dump(2) << "\n";
    return 1;
  }
  if (!o.json_path.empty()) std::ofstream(o.json_path) << out.dump(2) << "\n";
  return 0;
}
