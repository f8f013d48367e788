// A reader's conversation with a cuda-ipc publisher (ipc_messages.h; docs/
// weights.md "The cuda-ipc transport"). Torch-free and CUDA-free: it gets
// the offer and the allocation's descriptor; cuda_vmm.h maps them.
//
// Contract:
//   * Request(uri, timeout) connects to uri.address, checks that the peer
//     runs as this process's user (PermissionDenied otherwise), asks for
//     uri.version and returns the parsed, validated offer (ParseOffer) with
//     its one descriptor. The publisher's refusal comes back as its Status
//     (NotFound: replaced, freed, not published). Nothing listening is
//     NotFound; a publisher that closes the connection (killed mid-answer)
//     is Unavailable; one that does not answer within `timeout` (stopped,
//     hung) is DeadlineExceeded. Every error names the address.
//   * Ack(timeout) tells the publisher this reader is done (its copy is
//     synchronised) and waits for the publisher's acked answer; the
//     connection then closes. Once: a second call returns the first answer.
//     A publisher gone by then is Unavailable ("ack not delivered").
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/status.h"
#include "workers/weights/ipc_messages.h"
#include "workers/weights/ipc_socket.h"

namespace tandem::weights::ipc {

class IpcConnection {
 public:
  static StatusOr<IpcConnection> Request(const IpcUri& uri, std::chrono::milliseconds timeout);

  const IpcOffer& offer() const { return offer_; }
  UniqueFd TakeDescriptor() { return std::move(descriptor_); }
  StatusOr<IpcAcked> Ack(std::chrono::milliseconds timeout);
  const IpcUri& uri() const { return uri_; }

 private:
  IpcUri uri_;
  UniqueFd sock_;
  IpcOffer offer_;
  UniqueFd descriptor_;
  std::optional<IpcAcked> acked_;
};

}  // namespace tandem::weights::ipc
