// What the group's backends share (group.h): the rendezvous store, dtype
// buckets, errors from exceptions, the broken-group rule. Internal to
// workers/collective/group*.cc.
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/util/intrusive_ptr.h>

#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/collective/group.h"

namespace c10d {
class Store;
}

namespace tandem::collective::internal {

// The backends; each returns FailedPrecondition when this build lacks it.
StatusOr<std::unique_ptr<Group>> ConnectGloo(const GroupOptions& options);
StatusOr<std::unique_ptr<Group>> ConnectNccl(const GroupOptions& options);

// Rank 0 serves a c10d TCPStore on options.port and waits (up to the
// connect_timeout) for all world_size ranks to join; the others connect to it.
// DeadlineExceeded when the group is not complete in time.
StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(const GroupOptions& options);

// DeadlineExceeded when the exception says it timed out, else Unavailable,
// "<what>: <message>".
Status FromException(const std::string& what, const std::exception& e);

// The tensors of one dtype as one flat contiguous tensor: the tensor itself
// (`aliased`) when it is the only one of its dtype and contiguous, else a
// concatenated copy to scatter back with Unbucket.
struct Bucket {
  at::Tensor flat;
  std::vector<size_t> members;  // indices into the caller's tensors
  bool aliased = false;
};
// InvalidArgument naming the tensor when undefined, not floating or not on `device`.
StatusOr<std::vector<Bucket>> MakeBuckets(const std::vector<at::Tensor>& tensors, c10::Device device);
void Unbucket(const Bucket& bucket, std::vector<at::Tensor>& tensors);
// Each non-empty tensor as a flat byte view of its memory (BroadcastTensors);
// InvalidArgument naming the tensor when undefined, not contiguous or not on `device`.
StatusOr<std::vector<at::Tensor>> AsBytes(const std::vector<at::Tensor>& tensors, c10::Device device);

// Remembers the first failure; every later call fails with it.
class BrokenGuard {
 public:
  Status Check() const;
  Status Fail(Status s);  // records and returns s
 private:
  std::string first_;
};

}  // namespace tandem::collective::internal
