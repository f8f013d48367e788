// CUDA VMM allocations shared between processes of one GPU through POSIX
// file descriptors: the memory of the cuda-ipc weight transport
// (docs/weights.md "The cuda-ipc transport"; ipc_transport.h). Torch-free;
// the driver is opened at run time (workers/runtime/cuda_driver.h). Built
// without TANDEM_WITH_CUDA, every call returns Unavailable ("built without
// CUDA") and CudaIpcAvailable says so, so tests skip with that reason.
//
// Contract:
//   * CudaIpcAvailable(ordinal): ok when the driver loads, the device exists
//     and supports virtual memory management and POSIX-descriptor handles;
//     else Unavailable naming what is missing.
//   * VmmExport::Create(ordinal, bytes): cuMemCreate of at least `bytes`
//     (rounded up to the allocation granularity; bytes() is the rounded
//     size) on that device with requestedHandleTypes =
//     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, mapped read-write in this
//     process (data()), and exported once with cuMemExportToShareableHandle
//     (fd()). Destroying it unmaps it, releases the handle and closes the
//     descriptor; the memory returns to the driver once every importer has
//     unmapped it too. Out of device memory is ResourceExhausted.
//   * VmmImport::Open(fd, bytes, ordinal): cuMemImportFromShareableHandle,
//     then maps exactly `bytes` (what the offer claims). The descriptor's
//     allocation must be on `ordinal` and at least `bytes` large: a smaller
//     one (cuMemMap refuses) is DataLoss "... smaller than ... (truncated)",
//     a descriptor that is not a CUDA allocation is DataLoss too. The
//     mapping is read-only where the driver allows it. Destroying it unmaps.
//   * DeviceCopier: a non-blocking stream on the device's primary context
//     (the one LibTorch uses). SynchronizeDevice waits for all work queued in
//     the context (the caller's kernels on any stream); Copy queues a
//     device-to-device copy on the copier's stream; Wait waits for it.
//   * DeviceUuid(ordinal) "GPU-<32 hex>", the physical GPU whatever
//     CUDA_VISIBLE_DEVICES says; OrdinalOfUuid the visible device with that
//     uuid (NotFound when none is).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "workers/weights/ipc_server.h"

namespace tandem::weights {

Status CudaIpcAvailable(int ordinal);
StatusOr<std::string> DeviceUuid(int ordinal);
StatusOr<int> OrdinalOfUuid(const std::string& uuid);

class VmmExport final : public ipc::IpcExport {
 public:
  static StatusOr<std::unique_ptr<VmmExport>> Create(int ordinal, uint64_t bytes);
  ~VmmExport() override;
  VmmExport(const VmmExport&) = delete;
  VmmExport& operator=(const VmmExport&) = delete;
  int fd() const override { return fd_; }
  uint64_t bytes() const override { return bytes_; }
  void* data() const { return reinterpret_cast<void*>(ptr_); }
  int ordinal() const { return ordinal_; }

 private:
  VmmExport() = default;
  int ordinal_ = 0;
  uint64_t bytes_ = 0;
  uint64_t handle_ = 0;
  uintptr_t ptr_ = 0;
  int fd_ = -1;
  bool mapped_ = false;
};

class VmmImport {
 public:
  static StatusOr<std::unique_ptr<VmmImport>> Open(int fd, uint64_t bytes, int ordinal);
  ~VmmImport();
  VmmImport(const VmmImport&) = delete;
  VmmImport& operator=(const VmmImport&) = delete;
  const void* data() const { return reinterpret_cast<const void*>(ptr_); }
  uint64_t bytes() const { return bytes_; }

 private:
  VmmImport() = default;
  int ordinal_ = 0;
  uint64_t bytes_ = 0;
  uintptr_t ptr_ = 0;
  bool mapped_ = false;
};

class DeviceCopier {
 public:
  static StatusOr<std::unique_ptr<DeviceCopier>> Create(int ordinal);
  ~DeviceCopier();
  DeviceCopier(const DeviceCopier&) = delete;
  DeviceCopier& operator=(const DeviceCopier&) = delete;
  Status SynchronizeDevice();
  Status Copy(void* dst, const void* src, uint64_t bytes);
  Status Wait();

 private:
  DeviceCopier() = default;
  int ordinal_ = 0;
  void* ctx_ = nullptr;     // CUcontext
  void* stream_ = nullptr;  // CUstream
};

}  // namespace tandem::weights
