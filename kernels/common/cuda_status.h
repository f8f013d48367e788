// CUDA runtime and cuBLAS results as tandem::Status (common/status.h): the
// host side of every kernel folder reports a failed call with what it was
// doing and the library's own name for the error.
//
// Codes: out of memory (cudaErrorMemoryAllocation, CUBLAS_STATUS_ALLOC_FAILED)
// is ResourceExhausted, so a caller can tell "try smaller / later" from a
// bug; everything else is Internal. A failed runtime call also leaves its
// error as the thread's last error, which the next cudaGetLastError() (how
// kernel launches are checked) would report again: Cuda() clears it, so one
// failure is reported once. Errors that poison the context (a kernel fault,
// cudaErrorIllegalAddress) stay: every later call fails with them anyway.
// Header-only, no LibTorch (kernels must not depend on it).
#pragma once

#include <cublas_api.h>
#include <cuda_runtime.h>

#include <string>

#include "common/status.h"

namespace tandem::kernels {

// The Status for a runtime result `e` of the call described by `what`.
inline Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  std::string msg = std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  if (e == cudaErrorMemoryAllocation) return ResourceExhausted(std::move(msg));
  return Internal(std::move(msg));
}

inline Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();  // reported here, not again by the next launch check
  return CudaStatus(e, what);
}

inline Status Blas(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  std::string msg = std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(e));
  if (e == CUBLAS_STATUS_ALLOC_FAILED) return ResourceExhausted(msg + " (CUBLAS_STATUS_ALLOC_FAILED)");
  return Internal(std::move(msg));
}

}  // namespace tandem::kernels
