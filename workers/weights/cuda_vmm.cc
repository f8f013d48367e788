// CUDA VMM allocations over POSIX descriptors (cuda_vmm.h).
#include "workers/weights/cuda_vmm.h"

#include <unistd.h>

#if TANDEM_WITH_CUDA
#include <cstdio>
#include <mutex>
#include <vector>

#include "workers/runtime/cuda_driver.h"
#endif

namespace tandem::weights {

#if TANDEM_WITH_CUDA
namespace {

using cuda::CuStatus;
const cuda::Driver& D() { return cuda::CudaDriver(); }

struct Device {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
};

// The device's primary context (LibTorch's), retained once for the
// process's life, made current on this thread.
StatusOr<Device> Current(int ordinal, const std::string& what) {
  TANDEM_RETURN_IF_ERROR(cuda::CudaDriverStatus(what));
  static std::mutex mu;
  static std::vector<Device> devices;
  std::lock_guard<std::mutex> lock(mu);
  if (devices.empty()) {
    TANDEM_CU(D().cuInit(0), what + ": cuInit");
    int n = 0;
    TANDEM_CU(D().cuDeviceGetCount(&n), what + ": cuDeviceGetCount");
    devices.resize(static_cast<size_t>(n));
  }
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= devices.size())
    return Unavailable(what + ": no CUDA device " + std::to_string(ordinal) + " (" + std::to_string(devices.size()) +
                       " visible)");
  Device& d = devices[static_cast<size_t>(ordinal)];
  if (!d.ctx) {
    TANDEM_CU(D().cuDeviceGet(&d.dev, ordinal), what + ": cuDeviceGet");
    TANDEM_CU(D().cuDevicePrimaryCtxRetain(&d.ctx, d.dev), what + ": cuDevicePrimaryCtxRetain");
  }
  TANDEM_CU(D().cuCtxSetCurrent(d.ctx), what + ": cuCtxSetCurrent");
  return d;
}

CUmemAllocationProp Prop(CUdevice dev) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

StatusOr<size_t> Granularity(CUdevice dev, const std::string& what) {
  CUmemAllocationProp prop = Prop(dev);
  size_t gran = 0;
  TANDEM_CU(D().cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), what + ": granularity");
  return gran == 0 ? size_t{2} << 20 : gran;
}

}  // namespace

Status CudaIpcAvailable(int ordinal) {
  const std::string what = "cuda-ipc on device " + std::to_string(ordinal);
  TANDEM_ASSIGN_OR_RETURN(Device d, Current(ordinal, what));
  int vmm = 0, fd = 0;
  TANDEM_CU(D().cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d.dev), what);
  TANDEM_CU(D().cuDeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, d.dev), what);
  if (!vmm) return Unavailable(what + ": the device does not support virtual memory management");
  if (!fd) return Unavailable(what + ": the device cannot export memory as POSIX file descriptors");
  return Status::Ok();
}

StatusOr<std::string> DeviceUuid(int ordinal) {
  // No context: asking every visible device must not create one on each.
  const std::string what = "uuid of device " + std::to_string(ordinal);
  TANDEM_RETURN_IF_ERROR(cuda::CudaDriverStatus(what));
  TANDEM_CU(D().cuInit(0), what + ": cuInit");
  CUdevice dev = 0;
  TANDEM_CU(D().cuDeviceGet(&dev, ordinal), what + ": cuDeviceGet");
  CUuuid u{};
  TANDEM_CU(D().cuDeviceGetUuid(&u, dev), what);
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(u.bytes[i]));
    out += b;
  }
  return out;
}

StatusOr<int> OrdinalOfUuid(const std::string& uuid) {
  TANDEM_RETURN_IF_ERROR(cuda::CudaDriverStatus("find GPU " + uuid));
  TANDEM_CU(D().cuInit(0), "cuInit");
  int n = 0;
  TANDEM_CU(D().cuDeviceGetCount(&n), "cuDeviceGetCount");
  for (int i = 0; i < n; ++i) {
    StatusOr<std::string> u = DeviceUuid(i);
    if (u.ok() && *u == uuid) return i;
  }
  return FailedPrecondition("the export is on GPU " + uuid + ", which is not one of this process's " + std::to_string(n) +
                            " visible devices (cuda-ipc is for readers on the publisher's GPU)");
}

StatusOr<std::unique_ptr<VmmExport>> VmmExport::Create(int ordinal, uint64_t bytes) {
  const std::string what = "publish_weights: export of " + std::to_string(bytes) + " bytes on device " + std::to_string(ordinal);
  TANDEM_RETURN_IF_ERROR(CudaIpcAvailable(ordinal), "publish_weights");
  TANDEM_ASSIGN_OR_RETURN(Device d, Current(ordinal, what));
  TANDEM_ASSIGN_OR_RETURN(size_t gran, Granularity(d.dev, what));
  std::unique_ptr<VmmExport> e(new VmmExport());
  e->ordinal_ = ordinal;
  e->bytes_ = (std::max<uint64_t>(bytes, 1) + gran - 1) / gran * gran;
  CUmemAllocationProp prop = Prop(d.dev);
  CUmemGenericAllocationHandle h = 0;
  TANDEM_CU(D().cuMemCreate(&h, e->bytes_, &prop, 0), what + ": cuMemCreate");
  e->handle_ = h;
  CUdeviceptr p = 0;
  TANDEM_CU(D().cuMemAddressReserve(&p, e->bytes_, gran, 0, 0), what + ": cuMemAddressReserve");
  e->ptr_ = static_cast<uintptr_t>(p);
  TANDEM_CU(D().cuMemMap(p, e->bytes_, 0, h, 0), what + ": cuMemMap");
  e->mapped_ = true;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  TANDEM_CU(D().cuMemSetAccess(p, e->bytes_, &access, 1), what + ": cuMemSetAccess");
  int fd = -1;
  TANDEM_CU(D().cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            what + ": cuMemExportToShareableHandle");
  e->fd_ = fd;
  return e;
}

VmmExport::~VmmExport() {
  if (!Current(ordinal_, "free export").ok()) return;
  if (mapped_) D().cuMemUnmap(static_cast<CUdeviceptr>(ptr_), bytes_);
  if (ptr_) D().cuMemAddressFree(static_cast<CUdeviceptr>(ptr_), bytes_);
  if (handle_) D().cuMemRelease(static_cast<CUmemGenericAllocationHandle>(handle_));
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<std::unique_ptr<VmmImport>> VmmImport::Open(int fd, uint64_t bytes, int ordinal) {
  const std::string what = "import of the " + std::to_string(bytes) + "-byte export on device " + std::to_string(ordinal);
  TANDEM_ASSIGN_OR_RETURN(Device d, Current(ordinal, what));
  TANDEM_ASSIGN_OR_RETURN(size_t gran, Granularity(d.dev, what));
  if (bytes == 0 || bytes % gran != 0)
    return DataLoss(what + ": " + std::to_string(bytes) + " bytes is not a multiple of the allocation granularity " +
                    std::to_string(gran));
  CUmemGenericAllocationHandle h = 0;
  CUresult r = D().cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS)
    return DataLoss(CuStatus(r, what + ": cuMemImportFromShareableHandle (the descriptor is not a CUDA allocation?)").message());
  std::unique_ptr<VmmImport> m(new VmmImport());
  m->ordinal_ = ordinal;
  m->bytes_ = bytes;
  // The handle is released at the end of this function: a mapping keeps the memory.
  struct Release {
    CUmemGenericAllocationHandle h;
    ~Release() { D().cuMemRelease(h); }
  } release{h};
  CUmemAllocationProp prop{};
  TANDEM_CU(D().cuMemGetAllocationPropertiesFromHandle(&prop, h), what + ": allocation properties");
  if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != d.dev)
    return DataLoss(what + ": the allocation lives on location " + std::to_string(prop.location.id) + " (type " +
                    std::to_string(static_cast<int>(prop.location.type)) + "), not on this device");
  CUdeviceptr p = 0;
  TANDEM_CU(D().cuMemAddressReserve(&p, bytes, gran, 0, 0), what + ": cuMemAddressReserve");
  m->ptr_ = static_cast<uintptr_t>(p);
  r = D().cuMemMap(p, bytes, 0, h, 0);
  if (r != CUDA_SUCCESS)
    return DataLoss(CuStatus(r, what + ": cuMemMap").message() +
                    ": the allocation is smaller than the offer's allocation_bytes " + std::to_string(bytes) +
                    " (truncated)");
  m->mapped_ = true;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  if (D().cuMemSetAccess(p, bytes, &access, 1) != CUDA_SUCCESS) {
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;  // read-only device mappings are not supported everywhere
    TANDEM_CU(D().cuMemSetAccess(p, bytes, &access, 1), what + ": cuMemSetAccess");
  }
  return m;
}

VmmImport::~VmmImport() {
  if (!Current(ordinal_, "unmap import").ok()) return;
  if (mapped_) D().cuMemUnmap(static_cast<CUdeviceptr>(ptr_), bytes_);
  if (ptr_) D().cuMemAddressFree(static_cast<CUdeviceptr>(ptr_), bytes_);
}

StatusOr<std::unique_ptr<DeviceCopier>> DeviceCopier::Create(int ordinal) {
  const std::string what = "copy stream on device " + std::to_string(ordinal);
  TANDEM_ASSIGN_OR_RETURN(Device d, Current(ordinal, what));
  std::unique_ptr<DeviceCopier> c(new DeviceCopier());
  c->ordinal_ = ordinal;
  c->ctx_ = d.ctx;
  CUstream s = nullptr;
  TANDEM_CU(D().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), what + ": cuStreamCreate");
  c->stream_ = s;
  return c;
}

DeviceCopier::~DeviceCopier() {
  if (!stream_) return;
  D().cuCtxSetCurrent(static_cast<CUcontext>(ctx_));
  D().cuStreamDestroy(static_cast<CUstream>(stream_));
}

Status DeviceCopier::SynchronizeDevice() {
  TANDEM_CU(D().cuCtxSetCurrent(static_cast<CUcontext>(ctx_)), "cuCtxSetCurrent");
  TANDEM_CU(D().cuCtxSynchronize(), "cuCtxSynchronize on device " + std::to_string(ordinal_));
  return Status::Ok();
}

Status DeviceCopier::Copy(void* dst, const void* src, uint64_t bytes) {
  if (bytes == 0) return Status::Ok();
  TANDEM_CU(D().cuCtxSetCurrent(static_cast<CUcontext>(ctx_)), "cuCtxSetCurrent");
  TANDEM_CU(D().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes,
                                  static_cast<CUstream>(stream_)),
            "cuMemcpyDtoDAsync of " + std::to_string(bytes) + " bytes");
  return Status::Ok();
}

Status DeviceCopier::Wait() {
  TANDEM_CU(D().cuCtxSetCurrent(static_cast<CUcontext>(ctx_)), "cuCtxSetCurrent");
  TANDEM_CU(D().cuStreamSynchronize(static_cast<CUstream>(stream_)), "cuStreamSynchronize");
  return Status::Ok();
}

#else  // !TANDEM_WITH_CUDA

namespace {
Status NoCuda(const std::string& what) { return Unavailable(what + ": this build has no CUDA (TANDEM_WITH_CUDA off)"); }
}  // namespace

Status CudaIpcAvailable(int) { return NoCuda("cuda-ipc"); }
StatusOr<std::string> DeviceUuid(int) { return NoCuda("device uuid"); }
StatusOr<int> OrdinalOfUuid(const std::string&) { return NoCuda("device uuid"); }
StatusOr<std::unique_ptr<VmmExport>> VmmExport::Create(int, uint64_t) { return NoCuda("publish_weights"); }
// Never constructed without CUDA; the fields are named so the build stays warning-free.
VmmExport::~VmmExport() { (void)handle_, (void)mapped_; }
StatusOr<std::unique_ptr<VmmImport>> VmmImport::Open(int, uint64_t, int) { return NoCuda("load_weights"); }
VmmImport::~VmmImport() { (void)ordinal_, (void)mapped_; }
StatusOr<std::unique_ptr<DeviceCopier>> DeviceCopier::Create(int) { return NoCuda("copy"); }
DeviceCopier::~DeviceCopier() { (void)ordinal_, (void)ctx_, (void)stream_; }
Status DeviceCopier::SynchronizeDevice() { return NoCuda("synchronize"); }
Status DeviceCopier::Copy(void*, const void*, uint64_t) { return NoCuda("copy"); }
Status DeviceCopier::Wait() { return NoCuda("copy"); }

#endif

}  // namespace tandem::weights
