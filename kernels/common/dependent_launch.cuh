// Programmatic dependent launch (Hopper and later; CUDA's "PDL"): a kernel
// launched with LaunchDependent may start while the kernel before it on the
// stream is still running, once every block of that kernel has called
// LetDependentsLaunch (or exited). It must call WaitForPriorKernels before
// it reads anything the kernels before it wrote, and before it writes
// anything they may still read; what it does before that (loading weights
// nobody writes, computing addresses) overlaps their tail and its own
// launch. In a CUDA graph captured from the stream the edge is kept.
//
// Contracts:
// - A kernel launched with LaunchDependent calls WaitForPriorKernels on
//   every path, before its first dependent read or its first write.
// - Whatever it reads before that must not be written by any kernel still
//   running: a chain of dependent launches may reach back past the kernel
//   just before it, to any kernel that let its dependents launch early.
// - LetDependentsLaunch is a hint any kernel may give at any point; a kernel
//   launched without the attribute waits for the whole kernel before it, as
//   always, and its WaitForPriorKernels returns at once.
// Before compute capability 9.0 both device calls are no-ops and the launch
// is an ordinary one.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace tandem::kernels::detail {

__device__ __forceinline__ void WaitForPriorKernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void LetDependentsLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether the current device runs dependent launches (compute capability
// 9.0 or later); asked once a process.
inline bool DependentLaunchSupported() {
  static const bool supported = [] {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    return major >= 9;
  }();
  return supported;
}

// kernel<<<grid, block, smem, stream>>>(args...), allowed to start before
// the kernel before it on the stream ends (see above); with `cluster`
// other than 1x1x1, its blocks run in thread-block clusters of that shape
// (compute capability 9.0; grid a multiple of it).
template <typename... Params, typename... Args>
cudaError_t LaunchDependentInClusters(void (*kernel)(Params...), dim3 grid, dim3 block, dim3 cluster, size_t smem,
                                      cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (DependentLaunchSupported()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster.x * cluster.y * cluster.z > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster.x;
    attr[n].val.clusterDim.y = cluster.y;
    attr[n++].val.clusterDim.z = cluster.z;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = n;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
cudaError_t LaunchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                            Args&&... args) {
  return LaunchDependentInClusters(kernel, grid, block, dim3(1, 1, 1), smem, stream, std::forward<Args>(args)...);
}

}  // namespace tandem::kernels::detail
