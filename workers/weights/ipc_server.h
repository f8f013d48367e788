// The publisher's side of the cuda-ipc transport's socket (docs/weights.md
// "The cuda-ipc transport"; ipc_messages.h for the conversation): one
// thread that listens on the publisher's address and answers every reader
// with the current version's offer and descriptor, counts their acks, and
// frees the version when the last expected reader acknowledged. Torch-free
// and CUDA-free: what it offers is an IpcExport (cuda_vmm.h's VMM
// allocation in the transport; any descriptor in its CPU tests,
// tests/ipc_server_test.cc).
//
// Contract:
//   * Start binds the address (ipc_socket.h's Listen errors) and starts the
//     thread; the destructor stops it, closes every connection (a reader
//     mid-conversation then gets Unavailable), frees the offer and removes
//     a socket file.
//   * Offer(version, payload, export, expected_readers) makes `version` the
//     one served, replacing (and freeing) the previous; payload is the
//     offer frame's JSON (ipc_messages.h EncodeOffer). Release frees it.
//     Both are called from the publisher's thread; HeldBytes is the offered
//     export's bytes() while held, 0 once freed. Thread-safe.
//   * A request for the served version gets the offer and the export's
//     descriptor; any other version, or one already freed, gets error
//     not_found naming why (replaced by version N, freed after its N
//     expected readers acknowledged, released by the publisher, not
//     published). An ack counts once per connection that was served that
//     version; the ack that reaches expected_readers (> 0) frees the export
//     before the acked answer is sent. expected_readers 0: freed only by
//     replacement, Release and the destructor.
//   * Every peer is hostile: a connection whose peer has another uid is
//     refused (permission_denied); one that sends no request within
//     request_timeout, a malformed frame, or a frame of another type is
//     closed; a frame is read and an answer written with io_timeout each (a
//     peer that stops mid-frame stalls the thread that long, no longer); at
//     most max_connections at once (others get resource_exhausted). A
//     reader that closes without acking (killed mid-load) counts nothing:
//     the export stays until replacement, Release or the destructor.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "workers/weights/ipc_socket.h"

namespace tandem::weights::ipc {

// What one version's offer carries: a descriptor, and what it refers to;
// destroying it frees both.
class IpcExport {
 public:
  virtual ~IpcExport() = default;
  virtual int fd() const = 0;
  virtual uint64_t bytes() const = 0;
};

struct IpcServerOptions {
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds io_timeout{2000};
  size_t max_connections = 64;
};

struct IpcServerCounters {
  uint64_t offers = 0;    // offers sent
  uint64_t acks = 0;      // acks counted
  uint64_t refused = 0;   // error answers
  uint64_t dropped = 0;   // connections closed for a fault of the peer
};

class IpcServer {
 public:
  static StatusOr<std::unique_ptr<IpcServer>> Start(const SocketAddress& address, IpcServerOptions options = {});
  ~IpcServer();
  IpcServer(const IpcServer&) = delete;
  IpcServer& operator=(const IpcServer&) = delete;

  void Offer(int64_t version, std::string payload, std::unique_ptr<IpcExport> exp, uint32_t expected_readers);
  void Release(const std::string& reason);
  uint64_t HeldBytes() const;
  IpcServerCounters counters() const;
  const SocketAddress& address() const { return address_; }

 private:
  struct Client;
  IpcServer(SocketAddress address, IpcServerOptions options, UniqueFd listener, UniqueFd wake);
  void Run();
  // Handles one frame from `c`; false: close the connection.
  bool Handle(Client& c, const Frame& f);
  void FreeLocked(const std::string& reason);
  std::string WhyNotServedLocked(int64_t version) const;

  const SocketAddress address_;
  const IpcServerOptions options_;
  UniqueFd listener_, wake_;
  std::thread thread_;

  mutable std::mutex mu_;
  int64_t version_ = -1;  // the version offered, -1 before the first
  std::string payload_;
  std::unique_ptr<IpcExport> export_;  // null once freed
  uint32_t expected_ = 0, acks_ = 0;
  std::map<int64_t, std::string> gone_;  // version -> why it is no longer served (the last 16)
  IpcServerCounters counters_;
  bool stop_ = false;
};

}  // namespace tandem::weights::ipc
