// A reader's side of the cuda-ipc conversation (ipc_client.h).
#include "workers/weights/ipc_client.h"

#include <unistd.h>

namespace tandem::weights::ipc {

StatusOr<IpcConnection> IpcConnection::Request(const IpcUri& uri, std::chrono::milliseconds timeout) {
  const std::string what = FormatIpcUri(uri);
  const Deadline deadline = After(timeout);
  IpcConnection c;
  c.uri_ = uri;
  TANDEM_ASSIGN_OR_RETURN(c.sock_, Connect(uri.address, deadline), what);
  TANDEM_ASSIGN_OR_RETURN(PeerCredentials peer, PeerOf(c.sock_.get()), what);
  if (peer.uid != ::geteuid())
    return PermissionDenied(what + ": the process listening there (pid " + std::to_string(peer.pid) + ") runs as uid " +
                            std::to_string(peer.uid) + ", this reader as " + std::to_string(::geteuid()));
  TANDEM_RETURN_IF_ERROR(SendFrame(c.sock_.get(), FrameType::kRequest, EncodeVersionMessage(uri.version), {}, deadline),
                         what + ": request");
  TANDEM_ASSIGN_OR_RETURN(Frame f, RecvFrame(c.sock_.get(), deadline), what + ": waiting for the offer");
  if (f.type == FrameType::kError) {
    if (!f.fds.empty()) return DataLoss(what + ": an error frame carried descriptors");
    return ParseError(f.payload).WithContext(what);
  }
  if (f.type != FrameType::kOffer)
    return DataLoss(what + ": expected an offer, got a " + std::string(FrameTypeName(f.type)) + " frame");
  if (f.fds.size() != 1)
    return DataLoss(what + ": the offer carries " + std::to_string(f.fds.size()) + " descriptors, expected 1");
  TANDEM_ASSIGN_OR_RETURN(c.offer_, ParseOffer(f.payload, uri.version), what);
  if (c.offer_.publisher_pid != peer.pid)
    return DataLoss(what + ": the offer says publisher pid " + std::to_string(c.offer_.publisher_pid) +
                    ", the socket's peer is pid " + std::to_string(peer.pid));
  c.descriptor_ = std::move(f.fds[0]);
  return c;
}

StatusOr<IpcAcked> IpcConnection::Ack(std::chrono::milliseconds timeout) {
  if (acked_) return *acked_;
  const std::string what = FormatIpcUri(uri_) + ": ack not delivered";
  if (!sock_.valid()) return FailedPrecondition(what + ": no connection");
  const Deadline deadline = After(timeout);
  TANDEM_RETURN_IF_ERROR(SendFrame(sock_.get(), FrameType::kAck, EncodeVersionMessage(uri_.version), {}, deadline), what);
  TANDEM_ASSIGN_OR_RETURN(Frame f, RecvFrame(sock_.get(), deadline), what);
  if (f.type == FrameType::kError) return ParseError(f.payload).WithContext(what);
  if (f.type != FrameType::kAcked || !f.fds.empty())
    return DataLoss(what + ": expected an acked answer, got a " + std::string(FrameTypeName(f.type)) + " frame");
  TANDEM_ASSIGN_OR_RETURN(IpcAcked a, ParseAcked(f.payload), what);
  if (a.version != uri_.version)
    return DataLoss(what + ": the publisher acknowledged version " + std::to_string(a.version));
  acked_ = a;
  sock_.reset();
  return a;
}

}  // namespace tandem::weights::ipc
