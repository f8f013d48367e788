// The cuda-ipc publisher's socket thread (ipc_server.h).
#include "workers/weights/ipc_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "common/log.h"
#include "workers/weights/ipc_messages.h"

namespace tandem::weights::ipc {

struct IpcServer::Client {
  UniqueFd fd;
  PeerCredentials peer;
  Deadline request_deadline;
  int64_t served = -1;  // the version offered on this connection
  bool acked = false;
};

StatusOr<std::unique_ptr<IpcServer>> IpcServer::Start(const SocketAddress& address, IpcServerOptions options) {
  TANDEM_ASSIGN_OR_RETURN(UniqueFd listener, Listen(address), "publish_weights");
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return ErrnoStatus("publish_weights: eventfd");
  std::unique_ptr<IpcServer> s(new IpcServer(address, options, std::move(listener), std::move(wake)));
  s->thread_ = std::thread([p = s.get()] { p->Run(); });
  return s;
}

IpcServer::IpcServer(SocketAddress address, IpcServerOptions options, UniqueFd listener, UniqueFd wake)
    : address_(std::move(address)), options_(options), listener_(std::move(listener)), wake_(std::move(wake)) {}

IpcServer::~IpcServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  const uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof one) < 0) {
  }
  if (thread_.joinable()) thread_.join();
  listener_.reset();
  if (!address_.abstract) ::unlink(address_.name.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  FreeLocked("its publisher was destroyed");
}

void IpcServer::Offer(int64_t version, std::string payload, std::unique_ptr<IpcExport> exp, uint32_t expected_readers) {
  std::lock_guard<std::mutex> lock(mu_);
  if (version_ >= 0) FreeLocked("replaced by version " + std::to_string(version));
  version_ = version;
  payload_ = std::move(payload);
  export_ = std::move(exp);
  expected_ = expected_readers;
  acks_ = 0;
}

void IpcServer::Release(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  FreeLocked(reason);
}

uint64_t IpcServer::HeldBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return export_ ? export_->bytes() : 0;
}

IpcServerCounters IpcServer::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void IpcServer::FreeLocked(const std::string& reason) {
  if (version_ < 0 || gone_.count(version_)) return;
  export_.reset();  // the VMM allocation's handle and descriptor go here
  gone_[version_] = reason;
  while (gone_.size() > 16) gone_.erase(gone_.begin());
}

std::string IpcServer::WhyNotServedLocked(int64_t version) const {
  const std::string what = "version " + std::to_string(version) + " at " + address_.ToString();
  if (auto it = gone_.find(version); it != gone_.end()) return what + " is no longer served: " + it->second;
  if (version_ < 0) return what + " is not published (nothing was published yet)";
  return what + " is not published (the publisher serves version " + std::to_string(version_) + ")";
}

bool IpcServer::Handle(Client& c, const Frame& f) {
  const Deadline deadline = After(options_.io_timeout);
  auto refuse = [&](const Status& st) {
    ++counters_.refused;
    return SendFrame(c.fd.get(), FrameType::kError, EncodeError(st), {}, deadline).ok();
  };
  std::lock_guard<std::mutex> lock(mu_);
  if (!f.fds.empty()) {
    ++counters_.dropped;
    refuse(InvalidArgument("a reader's frame carries no descriptors"));
    return false;
  }
  if (f.type == FrameType::kRequest) {
    StatusOr<int64_t> v = ParseVersionMessage(f.payload, "request");
    if (!v.ok()) {
      ++counters_.dropped;
      refuse(InvalidArgument(v.status().message()));
      return false;
    }
    if (c.served >= 0) {
      refuse(FailedPrecondition("one request per connection"));
      return false;
    }
    if (*v != version_ || !export_) return refuse(NotFound(WhyNotServedLocked(*v)));
    const int fd = export_->fd();
    const Status st = SendFrame(c.fd.get(), FrameType::kOffer, payload_, std::span<const int>(&fd, 1), deadline);
    if (!st.ok()) {
      ++counters_.dropped;
      log::Debug("weights", "ipc offer not delivered peer_pid={} error={}", c.peer.pid, st.message());
      return false;
    }
    ++counters_.offers;
    c.served = *v;
    return true;
  }
  if (f.type == FrameType::kAck) {
    StatusOr<int64_t> v = ParseVersionMessage(f.payload, "ack");
    if (!v.ok()) {
      ++counters_.dropped;
      refuse(InvalidArgument(v.status().message()));
      return false;
    }
    if (c.served != *v) {
      refuse(FailedPrecondition("ack of version " + std::to_string(*v) + " on a connection that was " +
                                (c.served < 0 ? std::string("offered nothing") : "offered version " + std::to_string(c.served))));
      return false;
    }
    if (!c.acked && *v == version_ && export_) {
      ++acks_;
      ++counters_.acks;
      if (expected_ > 0 && acks_ >= expected_)
        FreeLocked("freed after its " + std::to_string(expected_) + " expected reader" + (expected_ == 1 ? "" : "s") +
                   " acknowledged");
    }
    c.acked = true;
    IpcAcked a{*v, *v == version_ ? acks_ : 0, *v == version_ ? expected_ : 0, !(*v == version_ && export_)};
    return SendFrame(c.fd.get(), FrameType::kAcked, EncodeAcked(a), {}, deadline).ok();
  }
  ++counters_.dropped;
  refuse(InvalidArgument("unexpected " + std::string(FrameTypeName(f.type)) + " frame from a reader"));
  return false;
}

void IpcServer::Run() {
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<pollfd> fds;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    fds.push_back({listener_.get(), POLLIN, 0});
    Deadline soonest = Deadline::max();
    for (const auto& c : clients) {
      fds.push_back({c->fd.get(), POLLIN, 0});
      if (c->served < 0) soonest = std::min(soonest, c->request_deadline);
    }
    int timeout = -1;
    if (soonest != Deadline::max()) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(soonest - Clock::now()).count();
      timeout = static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 60000));
    }
    const int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      log::Error("weights", "ipc server poll failed errno={}", errno);
      break;
    }
    if (fds[0].revents) {
      uint64_t v = 0;
      if (::read(wake_.get(), &v, sizeof v) < 0) {
      }
      continue;  // stop_ is checked at the top
    }
    // Readers first (their indexes are fixed), then new connections.
    std::vector<bool> close(clients.size(), false);
    for (size_t i = 0; i < clients.size(); ++i) {
      Client& c = *clients[i];
      const short rev = fds[i + 2].revents;
      if (rev & (POLLIN | POLLHUP | POLLERR)) {
        StatusOr<Frame> f = RecvFrame(c.fd.get(), After(options_.io_timeout));
        if (!f.ok()) {
          // A closed connection is how a reader ends (after its ack) or dies.
          if (f.status().code() != StatusCode::kUnavailable) {
            std::lock_guard<std::mutex> lock(mu_);
            ++counters_.dropped;
            log::Debug("weights", "ipc reader dropped peer_pid={} error={}", c.peer.pid, f.status().message());
          }
          close[i] = true;
        } else if (!Handle(c, *f)) {
          close[i] = true;
        }
      } else if (c.served < 0 && Clock::now() >= c.request_deadline) {
        std::lock_guard<std::mutex> lock(mu_);
        ++counters_.dropped;
        log::Debug("weights", "ipc reader sent no request in time peer_pid={}", c.peer.pid);
        close[i] = true;
      }
    }
    for (size_t i = clients.size(); i-- > 0;)
      if (close[i]) clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
    if (fds[1].revents & POLLIN) {
      for (;;) {
        StatusOr<UniqueFd> a = Accept(listener_.get());
        if (!a.ok()) break;
        auto c = std::make_unique<Client>();
        c->fd = std::move(*a);
        c->request_deadline = After(options_.request_timeout);
        StatusOr<PeerCredentials> peer = PeerOf(c->fd.get());
        const Deadline deadline = After(options_.io_timeout);
        if (!peer.ok() || peer->uid != ::geteuid()) {
          std::lock_guard<std::mutex> lock(mu_);
          ++counters_.refused;
          (void)SendFrame(c->fd.get(), FrameType::kError,
                          EncodeError(PermissionDenied("the publisher serves only processes of its own user")), {},
                          deadline);
          continue;
        }
        c->peer = *peer;
        if (clients.size() >= options_.max_connections) {
          std::lock_guard<std::mutex> lock(mu_);
          ++counters_.refused;
          (void)SendFrame(c->fd.get(), FrameType::kError,
                          EncodeError(ResourceExhausted(std::to_string(clients.size()) + " readers are connected (the limit)")),
                          {}, deadline);
          continue;
        }
        clients.push_back(std::move(c));
      }
    }
  }
}

}  // namespace tandem::weights::ipc
