// The CPU backend of group.h: c10d's ProcessGroupGloo over the
// rendezvous TCPStore (LibTorch's own gloo; the headers from libgloo-dev).
// Gloo's pairs listen on ephemeral ports of the address that reaches rank 0
// (loopback for a loopback host, else the address this host's name
// resolves to); only the store's port is rank 0's leased port. Collectives
// run on the group's one worker thread and this thread waits for them;
// gloo applies the options' timeout to every send and receive, and a peer
// that closes its sockets (a dead process) fails the collective at once.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <string>
#include <utility>

#include "workers/collective/group_backend.h"

namespace tandem::collective::internal {
namespace {

bool IsLoopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

class GlooGroup final : public Group {
 public:
  GlooGroup(const GroupOptions& o, c10::intrusive_ptr<c10d::Store> store,
            c10::intrusive_ptr<c10d::ProcessGroupGloo> pg)
      : Group(o.rank, o.world_size, std::move(store)), pg_(std::move(pg)) {}
  ~GlooGroup() override = default;

  std::string backend() const override { return "gloo"; }

  Status AllReduceSum(std::vector<at::Tensor>& tensors) override {
    TANDEM_RETURN_IF_ERROR(broken_.Check());
    TANDEM_ASSIGN_OR_RETURN(std::vector<Bucket> buckets, MakeBuckets(tensors, c10::kCPU), "gloo all-reduce");
    for (Bucket& b : buckets) {
      TANDEM_RETURN_IF_ERROR(Run("gloo all-reduce of " + std::to_string(b.flat.numel()) + " elements",
                                 b.flat, c10d::ReduceOp::SUM));
      Unbucket(b, tensors);
    }
    return Status::Ok();
  }

  Status BroadcastTensors(std::vector<at::Tensor>& tensors) override {
    TANDEM_RETURN_IF_ERROR(broken_.Check());
    TANDEM_ASSIGN_OR_RETURN(std::vector<at::Tensor> bytes, AsBytes(tensors, c10::kCPU), "gloo broadcast");
    for (at::Tensor& b : bytes) {
      try {
        std::vector<at::Tensor> one{b};
        c10d::BroadcastOptions bo;
        bo.rootRank = 0;
        pg_->broadcast(one, bo)->wait();
      } catch (const std::exception& e) {
        return broken_.Fail(FromException("gloo broadcast of " + std::to_string(b.numel()) + " bytes", e));
      }
    }
    return Status::Ok();
  }

  Status AllReduce(std::vector<double>& values, HostReduce op) override {
    TANDEM_RETURN_IF_ERROR(broken_.Check());
    if (values.empty()) return Status::Ok();
    at::Tensor t = at::tensor(values, at::kDouble);
    TANDEM_RETURN_IF_ERROR(Run(std::string("gloo all-reduce (") + (op == HostReduce::kSum ? "sum" : "max") + ") of " +
                                   std::to_string(values.size()) + " host values",
                               t, op == HostReduce::kSum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX));
    const double* p = t.data_ptr<double>();
    values.assign(p, p + values.size());
    return Status::Ok();
  }

  Status Barrier() override {
    TANDEM_RETURN_IF_ERROR(broken_.Check());
    try {
      pg_->barrier()->wait();
    } catch (const std::exception& e) {
      return broken_.Fail(FromException("gloo barrier", e));
    }
    return Status::Ok();
  }

 private:
  Status Run(const std::string& what, at::Tensor& flat, c10d::ReduceOp op) {
    try {
      std::vector<at::Tensor> one{flat};
      c10d::AllreduceOptions ao;
      ao.reduceOp = op;
      pg_->allreduce(one, ao)->wait();
    } catch (const std::exception& e) {
      return broken_.Fail(FromException(what, e));
    }
    return Status::Ok();
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  BrokenGuard broken_;
};

}  // namespace

StatusOr<std::unique_ptr<Group>> ConnectGloo(const GroupOptions& o) {
  TANDEM_ASSIGN_OR_RETURN(c10::intrusive_ptr<c10d::Store> store, ConnectStore(o), "gloo");
  try {
    auto options = c10d::ProcessGroupGloo::Options::create(o.timeout);
    options->devices.push_back(IsLoopback(o.host) ? c10d::ProcessGroupGloo::createDeviceForHostname(o.host)
                                                  : c10d::ProcessGroupGloo::createDefaultDevice());
    options->threads = 1;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("tandem/gloo", store);
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, o.rank, o.world_size, options);
    return std::unique_ptr<Group>(new GlooGroup(o, store, std::move(pg)));
  } catch (const std::exception& e) {
    return FromException("gloo: connecting the pairs", e);
  }
}

}  // namespace tandem::collective::internal
