// The CPU MemoryBackend (tagged_memory.h, "Backends"): host pages stand in for
// device memory so that every test of release/resume runs in CI.
//
// Reserve: mmap(PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE).
// Map: mmap(MAP_FIXED, PROT_READ|PROT_WRITE) of fresh anonymous pages over the
// reserved range (zero-filled, same addresses). Unmap: madvise(MADV_DONTNEED)
// drops the pages, then mmap(MAP_FIXED, PROT_NONE) keeps the range reserved
// and makes stray accesses fault. Usage is the pools' own accounting.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "workers/runtime/tagged_memory.h"

namespace tandem::memory {
namespace {

uint64_t MemTotalBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemTotal:") return kib * 1024;
  return 0;
}

class CpuBackend final : public MemoryBackend {
 public:
  explicit CpuBackend(uint64_t capacity) : capacity_(capacity ? capacity : MemTotalBytes()) {}
  std::string name() const override { return "cpu"; }
  size_t granularity() const override { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

  StatusOr<Mapping> Reserve(size_t bytes) override {
    void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return ResourceExhausted(ErrnoStatus("mmap reserve " + std::to_string(bytes) + " bytes").message());
    Mapping m;
    m.base = p;
    m.bytes = bytes;
    return m;
  }
  Status Unreserve(Mapping& m) override {
    if (m.base && munmap(m.base, m.bytes) != 0) return ErrnoStatus("munmap");
    m.base = nullptr;
    return Status::Ok();
  }
  Status Map(Mapping& m) override {
    void* p = mmap(m.base, m.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) return ResourceExhausted(ErrnoStatus("mmap map " + std::to_string(m.bytes) + " bytes").message());
    if (p != m.base) return Internal("mmap MAP_FIXED returned another address");
    return Status::Ok();
  }
  Status Unmap(Mapping& m) override {
    if (madvise(m.base, m.bytes, MADV_DONTNEED) != 0) return ErrnoStatus("madvise DONTNEED");
    void* p = mmap(m.base, m.bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return ErrnoStatus("mmap unmap");
    return Status::Ok();
  }
  StatusOr<void*> AllocHost(size_t bytes) override {
    // Host backups are ordinary anonymous memory here (nothing to pin for).
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return ResourceExhausted(ErrnoStatus("host backup " + std::to_string(bytes) + " bytes").message());
    return p;
  }
  void FreeHost(void* p, size_t bytes) override { munmap(p, bytes); }
  Status CopyToHost(void* host, const void* device, size_t bytes) override {
    std::memcpy(host, device, bytes);
    return Status::Ok();
  }
  Status CopyToDevice(void* device, const void* host, size_t bytes) override {
    std::memcpy(device, host, bytes);
    return Status::Ok();
  }
  control::DeviceMemory Usage(uint64_t pools_mapped_bytes) const override {
    control::DeviceMemory d;
    d.index = 0;
    d.used = pools_mapped_bytes;
    d.total = capacity_;
    d.source = "pool";
    return d;
  }

 private:
  uint64_t capacity_;
};

}  // namespace

std::unique_ptr<MemoryBackend> MakeCpuBackend(uint64_t capacity_bytes) {
  return std::make_unique<CpuBackend>(capacity_bytes);
}

#ifndef TANDEM_WITH_CUDA
StatusOr<std::unique_ptr<MemoryBackend>> MakeCudaBackend(int, int, size_t) {
  return Unavailable("tagged memory: built without CUDA (TANDEM_WITH_CUDA off)");
}
#endif

}  // namespace tandem::memory
