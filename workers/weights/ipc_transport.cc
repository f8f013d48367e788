// The cuda-ipc transport (ipc_transport.h): ParameterSets through CUDA VMM
// exports served over a unix socket.
#include "workers/weights/ipc_transport.h"

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/GradMode.h>

#include <unistd.h>

#include <vector>

#include "workers/weights/cuda_vmm.h"
#include "workers/weights/ipc_client.h"
#include "workers/weights/ipc_messages.h"
#include "workers/weights/parameter_manifest.h"

namespace tandem::weights {
namespace {

// The one CUDA device every buffer of `params` is on.
StatusOr<int> DeviceOf(const model::ParameterSet& params, const std::string& what) {
  int ordinal = -1;
  for (size_t b = 0; b < params.buffers().size(); ++b) {
    const at::Device d = params.buffers()[b].device();
    if (!d.is_cuda())
      return FailedPrecondition(what + ": parameter buffer " + std::to_string(b) + " is on " + d.str() +
                                "; cuda-ipc moves device buffers of one GPU (use shm: for host memory)");
    if (ordinal >= 0 && d.index() != ordinal)
      return FailedPrecondition(what + ": parameter buffers on cuda:" + std::to_string(ordinal) + " and " + d.str());
    ordinal = d.index();
  }
  if (ordinal < 0) return InvalidArgument(what + ": no parameter buffers");
  return ordinal;
}

class IpcSource final : public WeightSource {
 public:
  IpcSource(ipc::IpcConnection conn, std::unique_ptr<VmmImport> import, int ordinal, IpcReaderOptions options)
      : conn_(std::move(conn)), import_(std::move(import)), ordinal_(ordinal), options_(options) {}

  Status LoadParameters(const model::ParameterSet& params) override {
    const std::string what = "load_weights from " + Describe();
    if (!import_) return FailedPrecondition(what + ": already acknowledged (open the source again)");
    const WeightManifest& m = conn_.offer().manifest;
    TANDEM_RETURN_IF_ERROR(CheckReaderMatches(m, params), what);
    TANDEM_ASSIGN_OR_RETURN(int reader_device, DeviceOf(params, what));
    if (reader_device != ordinal_)
      return FailedPrecondition(what + ": the reader's parameters are on cuda:" + std::to_string(reader_device) +
                                ", the export on cuda:" + std::to_string(ordinal_) + " (GPU " +
                                conn_.offer().device_uuid + ")");
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceCopier> copier, DeviceCopier::Create(ordinal_), what);
    // The reader's own kernels that still read the old weights finish first.
    TANDEM_RETURN_IF_ERROR(copier->SynchronizeDevice(), what);
    std::vector<uint64_t> offsets = ipc::IpcBufferOffsets(m, nullptr);
    const auto* base = static_cast<const std::byte*>(import_->data());
    if (SameLayout(m, params)) {
      for (size_t b = 0; b < m.buffers.size(); ++b)
        TANDEM_RETURN_IF_ERROR(copier->Copy(params.buffers()[b].data_ptr(), base + offsets[b], m.buffers[b].bytes), what);
      TANDEM_RETURN_IF_ERROR(copier->Wait(), what);
      return Status::Ok();
    }
    std::vector<const std::byte*> bytes;
    for (const uint64_t o : offsets) bytes.push_back(base + o);
    TANDEM_RETURN_IF_ERROR(CopyIntoParameters(m, bytes, params, at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(ordinal_))),
                           what);
    TANDEM_RETURN_IF_ERROR(copier->SynchronizeDevice(), what);  // LibTorch's stream: the conversion is done
    return Status::Ok();
  }

  Status Acknowledge() override {
    import_.reset();  // our mapping goes before the publisher frees its own
    StatusOr<ipc::IpcAcked> a = conn_.Ack(options_.timeout);
    if (!a.ok()) return a.status().WithContext("acknowledge");
    return Status::Ok();
  }
  std::string Describe() const override { return ipc::FormatIpcUri(conn_.uri()); }
  std::optional<int64_t> version() const override { return conn_.offer().version; }

 private:
  ipc::IpcConnection conn_;
  std::unique_ptr<VmmImport> import_;
  int ordinal_;
  IpcReaderOptions options_;
};

}  // namespace

IpcPublisher::IpcPublisher(IpcOptions options) : options_(std::move(options)) {}

IpcPublisher::~IpcPublisher() = default;  // the server frees the version and closes the socket

StatusOr<std::string> IpcPublisher::Publish(int64_t version, const model::ParameterSet& params) {
  if (version <= last_version_)
    return FailedPrecondition("publish_weights: version " + std::to_string(version) + " after version " +
                              std::to_string(last_version_) + " (versions must grow)");
  const std::string what = "publish_weights v" + std::to_string(version) + " over cuda-ipc";
  TANDEM_ASSIGN_OR_RETURN(int ordinal, DeviceOf(params, what));
  TANDEM_ASSIGN_OR_RETURN(WeightManifest manifest, ManifestOf(version, params));
  if (!server_) {
    TANDEM_ASSIGN_OR_RETURN(ipc::SocketAddress address,
                            ipc::PublisherAddress(options_.job, options_.task, options_.socket_dir), what);
    TANDEM_ASSIGN_OR_RETURN(server_, ipc::IpcServer::Start(address, options_.server), what);
  }
  uint64_t end = 0;
  const std::vector<uint64_t> offsets = ipc::IpcBufferOffsets(manifest, &end);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<VmmExport> exp, VmmExport::Create(ordinal, end), what);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceCopier> copier, DeviceCopier::Create(ordinal), what);
  // The caller's kernels that write params finish first; then one copy per buffer.
  TANDEM_RETURN_IF_ERROR(copier->SynchronizeDevice(), what);
  auto* base = static_cast<std::byte*>(exp->data());
  for (size_t b = 0; b < manifest.buffers.size(); ++b)
    TANDEM_RETURN_IF_ERROR(copier->Copy(base + offsets[b], params.buffers()[b].data_ptr(), manifest.buffers[b].bytes), what);
  TANDEM_RETURN_IF_ERROR(copier->Wait(), what);
  ipc::IpcOffer offer;
  offer.version = version;
  offer.sealed = true;  // the bytes are all there: the copy is synchronised
  TANDEM_ASSIGN_OR_RETURN(offer.device_uuid, DeviceUuid(ordinal), what);
  offer.allocation_bytes = exp->bytes();
  offer.publisher_pid = ::getpid();
  offer.manifest = std::move(manifest);
  server_->Offer(version, ipc::EncodeOffer(offer), std::move(exp), options_.expected_readers);
  last_version_ = version;
  return ipc::FormatIpcUri({server_->address(), version});
}

uint64_t IpcPublisher::ExportedBytes() { return server_ ? server_->HeldBytes() : 0; }

void IpcPublisher::ReleaseAll() {
  if (server_) server_->Release("released by its publisher (ReleaseAll)");
}

ipc::IpcServerCounters IpcPublisher::counters() const { return server_ ? server_->counters() : ipc::IpcServerCounters{}; }

StatusOr<std::unique_ptr<WeightSource>> OpenIpcSource(std::string_view uri_text, IpcReaderOptions options) {
  TANDEM_ASSIGN_OR_RETURN(ipc::IpcUri uri, ipc::ParseIpcUri(uri_text));
  const std::string what = "load_weights from " + ipc::FormatIpcUri(uri);
  TANDEM_ASSIGN_OR_RETURN(ipc::IpcConnection conn, ipc::IpcConnection::Request(uri, options.timeout), "load_weights");
  TANDEM_ASSIGN_OR_RETURN(int ordinal, OrdinalOfUuid(conn.offer().device_uuid), what);
  ipc::UniqueFd fd = conn.TakeDescriptor();
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<VmmImport> import,
                          VmmImport::Open(fd.get(), conn.offer().allocation_bytes, ordinal), what);
  return std::unique_ptr<WeightSource>(new IpcSource(std::move(conn), std::move(import), ordinal, options));
}

Status IpcTransportAvailable(int ordinal) {
  if (!at::hasCUDA()) return Unavailable("cuda-ipc: this LibTorch has no CUDA (or sees no device)");
  return CudaIpcAvailable(ordinal);
}

}  // namespace tandem::weights
