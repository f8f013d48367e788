// Tagged device memory (issue #3 part 4; docs/control-protocol.md,
// memory tags).
//
// One pool per tag (weights, kv_cache, params, ...). Each pool reserves its
// virtual address range once, at creation, and never moves it. `Release(tag)`
// frees the pool's physical memory: discarding it, or first copying it to a
// host backup when the tag was declared with `backup`. `Resume(tag)` maps new
// physical memory at the same addresses and restores the backup, so every
// pointer handed out by Allocate (and any CUDA graph captured over them)
// stays valid. Release of a released tag and resume of a resident tag are
// no-ops (the protocol retries commands).
//
// Backends (MemoryBackend):
// - CPU (CI, machines without a GPU): mmap(PROT_NONE, MAP_NORESERVE) reserves;
//   map = mmap(MAP_FIXED, PROT_READ|PROT_WRITE) of fresh anonymous pages
//   (zero-filled); unmap = madvise(MADV_DONTNEED) then mmap(MAP_FIXED,
//   PROT_NONE), which returns the pages to the kernel and keeps the range
//   reserved. Used/total come from the pools' own accounting: used = bytes
//   mapped by every pool of the process, total = the configured capacity
//   (default MemTotal) — DeviceMemory.source == "pool".
// - CUDA (tagged_memory_cuda.cc, built with TANDEM_WITH_CUDA):
//   cuMemAddressReserve once; cuMemCreate + cuMemMap + cuMemSetAccess on
//   resume; cuMemUnmap + cuMemRelease on release. Backups live in pinned host
//   memory (cuMemHostAlloc); copies go in large chunks round-robin over
//   several streams. Used/total from cuMemGetInfo (source "cuda").
//
// A `grow` tag reserves its size as address space only: physical memory is
// mapped as Allocate hands it out (in chunks rounded to the granularity),
// and a resume maps again exactly the chunks mapped before. The pool of
// decode graphs is one: its size is known only once they are captured.
//
// Not thread-safe: one control thread calls Release/Resume; compute threads
// may use the memory only while the tag is resident. Allocate must not race
// a Release or Resume of its tag.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/control/control_messages.h"

namespace tandem::memory {

// Physical memory behind a reserved range; opaque to TaggedMemory.
struct Mapping {
  void* base = nullptr;
  size_t bytes = 0;        // reserved size (multiple of granularity)
  uint64_t handle = 0;     // backend-specific (CUDA: CUmemGenericAllocationHandle)
};

// What a pool needs from a device. Every method returns an error instead of
// aborting; each is called only in the state its comment names.
class MemoryBackend {
 public:
  virtual ~MemoryBackend() = default;
  virtual std::string name() const = 0;          // "cpu" or "cuda"
  virtual size_t granularity() const = 0;        // sizes are rounded up to this
  // Reserves `bytes` of address space without physical memory.
  virtual StatusOr<Mapping> Reserve(size_t bytes) = 0;
  // Unreserved range: gives the address space back (unmapped first).
  virtual Status Unreserve(Mapping& m) = 0;
  // Backs the whole reserved range with new physical memory, read-write.
  virtual Status Map(Mapping& m) = 0;
  // Frees the physical memory; the range stays reserved.
  virtual Status Unmap(Mapping& m) = 0;
  // Host memory for backups (pinned on CUDA).
  virtual StatusOr<void*> AllocHost(size_t bytes) = 0;
  virtual void FreeHost(void* p, size_t bytes) = 0;
  // Copies between device memory (mapped) and host memory; synchronous on return.
  virtual Status CopyToHost(void* host, const void* device, size_t bytes) = 0;
  virtual Status CopyToDevice(void* device, const void* host, size_t bytes) = 0;
  // The device's used/total (the caller passes the pools' mapped bytes, for
  // backends whose reading is the pools' own accounting).
  virtual control::DeviceMemory Usage(uint64_t pools_mapped_bytes) const = 0;
};

// The CPU backend. `capacity_bytes` 0 means MemTotal from /proc/meminfo.
std::unique_ptr<MemoryBackend> MakeCpuBackend(uint64_t capacity_bytes = 0);
// The CUDA backend on `device` (ordinal in the worker's namespace), with
// `streams` copy streams and `chunk_bytes` per copy. kUnavailable when built
// without TANDEM_WITH_CUDA or when no device/driver is present.
StatusOr<std::unique_ptr<MemoryBackend>> MakeCudaBackend(int device, int streams = 4,
                                                         size_t chunk_bytes = 64ull << 20);

struct TagSpec {
  std::string name;
  uint64_t bytes = 0;
  bool backup = false;
  bool grow = false;  // `bytes` reserved, mapped on demand (not with backup)
};
// "weights=64MiB:backup", "kv_cache=128MiB", "cuda_graph=8GiB:grow",
// "x=4096" (B, KiB, MiB, GiB, KB, MB, GB).
StatusOr<TagSpec> ParseTagSpec(std::string_view text);
StatusOr<uint64_t> ParseBytes(std::string_view text);

class TaggedMemory {
 public:
  // Reserves one range per tag and maps them (all tags start resident).
  static StatusOr<std::unique_ptr<TaggedMemory>> Create(std::unique_ptr<MemoryBackend> backend,
                                                        const std::vector<TagSpec>& tags);
  ~TaggedMemory();
  TaggedMemory(const TaggedMemory&) = delete;
  TaggedMemory& operator=(const TaggedMemory&) = delete;

  // Hands out `bytes` from the tag's pool (bump allocation, `align` a power
  // of two), mapping what a grow tag has not mapped yet. kResourceExhausted
  // when the pool is full (or the device has no memory for a grow tag's
  // chunk); kFailedPrecondition when the tag is released.
  StatusOr<void*> Allocate(const std::string& tag, size_t bytes, size_t align = 256);
  // The tag's whole range: [base, base + size).
  StatusOr<void*> Base(const std::string& tag) const;
  StatusOr<size_t> Size(const std::string& tag) const;  // as requested, not rounded
  // Bytes a resume of the tag maps, resident or not: its size as requested,
  // or what a grow tag has mapped so far (what a worker declares at hello,
  // and what a handoff ledger must find room for).
  StatusOr<uint64_t> Footprint(const std::string& tag) const;

  // See the file comment. kNotFound for an unknown tag. The detail's bytes
  // say what moved: backed-up bytes copied to host / restored from it.
  struct Moved {
    uint64_t freed_bytes = 0;     // physical bytes given back (release)
    uint64_t mapped_bytes = 0;    // physical bytes mapped (resume)
    uint64_t copied_bytes = 0;    // to host (release) or from host (resume)
    bool no_op = false;
  };
  StatusOr<Moved> Release(const std::string& tag);
  StatusOr<Moved> Resume(const std::string& tag);

  bool Resident(const std::string& tag) const;
  bool HasBackup(const std::string& tag) const;  // declared with backup
  // Bytes resident per tag (mapped size, 0 when released; a grow tag's
  // chunks mapped so far).
  std::map<std::string, uint64_t> ResidentPerTag() const;
  uint64_t ResidentBytes() const;
  control::Residency Residency() const;
  std::vector<TagSpec> Specs() const;
  std::vector<std::string> TagNames() const;

  // Device <-> host copies into a tag's range (the probe fills and checks
  // through these, so it runs alike on both backends).
  Status Write(const std::string& tag, size_t offset, const void* src, size_t bytes);
  Status Read(const std::string& tag, size_t offset, void* dst, size_t bytes) const;

  MemoryBackend& backend() { return *backend_; }

 private:
  struct Pool {
    TagSpec spec;
    Mapping mapping;              // the reserved range
    std::vector<Mapping> chunks;  // what is mapped in it when resident (the whole range unless grow)
    bool resident = false;
    size_t next = 0;           // bump allocator offset
    void* host_backup = nullptr;
    bool backup_valid = false;
  };
  explicit TaggedMemory(std::unique_ptr<MemoryBackend> backend) : backend_(std::move(backend)) {}
  StatusOr<Pool*> Find(const std::string& tag);
  StatusOr<const Pool*> Find(const std::string& tag) const;
  static uint64_t MappedBytes(const Pool& p);

  std::unique_ptr<MemoryBackend> backend_;
  std::map<std::string, Pool> pools_;
};

}  // namespace tandem::memory
