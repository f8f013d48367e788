// The `nccl` weight transport (transport.h; docs/weights.md "The nccl
// transport"; issue #15 item 1): the actor's parameter buffers broadcast to
// every reader at once, through a process group (workers/collective/group.h)
// of the publisher (rank 0) and its `readers` (ranks 1..R): NCCL when the
// parameters are on a GPU (readers on other GPUs, other hosts), gloo on the
// CPU (the path CI runs). Sources are
//   nccl:HOST:PORT/e<EPOCH>/n<R>#v<VERSION>
// HOST:PORT is the publisher's store (a c10d TCPStore on one of its leased
// ports), EPOCH the group the version goes through, R the group's readers.
//
// Publish(version, params) snapshots the parameter buffers on their device
// (the caller may change params once it returns; ExportedBytes counts the
// snapshot: the `ipc_exports` tag), puts the version's manifest in the store
// (`tandem/weights/v<N>/manifest`) and hands the snapshot to the publisher's
// thread, which
//   1. forms the epoch's group once its R readers arrived (the first
//      version, and again after a failure: the next epoch);
//   2. sends the version number, then each buffer whole (one broadcast per
//      buffer: a few, never one per tensor);
//   3. records `tandem/weights/sent` = N and frees the snapshot.
// A version not sent yet is replaced by the next Publish (its manifest is
// removed; readers told of it get NotFound). Publish waits (up to `timeout`)
// for a broadcast in flight to end first. A group whose broadcast failed (a
// reader died or stopped answering: Unavailable or DeadlineExceeded after
// `timeout`) is dropped; the next Publish names the next epoch. A group
// that does not form within `connect_timeout` of its first reader's arrival
// is abandoned the same way, with its version. The last failure is kept for
// the logs (last_error()). ReleaseAll drops a version not sent yet; the
// destructor stops the thread (a broadcast in flight ends at its timeout).
//
// OpenNcclSource(uri) parses the URI; LoadParameters
//   1. reads the version's manifest from the store and checks the reader's
//      model against it (names, shapes: the tensor that differs is named)
//      before it joins anything: a refused reader never enters the group;
//   2. joins the epoch's group as the next rank (once per process and epoch:
//      the membership is kept for the next versions; a second reader in one
//      process joins as another rank);
//   3. receives the version number and the buffers: straight into the
//      reader's own buffers when the layouts match (same dtypes, sizes and
//      offsets), else into scratch buffers on the reader's device and then
//      converted into its parameters (parameter_manifest.h); on a GPU the
//      copies are synchronised before it returns.
// Errors name the source: NotFound when nothing listens (the publisher is
// gone), when the version's manifest is gone (replaced, or sent already: a
// late or restarted reader is sent the durable file: copy) or when the
// broadcast carried a newer version; InvalidArgument for a bad URI or
// another model; DataLoss for a manifest that does not parse; Unavailable
// or DeadlineExceeded from the group (its Connect and collectives). A
// receive straight into the reader's buffers that fails midway leaves them
// partly written: the caller keeps its previous version number
// (Generator::LoadWeights). Acknowledge does nothing: a version is freed
// once sent.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include "common/status.h"
#include "workers/weights/transport.h"
#include "workers/weights/weight_source.h"

namespace c10d {
class Store;
}
namespace tandem::collective {
class Group;
}

namespace tandem::weights {

struct NcclOptions {
  std::string host = "127.0.0.1";  // how readers reach this publisher (its host's address)
  int port = 0;                     // the store's port: one of the actor's leased ports
  uint32_t readers = 1;             // every version goes to all of them, together
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(300)};
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // each broadcast
};

class NcclPublisher final : public WeightPublisher {
 public:
  // The store is served at once: Unavailable when the port is taken;
  // InvalidArgument for a port outside [1, 65535] or no readers.
  static StatusOr<std::unique_ptr<NcclPublisher>> Create(NcclOptions options);
  ~NcclPublisher() override;
  NcclPublisher(const NcclPublisher&) = delete;
  NcclPublisher& operator=(const NcclPublisher&) = delete;

  StatusOr<std::string> Publish(int64_t version, const model::ParameterSet& params) override;
  uint64_t ExportedBytes() override;
  void ReleaseAll() override;
  std::string_view kind() const override { return "nccl"; }

  // The versions sent, and the last failure ("" when none), for logs and tests.
  int64_t sent() const;
  std::string last_error() const;

 private:
  struct Version {
    int64_t number = 0;
    std::vector<at::Tensor> buffers;  // the snapshot
    uint64_t bytes = 0;
  };
  explicit NcclPublisher(NcclOptions options);
  void Run();                                  // the thread
  Status FormGroup(std::unique_lock<std::mutex>& lock);  // epoch_'s group, once its readers arrived
  void Fail(const std::string& what, const Status& why);  // drops the group; the next epoch

  NcclOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;         // served here; readers join it (the caller's thread)
  c10::intrusive_ptr<c10d::Store> thread_store_;  // the thread's own client of it
  int64_t last_version_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Version> pending_, in_flight_;
  std::unique_ptr<collective::Group> group_;  // the thread's
  int64_t epoch_ = 1;
  int64_t sent_ = 0;
  std::string last_error_;
  bool stop_ = false;
  std::thread thread_;
};

// Each capped at twice the publisher's own plus 5 s (it puts them in its
// store): a reader never waits longer than a publisher that gave up.
struct NcclReaderOptions {
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(300)};  // the group's forming
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};          // each receive
};

// `uri` without its "nccl:" scheme.
StatusOr<std::unique_ptr<WeightSource>> OpenNcclSource(std::string_view uri, NcclReaderOptions options = {});

}  // namespace tandem::weights
