// The CUDA MemoryBackend (tagged_memory.h, "Backends"), on the driver's
// virtual memory management API. Built only with TANDEM_WITH_CUDA; host C++
// against cuda.h and libcuda, no kernels (so no nvcc needed for this file).
//
// Reserve: cuMemAddressReserve once per tag. Map: cuMemCreate (pinned device
// allocation on this device) + cuMemMap at the reserved address +
// cuMemSetAccess read-write. Unmap: cuMemUnmap + cuMemRelease, which returns
// the physical memory to the driver while the addresses stay reserved, so
// pointers and captured CUDA graphs stay valid across release/resume.
// Backups are pinned host memory (cuMemHostAlloc); a copy waits for the
// context's queued work (cuCtxSynchronize: the copy streams are
// non-blocking, so they would not wait for the worker's kernels), is cut into
// `chunk_bytes` pieces issued round-robin on `streams` streams, then every
// stream is synchronised before the call returns. Verified on an H200 by
// workers/runtime/tests/tagged_memory_gpu_test.cc; figures in
// docs/benchmarks.md "Offload / restore (tagged memory, H200)".
#include <algorithm>
#include <string>
#include <vector>

#include "workers/runtime/cuda_driver.h"
#include "workers/runtime/tagged_memory.h"

namespace tandem::memory {
namespace {

// The driver is opened with dlopen, not linked (cuda_driver.h): the same
// binary then starts on machines without libcuda.so.1 (CI) and reports the
// CUDA backend as unavailable.
using cuda::CuStatus;
const cuda::Driver& D() { return cuda::CudaDriver(); }

class CudaBackend final : public MemoryBackend {
 public:
  CudaBackend(int ordinal, CUdevice dev, CUcontext ctx, size_t gran, std::vector<CUstream> streams, size_t chunk)
      : ordinal_(ordinal), dev_(dev), ctx_(ctx), gran_(gran), streams_(std::move(streams)), chunk_(chunk) {}
  ~CudaBackend() override {
    D().cuCtxSetCurrent(ctx_);
    for (CUstream s : streams_) D().cuStreamDestroy(s);
    D().cuDevicePrimaryCtxRelease(dev_);
  }
  std::string name() const override { return "cuda"; }
  size_t granularity() const override { return gran_; }

  StatusOr<Mapping> Reserve(size_t bytes) override {
    TANDEM_CU(D().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    CUdeviceptr p = 0;
    TANDEM_CU(D().cuMemAddressReserve(&p, bytes, gran_, 0, 0), "cuMemAddressReserve " + std::to_string(bytes));
    Mapping m;
    m.base = reinterpret_cast<void*>(p);
    m.bytes = bytes;
    return m;
  }
  Status Unreserve(Mapping& m) override {
    if (m.handle) TANDEM_RETURN_IF_ERROR(Unmap(m));
    if (m.base) TANDEM_CU(D().cuMemAddressFree(Ptr(m.base), m.bytes), "cuMemAddressFree");
    m.base = nullptr;
    return Status::Ok();
  }
  Status Map(Mapping& m) override {
    TANDEM_CU(D().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev_;
    CUmemGenericAllocationHandle h = 0;
    TANDEM_CU(D().cuMemCreate(&h, m.bytes, &prop, 0), "cuMemCreate " + std::to_string(m.bytes));
    CUresult r = D().cuMemMap(Ptr(m.base), m.bytes, 0, h, 0);
    if (r != CUDA_SUCCESS) {
      D().cuMemRelease(h);
      return CuStatus(r, "cuMemMap");
    }
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = D().cuMemSetAccess(Ptr(m.base), m.bytes, &access, 1);
    if (r != CUDA_SUCCESS) {
      D().cuMemUnmap(Ptr(m.base), m.bytes);
      D().cuMemRelease(h);
      return CuStatus(r, "cuMemSetAccess");
    }
    m.handle = static_cast<uint64_t>(h);
    return Status::Ok();
  }
  Status Unmap(Mapping& m) override {
    TANDEM_CU(D().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    // Work queued on the memory must finish before its pages go away.
    TANDEM_CU(D().cuCtxSynchronize(), "cuCtxSynchronize before unmap");
    TANDEM_CU(D().cuMemUnmap(Ptr(m.base), m.bytes), "cuMemUnmap");
    TANDEM_CU(D().cuMemRelease(static_cast<CUmemGenericAllocationHandle>(m.handle)), "cuMemRelease");
    m.handle = 0;
    return Status::Ok();
  }
  StatusOr<void*> AllocHost(size_t bytes) override {
    TANDEM_CU(D().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    void* p = nullptr;
    TANDEM_CU(D().cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc " + std::to_string(bytes));
    return p;
  }
  void FreeHost(void* p, size_t) override {
    D().cuCtxSetCurrent(ctx_);
    D().cuMemFreeHost(p);
  }
  Status CopyToHost(void* host, const void* device, size_t bytes) override {
    TANDEM_CU(D().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    // The copy streams are non-blocking: without this, a backup (or Read)
    // could overtake kernels still queued on the worker's own streams that
    // write this memory, and save stale bytes.
    TANDEM_CU(D().cuCtxSynchronize(), "cuCtxSynchronize before copy to host");
    for (size_t off = 0, i = 0; off < bytes; off += chunk_, ++i) {
      size_t n = std::min(chunk_, bytes - off);
      TANDEM_CU(D().cuMemcpyDtoHAsync(static_cast<char*>(host) + off, Ptr(device) + off, n, streams_[i % streams_.size()]),
                "cuMemcpyDtoHAsync");
    }
    return SyncAll();
  }
  Status CopyToDevice(void* device, const void* host, size_t bytes) override {
    TANDEM_CU(D().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    // Likewise: queued kernels that still read the old bytes finish first.
    TANDEM_CU(D().cuCtxSynchronize(), "cuCtxSynchronize before copy to device");
    for (size_t off = 0, i = 0; off < bytes; off += chunk_, ++i) {
      size_t n = std::min(chunk_, bytes - off);
      TANDEM_CU(D().cuMemcpyHtoDAsync(Ptr(device) + off, static_cast<const char*>(host) + off, n, streams_[i % streams_.size()]),
                "cuMemcpyHtoDAsync");
    }
    return SyncAll();
  }
  control::DeviceMemory Usage(uint64_t) const override {
    control::DeviceMemory d;
    d.index = ordinal_;
    d.source = "cuda";
    size_t free_b = 0, total_b = 0;
    if (D().cuCtxSetCurrent(ctx_) == CUDA_SUCCESS && D().cuMemGetInfo(&free_b, &total_b) == CUDA_SUCCESS) {
      d.total = total_b;
      d.used = total_b - free_b;
    }
    return d;
  }

 private:
  static CUdeviceptr Ptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }
  Status SyncAll() {
    for (CUstream s : streams_) TANDEM_CU(D().cuStreamSynchronize(s), "cuStreamSynchronize");
    return Status::Ok();
  }

  int ordinal_;
  CUdevice dev_;
  CUcontext ctx_;
  size_t gran_;
  std::vector<CUstream> streams_;
  size_t chunk_;
};

}  // namespace

StatusOr<std::unique_ptr<MemoryBackend>> MakeCudaBackend(int device, int streams, size_t chunk_bytes) {
  TANDEM_RETURN_IF_ERROR(cuda::CudaDriverStatus("tagged memory"));
  if (CUresult r = D().cuInit(0); r != CUDA_SUCCESS) return Unavailable(CuStatus(r, "cuInit").message());
  CUdevice dev = 0;
  TANDEM_CU(D().cuDeviceGet(&dev, device), "cuDeviceGet " + std::to_string(device));
  CUcontext ctx = nullptr;
  TANDEM_CU(D().cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Status st = CuStatus(D().cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t gran = 0;
  if (st.ok())
    st = CuStatus(D().cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity");
  std::vector<CUstream> ss;
  for (int i = 0; st.ok() && i < std::max(1, streams); ++i) {
    CUstream s = nullptr;
    st = CuStatus(D().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    if (st.ok()) ss.push_back(s);
  }
  if (!st.ok()) {
    for (CUstream s : ss) D().cuStreamDestroy(s);
    D().cuDevicePrimaryCtxRelease(dev);
    return st;
  }
  return std::unique_ptr<MemoryBackend>(
      new CudaBackend(device, dev, ctx, gran, std::move(ss), std::max<size_t>(chunk_bytes, 1 << 20)));
}

}  // namespace tandem::memory
