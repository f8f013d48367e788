// CUDA runtime and cuBLAS results as tandem::Status (common/status.h): the
// host side of every kernel folder reports a failed call with what it was
// doing and the library's own name for the error.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime.h>

#include <string>

#include "common/status.h"

namespace tandem::kernels {

inline Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline Status Blas(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(e)));
}

}  // namespace tandem::kernels
