// The CUDA driver opened with dlopen (cuda_driver.h).
#include "workers/runtime/cuda_driver.h"

#include <dlfcn.h>

namespace tandem::cuda {

#define TANDEM_CU_STR2(x) #x
#define TANDEM_CU_STR(x) TANDEM_CU_STR2(x)

const Driver& CudaDriver() {
  static const Driver d = [] {
    Driver out;
    out.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!out.lib) {
      const char* e = dlerror();
      out.error = std::string("dlopen libcuda.so.1: ") + (e ? e : "?");
      return out;
    }
#define TANDEM_CU_LOAD(name)                                                           \
  out.name = reinterpret_cast<decltype(out.name)>(dlsym(out.lib, TANDEM_CU_STR(name))); \
  if (!out.name && out.error.empty()) out.error = std::string("libcuda lacks ") + TANDEM_CU_STR(name);
    TANDEM_CU_FUNCS(TANDEM_CU_LOAD)
#undef TANDEM_CU_LOAD
    return out;
  }();
  return d;
}

Status CudaDriverStatus(const std::string& what) {
  if (CudaDriver().error.empty()) return Status::Ok();
  return Unavailable(what + ": CUDA driver: " + CudaDriver().error);
}

Status CuStatus(CUresult r, const std::string& what) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  const char* name = nullptr;
  const char* text = nullptr;
  if (CudaDriver().cuGetErrorName) CudaDriver().cuGetErrorName(r, &name);
  if (CudaDriver().cuGetErrorString) CudaDriver().cuGetErrorString(r, &text);
  std::string msg = what + ": " + (name ? name : "CUDA error " + std::to_string(static_cast<int>(r))) + " (" +
                    (text ? text : "?") + ")";
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return ResourceExhausted(msg);
  if (r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_NOT_INITIALIZED || r == CUDA_ERROR_INVALID_DEVICE) return Unavailable(msg);
  return Internal(msg);
}

}  // namespace tandem::cuda
