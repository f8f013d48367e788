// The `cuda-ipc` weight transport (transport.h; docs/weights.md "The
// cuda-ipc transport"; issue #15 item 1): a colocated actor and its readers
// on one GPU exchange a version through one CUDA VMM allocation, shared as a
// POSIX file descriptor over a unix-domain socket (SCM_RIGHTS). Sources are
// "ipc:@tandem-<job>-<task>#v<version>" (or "ipc:/dir/tandem-<job>-<task>.sock#v<version>"
// with IpcOptions::socket_dir; ipc_messages.h).
//
// IpcPublisher::Publish(version, params): params must live on one CUDA
// device. It waits for the work queued on the device (the caller's kernels
// that write params), copies every parameter buffer device-to-device into a
// new VMM allocation exported as a descriptor (cuda_vmm.h: one copy; the
// caller may change params as soon as Publish returns), waits for the copy,
// and only then offers the version on its socket (ipc_server.h: a reader
// never sees a version that is not whole, and a publisher killed
// mid-publish offers nothing new). The previous version is freed at that
// moment. A version is freed by the last of `expected_readers` acks, by the
// next Publish, by ReleaseAll and by the destructor; ExportedBytes is the
// allocation's size while held (the `ipc_exports` tag), 0 once freed.
// Freed means the publisher's handle, mapping and descriptor are gone: a
// reader that already imported the allocation keeps its own mapping until
// it acknowledges or closes, and the driver frees the memory after the last.
// The socket thread is the only concurrency: Publish, ExportedBytes and
// ReleaseAll are called from the actor's command loop.
//
// OpenIpcSource(uri): asks the publisher for the version (ipc_client.h),
// validates the offer (manifest, version, sizes, the GPU's uuid) and maps
// the allocation (cuda_vmm.h: an allocation smaller than the offer claims
// is refused). LoadParameters checks the reader's model (names, shapes;
// parameters on the export's GPU), waits for the reader's queued work,
// copies (one device-to-device copy per buffer when the layouts match, else
// per tensor converting dtypes through LibTorch) and waits for the copy
// before it returns. Acknowledge unmaps the allocation and then acks.
// Errors name the source: NotFound (nothing listens: the publisher is gone;
// or its refusal: replaced, freed), Unavailable (the publisher closed the
// connection mid-conversation), DeadlineExceeded (no answer within the
// reader's timeout: a stopped or hung publisher), DataLoss (a malformed or
// inconsistent offer, an allocation smaller than claimed),
// FailedPrecondition (the reader's parameters are not on the export's GPU),
// InvalidArgument (a bad URI, another model's shapes).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "workers/weights/ipc_server.h"
#include "workers/weights/transport.h"
#include "workers/weights/weight_source.h"

namespace tandem::weights {

struct IpcOptions {
  std::string job;   // TANDEM_JOB_ID
  std::string task;  // TANDEM_TASK_ID
  uint32_t expected_readers = 1;  // acks that free a version; 0: never by acks
  std::string socket_dir;         // "": the abstract socket @tandem-<job>-<task>
  ipc::IpcServerOptions server;
};

class IpcPublisher final : public WeightPublisher {
 public:
  explicit IpcPublisher(IpcOptions options);
  ~IpcPublisher() override;
  IpcPublisher(const IpcPublisher&) = delete;
  IpcPublisher& operator=(const IpcPublisher&) = delete;

  StatusOr<std::string> Publish(int64_t version, const model::ParameterSet& params) override;
  uint64_t ExportedBytes() override;
  void ReleaseAll() override;
  std::string_view kind() const override { return "ipc"; }

  // The socket thread's counts (offers sent, acks, refusals), for tests and logs.
  ipc::IpcServerCounters counters() const;

 private:
  IpcOptions options_;
  std::unique_ptr<ipc::IpcServer> server_;  // started by the first Publish
  int64_t last_version_ = -1;
};

struct IpcReaderOptions {
  std::chrono::milliseconds timeout{10000};  // each of: the offer, the ack's answer
};

// `uri` is the part after "ipc:".
StatusOr<std::unique_ptr<WeightSource>> OpenIpcSource(std::string_view uri, IpcReaderOptions options = {});

// Ok when this process can run the transport on CUDA device `ordinal`:
// LibTorch with CUDA, the driver, the device, VMM with POSIX descriptors.
Status IpcTransportAvailable(int ordinal = 0);

}  // namespace tandem::weights
