// The CUDA backend of group.h: one NCCL communicator per group,
// built only in CUDA builds that found NCCL (TANDEM_WITH_NCCL). Rank 0
// makes the unique id and publishes it in the rendezvous TCPStore (rank 0's
// leased port); the others read it there. NCCL's own bootstrap and rings
// then use ephemeral ports, as NCCL always does.
//
// No LibTorch CUDA API is used (so this compiles against a CPU LibTorch
// too): before a collective the device is synchronised (the gradients are
// written on whatever stream LibTorch used), the collective runs on the
// group's own stream, and this thread polls that stream and the
// communicator's async error until it completes or `timeout` passes; then
// the communicator is aborted (ncclCommAbort: a kernel waiting for a dead
// peer never ends by itself) and the call returns DeadlineExceeded. The
// communicator is non-blocking (config.blocking = 0), so its set-up is
// bounded by the timeout as well. One device synchronisation per step.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "workers/collective/group_backend.h"

namespace tandem::collective::internal {
namespace {

using Clock = std::chrono::steady_clock;

std::string CudaError(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }
std::string NcclError(ncclResult_t r) { return std::string(ncclGetErrorString(r)); }

StatusOr<ncclDataType_t> NcclType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    default: return InvalidArgument(std::string("nccl all-reduce: no NCCL type for ") + c10::toString(t));
  }
}

class NcclGroup final : public Group {
 public:
  NcclGroup(const GroupOptions& o, c10::intrusive_ptr<c10d::Store> store, int device, ncclComm_t comm,
            cudaStream_t stream)
      : Group(o.rank, o.world_size, std::move(store)), timeout_(o.timeout), device_(device), comm_(comm), stream_(stream) {}

  ~NcclGroup() override {
    cudaSetDevice(device_);
    if (comm_ != nullptr) {
      if (broken_.Check().ok()) ncclCommDestroy(comm_);
      else ncclCommAbort(comm_);
    }
    if (scalars_ != nullptr) cudaFree(scalars_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::string backend() const override { return "nccl"; }

  Status AllReduceSum(std::vector<at::Tensor>& tensors) override {
    TANDEM_RETURN_IF_ERROR(broken_.Check());
    TANDEM_ASSIGN_OR_RETURN(std::vector<Bucket> buckets,
                            MakeBuckets(tensors, c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_))),
                            "nccl all-reduce");
    for (Bucket& b : buckets) {
      TANDEM_ASSIGN_OR_RETURN(const ncclDataType_t type, NcclType(b.flat.scalar_type()));
      void* data = b.flat.data_ptr();
      const auto count = static_cast<size_t>(b.flat.numel());
      TANDEM_RETURN_IF_ERROR(Run("nccl all-reduce of " + std::to_string(count) + " elements", [&] {
        return ncclAllReduce(data, data, count, type, ncclSum, comm_, stream_);
      }));
      Unbucket(b, tensors);
    }
    return Status::Ok();
  }

  Status BroadcastTensors(std::vector<at::Tensor>& tensors) override {
    TANDEM_RETURN_IF_ERROR(broken_.Check());
    TANDEM_ASSIGN_OR_RETURN(std::vector<at::Tensor> bytes,
                            AsBytes(tensors, c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_))),
                            "nccl broadcast");
    for (at::Tensor& b : bytes) {
      void* data = b.data_ptr();
      const auto count = static_cast<size_t>(b.numel());
      TANDEM_RETURN_IF_ERROR(Run("nccl broadcast of " + std::to_string(count) + " bytes", [&] {
        return ncclBroadcast(data, data, count, ncclUint8, /*root=*/0, comm_, stream_);
      }));
    }
    return Status::Ok();
  }

  Status AllReduce(std::vector<double>& values, HostReduce op) override {
    TANDEM_RETURN_IF_ERROR(broken_.Check());
    if (values.empty()) return Status::Ok();
    const std::string what = std::string("nccl all-reduce (") + (op == HostReduce::kSum ? "sum" : "max") + ") of " +
                             std::to_string(values.size()) + " host values";
    const size_t bytes = values.size() * sizeof(double);
    cudaSetDevice(device_);
    if (bytes > scalar_bytes_) {
      if (scalars_ != nullptr) cudaFree(scalars_);
      scalars_ = nullptr;
      scalar_bytes_ = 0;
      if (const cudaError_t e = cudaMalloc(&scalars_, bytes); e != cudaSuccess)
        return broken_.Fail(Internal(what + ": cudaMalloc: " + CudaError(e)));
      scalar_bytes_ = bytes;
    }
    if (const cudaError_t e = cudaMemcpy(scalars_, values.data(), bytes, cudaMemcpyHostToDevice); e != cudaSuccess)
      return broken_.Fail(Internal(what + ": cudaMemcpy: " + CudaError(e)));
    TANDEM_RETURN_IF_ERROR(Run(what, [&] {
      return ncclAllReduce(scalars_, scalars_, values.size(), ncclFloat64, op == HostReduce::kSum ? ncclSum : ncclMax,
                           comm_, stream_);
    }));
    if (const cudaError_t e = cudaMemcpy(values.data(), scalars_, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess)
      return broken_.Fail(Internal(what + ": cudaMemcpy: " + CudaError(e)));
    return Status::Ok();
  }

  Status Barrier() override {
    std::vector<double> one{0.0};
    return AllReduce(one, HostReduce::kSum).WithContext("nccl barrier");
  }

 private:
  // Enqueues one collective on stream_ (`enqueue` calls NCCL) and waits for
  // it (see the file comment).
  template <typename Enqueue>
  Status Run(const std::string& what, Enqueue enqueue) {
    cudaSetDevice(device_);
    if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
      return broken_.Fail(Internal(what + ": cudaDeviceSynchronize: " + CudaError(e)));
    const Clock::time_point deadline = Clock::now() + timeout_;
    ncclResult_t r = enqueue();
    if (r != ncclSuccess && r != ncclInProgress) return broken_.Fail(Abort(what + ": " + NcclError(r), false));
    for (;;) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        return broken_.Fail(Abort(what + ": " + NcclError(async), false));
      if (async == ncclSuccess) {
        const cudaError_t q = cudaStreamQuery(stream_);
        if (q == cudaSuccess) return Status::Ok();
        if (q != cudaErrorNotReady) return broken_.Fail(Abort(what + ": " + CudaError(q), false));
      }
      if (Clock::now() > deadline)
        return broken_.Fail(Abort(what + ": not complete after " + std::to_string(timeout_.count()) +
                                      " ms (a peer died or stopped answering)",
                                  true));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  Status Abort(const std::string& message, bool timed_out) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    return timed_out ? DeadlineExceeded(message) : Unavailable(message);
  }

  std::chrono::milliseconds timeout_;
  int device_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  void* scalars_ = nullptr;
  size_t scalar_bytes_ = 0;
  BrokenGuard broken_;
};

}  // namespace

StatusOr<std::unique_ptr<Group>> ConnectNccl(const GroupOptions& o) {
  const int device = o.device.has_index() ? o.device.index() : 0;
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return FailedPrecondition("nccl: cudaSetDevice(" + std::to_string(device) + "): " + CudaError(e));
  TANDEM_ASSIGN_OR_RETURN(c10::intrusive_ptr<c10d::Store> store, ConnectStore(o), "nccl");
  ncclUniqueId id;
  const std::string key = "tandem/nccl/unique_id";
  try {
    if (o.rank == 0) {
      if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
        return Unavailable("nccl: ncclGetUniqueId: " + NcclError(r));
      const auto* p = reinterpret_cast<const uint8_t*>(&id);
      store->set(key, std::vector<uint8_t>(p, p + sizeof(id)));
    } else {
      const std::vector<uint8_t> bytes = store->get(key);  // waits up to the store's timeout
      if (bytes.size() != sizeof(id))
        return Unavailable("nccl: the unique id in the store has " + std::to_string(bytes.size()) + " bytes, not " +
                           std::to_string(sizeof(id)));
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
  } catch (const std::exception& e) {
    return FromException("nccl: exchanging the unique id", e);
  }
  cudaStream_t stream = nullptr;
  if (const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess)
    return Internal("nccl: cudaStreamCreate: " + CudaError(e));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, o.world_size, id, o.rank, &config);
  const Clock::time_point deadline = Clock::now() + o.connect_timeout;
  while (r == ncclInProgress) {
    if (Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ncclCommGetAsyncError(comm, &r);
  }
  if (r != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    cudaStreamDestroy(stream);
    if (r == ncclInProgress)
      return DeadlineExceeded("nccl: ncclCommInitRank not complete after " + std::to_string(o.connect_timeout.count()) +
                              " ms");
    return Unavailable("nccl: ncclCommInitRank: " + NcclError(r));
  }
  return std::unique_ptr<Group>(new NcclGroup(o, std::move(store), device, comm, stream));
}

}  // namespace tandem::collective::internal
