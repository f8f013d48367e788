// The CUDA driver API, opened at run time (DESIGN.md "Workers and kernels";
// docs/weights.md "The cuda-ipc transport"). Shared by the tagged-memory CUDA
// backend (cuda_memory_backend.cc) and the cuda-ipc weight transport
// (workers/weights/cuda_vmm.h). Only built with TANDEM_WITH_CUDA: host C++
// against cuda.h, no kernels, no LibTorch.
//
// Contract:
//   * CudaDriver() opens libcuda.so.1 with dlopen once (thread-safe static)
//     and resolves every function of TANDEM_CU_FUNCS through cuda.h's macros,
//     so each name is its versioned symbol (cuMemGetInfo -> cuMemGetInfo_v2).
//     No link-time dependency: a binary built with CUDA starts on a machine
//     without a driver (CI) and reports CUDA as unavailable.
//   * CudaDriver().error is "" when every symbol resolved, else what failed
//     ("dlopen libcuda.so.1: ...", "libcuda lacks cuMemCreate"); callers
//     check it (CudaDriverStatus) before calling any function.
//   * CuStatus(r, what) turns a CUresult into a Status naming `what` and the
//     driver's error name and text: OUT_OF_MEMORY is ResourceExhausted; no
//     device, not initialised and an invalid device are Unavailable; the
//     rest Internal.
#pragma once

#include <cuda.h>

#include <string>

#include "common/status.h"

namespace tandem::cuda {

#define TANDEM_CU_FUNCS(X)                                                                                          \
  X(cuInit) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetAttribute)      \
  X(cuDeviceGetUuid) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxSynchronize) \
  X(cuMemGetAllocationGranularity) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease)        \
  X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle)     \
  X(cuMemGetAllocationPropertiesFromHandle)                                                                         \
  X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyDtoHAsync) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoDAsync)                \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuMemGetInfo)

struct Driver {
#define TANDEM_CU_MEMBER(name) decltype(&::name) name = nullptr;
  TANDEM_CU_FUNCS(TANDEM_CU_MEMBER)
#undef TANDEM_CU_MEMBER
  void* lib = nullptr;
  std::string error;
};

const Driver& CudaDriver();
// Unavailable("<what>: CUDA driver: <error>") when the driver did not load.
Status CudaDriverStatus(const std::string& what);
Status CuStatus(CUresult r, const std::string& what);

#define TANDEM_CU(expr, what) TANDEM_RETURN_IF_ERROR(::tandem::cuda::CuStatus((expr), (what)))

}  // namespace tandem::cuda
