// A process group (docs/rl.md "Data parallel"; docs/weights.md "The nccl
// transport"): the collectives two users need —
// data-parallel actor replicas (docs/rl.md "Data parallel"; issue #16 item
// 4: a sum of the gradient buffers, sums and maxima of host scalars, a
// barrier) and the nccl weight transport (workers/weights/nccl_transport.h;
// issue #15: rank 0's parameter buffers broadcast to the readers).
//
// Connect(options) joins the group: rank 0 listens on `host:port` (in a
// job, one of rank 0's leased ports, TANDEM_PORTS) with a c10d TCPStore,
// every rank connects to it, and the backend rendezvouses through it
// (or through `options.store`, a store the caller keeps: then host and
// port are not used):
//   CPU tensors:  gloo (c10d::ProcessGroupGloo), when the build found gloo's
//                 headers (Debian: libgloo-dev); else FailedPrecondition
//                 naming the package;
//   CUDA tensors: NCCL (raw ncclCommInitRank, the unique id passed through
//                 the store), in CUDA builds that found nccl.h; else
//                 FailedPrecondition.
// world_size 1 needs no networking at all (no store, no backend; every
// collective is the identity).
//
// Broadcast carries rank 0's messages (the actor's step: which trajectories
// each replica trains on) through the same store: bytes, not tensors.
// BroadcastTensors sends rank 0's tensors themselves, through the backend.
//
// Contracts: every rank calls the same collectives in the same order with
// tensors of the same shapes and dtypes. Connect returns within about
// `connect_timeout` and each collective within about `timeout`, whatever
// the peers do: a peer that never arrives is DeadlineExceeded, a peer
// that dies (even by SIGKILL) or stops answering is Unavailable or
// DeadlineExceeded, naming the collective. A rank that reaches a group
// which formed already (its world_size ranks joined: the others' group of
// before this rank restarted) is Unavailable at once. After a failed
// collective the group is broken: every later call is FailedPrecondition
// (make a new group). A bad option is InvalidArgument naming it. Not
// thread-safe: one thread uses a group.
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::collective {

struct GroupOptions {
  int rank = 0;
  int world_size = 1;
  std::string host = "127.0.0.1";  // where rank 0 listens (every rank's view of it)
  int port = 0;                    // rank 0's rendezvous port, in [1, 65535] when world_size > 1
  c10::Device device = c10::kCPU;  // the gradients' device: CPU → gloo, CUDA → NCCL
  // Until every rank joined (ranks start minutes apart when each loads a model).
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(300)};
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // each collective
  // A store every rank already reaches (a c10d::PrefixStore per group over
  // one long-lived TCPStore: the weight transport's groups, one per epoch);
  // null: rank 0 serves a TCPStore on host:port and the others join it.
  c10::intrusive_ptr<c10d::Store> store;
};
// InvalidArgument naming the option: rank outside [0, world_size),
// world_size < 1, an empty host or a port outside [1, 65535] with
// world_size > 1 and no store, a timeout or connect_timeout <= 0.
Status Validate(const GroupOptions& options);

// A TCPStore that outlives the groups formed through it, one after another
// (each through its own c10d::PrefixStore as GroupOptions::store): the nccl
// weight transport re-forms its group when a reader is gone.
// ServeStore listens on `port` (Unavailable when it cannot: the port is
// taken); JoinStore connects to host:port, NotFound when nothing accepts
// a connection there within `wait`. `timeout` bounds each later get/wait.
StatusOr<c10::intrusive_ptr<c10d::Store>> ServeStore(int port, std::chrono::milliseconds timeout);
StatusOr<c10::intrusive_ptr<c10d::Store>> JoinStore(const std::string& host, int port, std::chrono::milliseconds wait,
                                                    std::chrono::milliseconds timeout);

// An exception's message without the C++ backtrace c10::Error appends
// (for errors that name a store or collective operation).
std::string ExceptionMessage(const std::exception& e);

enum class HostReduce { kSum, kMax };

class Group {
 public:
  static StatusOr<std::unique_ptr<Group>> Connect(const GroupOptions& options);
  virtual ~Group();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  virtual std::string backend() const = 0;  // "local", "gloo" or "nccl"

  // Sums each tensor over the ranks, in place. Tensors on the group's
  // device, contiguous, floating; tensors sharing a dtype travel as one
  // flat bucket (the model's one gradient buffer: no copy).
  virtual Status AllReduceSum(std::vector<at::Tensor>& tensors) = 0;
  // Rank 0's tensors to every rank, in place (the others' are replaced).
  // Tensors on the group's device, contiguous, of any dtype (sent as their
  // bytes); every rank gives the same shapes and dtypes.
  virtual Status BroadcastTensors(std::vector<at::Tensor>& tensors) = 0;
  // Sums (or takes the maximum of) each value over the ranks, in place, in
  // double: the batch's counts and metric sums.
  virtual Status AllReduce(std::vector<double>& values, HostReduce op) = 0;
  virtual Status Barrier() = 0;

  // Rank 0's `bytes` to every rank (the others' are replaced). Rank 0 does
  // not wait for the others; they wait up to `timeout` for it (rank 0 may be
  // busy for minutes between two messages: the actor's rollouts). Every
  // rank calls it the same number of times. Unavailable when rank 0 is
  // gone, DeadlineExceeded at the timeout.
  Status Broadcast(std::string& bytes, std::chrono::milliseconds timeout);

 protected:
  Group(int rank, int world_size, c10::intrusive_ptr<c10d::Store> store = {});

 private:
  int rank_, world_size_;
  c10::intrusive_ptr<c10d::Store> store_;  // the rendezvous store; null for world_size 1
  int64_t broadcasts_ = 0;
};

}  // namespace tandem::collective
