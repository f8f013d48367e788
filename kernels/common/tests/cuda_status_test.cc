// kernels/common/cuda_status.h without a GPU: how runtime and cuBLAS results
// map onto Status codes (out of memory is ResourceExhausted), and, where a
// device is usable (the GPU machine), that Cuda() clears the last error it
// reports (a failed cudaSetDevice sets one).
#include "kernels/common/cuda_status.h"

#include <gtest/gtest.h>

namespace tandem::kernels {
namespace {

TEST(CudaStatus, MapsOutOfMemoryToResourceExhausted) {
  EXPECT_TRUE(Cuda(cudaSuccess, "x").ok());
  Status oom = Cuda(cudaErrorMemoryAllocation, "cudaMalloc plan");
  EXPECT_EQ(oom.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(oom.message().find("cudaMalloc plan: cudaErrorMemoryAllocation"), std::string::npos) << oom.ToString();
  EXPECT_EQ(Cuda(cudaErrorInvalidValue, "launch").code(), StatusCode::kInternal);
  EXPECT_EQ(Cuda(cudaErrorIllegalAddress, "sync").code(), StatusCode::kInternal);
  EXPECT_TRUE(Blas(CUBLAS_STATUS_SUCCESS, "gemm").ok());
  EXPECT_EQ(Blas(CUBLAS_STATUS_ALLOC_FAILED, "gemm").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Blas(CUBLAS_STATUS_EXECUTION_FAILED, "gemm").code(), StatusCode::kInternal);
}

TEST(CudaStatus, ClearsTheLastErrorItReports) {
  // Without a driver or device the runtime's initialization error is
  // sticky (no call clears it): nothing to show there.
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    GTEST_SKIP() << "no usable CUDA device: " << cudaGetErrorName(cudaGetLastError());
  (void)cudaGetLastError();
  const cudaError_t e = cudaSetDevice(1 << 20);  // no such device, on any machine
  ASSERT_NE(e, cudaSuccess);
  EXPECT_FALSE(Cuda(e, "cudaSetDevice").ok());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the reported error would be reported again by the next launch check";
  // CudaStatus alone maps without touching the last error.
  const cudaError_t again = cudaSetDevice(1 << 20);
  EXPECT_FALSE(CudaStatus(again, "cudaSetDevice").ok());
  EXPECT_EQ(cudaGetLastError(), again);
}

}  // namespace
}  // namespace tandem::kernels
