// Options, the world-size-1 group, the rendezvous store and the backends'
// shared helpers (group.h, group_backend.h).
#include "workers/collective/group.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <thread>
#include <string>
#include <utility>

#include "workers/collective/group_backend.h"

namespace tandem::collective {
namespace {

// Whether something accepts TCP connections on host:port now (at most
// `wait`): rank 1 probes before it builds its TCPStore client, whose failed
// attempts LibTorch logs one line each.
bool Accepts(const std::string& host, int port, std::chrono::milliseconds wait) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool ok = false;
  for (addrinfo* a = found; a != nullptr && !ok; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      ok = poll(&p, 1, static_cast<int>(wait.count())) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
           err == 0;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return ok;
}

// world_size 1: every collective is the identity; no store, no sockets.
class LocalGroup final : public Group {
 public:
  LocalGroup() : Group(0, 1) {}
  std::string backend() const override { return "local"; }
  Status AllReduceSum(std::vector<at::Tensor>&) override { return Status::Ok(); }
  Status BroadcastTensors(std::vector<at::Tensor>&) override { return Status::Ok(); }
  Status AllReduce(std::vector<double>&, HostReduce) override { return Status::Ok(); }
  Status Barrier() override { return Status::Ok(); }
};

}  // namespace

Status Validate(const GroupOptions& o) {
  if (o.world_size < 1) return InvalidArgument("process group: world_size must be >= 1, got " + std::to_string(o.world_size));
  if (o.rank < 0 || o.rank >= o.world_size)
    return InvalidArgument("process group: rank " + std::to_string(o.rank) + " outside [0, world_size = " +
                           std::to_string(o.world_size) + ")");
  if (o.timeout.count() <= 0) return InvalidArgument("process group: timeout must be > 0");
  if (o.connect_timeout.count() <= 0) return InvalidArgument("process group: connect_timeout must be > 0");
  if (o.world_size > 1 && !o.store) {
    if (o.host.empty()) return InvalidArgument("process group: host (where rank 0 listens) is empty");
    if (o.port < 1 || o.port > 65535)
      return InvalidArgument("process group: port must be in [1, 65535] (rank 0's rendezvous port), got " +
                             std::to_string(o.port));
  }
  if (!o.device.is_cpu() && !o.device.is_cuda())
    return InvalidArgument("process group: device " + o.device.str() + " is neither CPU nor CUDA");
  return Status::Ok();
}

Group::Group(int rank, int world_size, c10::intrusive_ptr<c10d::Store> store)
    : rank_(rank), world_size_(world_size), store_(std::move(store)) {}

Group::~Group() = default;

// Message n is the store's key tandem/broadcast/<n>; the last rank to read
// it deletes it (the store holds one step's message at a time).
Status Group::Broadcast(std::string& bytes, std::chrono::milliseconds timeout) {
  if (world_size_ == 1) return Status::Ok();
  if (!store_) return FailedPrecondition("broadcast: this group has no store");
  const std::string key = "tandem/broadcast/" + std::to_string(broadcasts_++);
  try {
    if (rank_ == 0) {
      store_->set(key, std::vector<uint8_t>(bytes.begin(), bytes.end()));
      return Status::Ok();
    }
    store_->wait({key}, timeout);
    const std::vector<uint8_t> got = store_->get(key);
    bytes.assign(got.begin(), got.end());
    if (store_->add(key + "/read", 1) == world_size_ - 1) {
      store_->deleteKey(key);
      store_->deleteKey(key + "/read");
    }
  } catch (const std::exception& e) {
    return internal::FromException("broadcast " + std::to_string(broadcasts_ - 1) + " from rank 0", e);
  }
  return Status::Ok();
}

std::string ExceptionMessage(const std::exception& e) {
  std::string m = e.what();
  // c10::Error appends a C++ backtrace after the message's first lines.
  if (const size_t cut = m.find("\nException raised from"); cut != std::string::npos) m.resize(cut);
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

StatusOr<c10::intrusive_ptr<c10d::Store>> ServeStore(int port, std::chrono::milliseconds timeout) {
  if (port < 1 || port > 65535) return InvalidArgument("store: port must be in [1, 65535], got " + std::to_string(port));
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(port);
  so.isServer = true;
  so.waitWorkers = false;
  so.timeout = timeout;
  try {
    return c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so));
  } catch (const std::exception& e) {
    return internal::FromException("store: serving on port " + std::to_string(port), e);
  }
}

StatusOr<c10::intrusive_ptr<c10d::Store>> JoinStore(const std::string& host, int port, std::chrono::milliseconds wait,
                                                    std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  if (port < 1 || port > 65535) return InvalidArgument("store: port must be in [1, 65535], got " + std::to_string(port));
  if (!Accepts(host, port, wait)) return NotFound("store: nothing accepts connections on " + where);
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(port);
  so.isServer = false;
  so.waitWorkers = false;
  so.timeout = timeout;
  try {
    return c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<c10d::TCPStore>(host, so));
  } catch (const std::exception& e) {
    return internal::FromException("store: joining " + where, e);
  }
}

StatusOr<std::unique_ptr<Group>> Group::Connect(const GroupOptions& options) {
  TANDEM_RETURN_IF_ERROR(Validate(options));
  if (options.world_size == 1) return std::unique_ptr<Group>(new LocalGroup());
  const std::string where = "process group rank " + std::to_string(options.rank) + "/" +
                            std::to_string(options.world_size) +
                            (options.store ? std::string(" via the caller's store")
                                           : " via " + options.host + ":" + std::to_string(options.port));
  if (options.device.is_cuda()) {
    TANDEM_ASSIGN_OR_RETURN(auto group, internal::ConnectNccl(options), where);
    return group;
  }
  TANDEM_ASSIGN_OR_RETURN(auto group, internal::ConnectGloo(options), where);
  return group;
}

namespace internal {

#if !TANDEM_WITH_GLOO
StatusOr<std::unique_ptr<Group>> ConnectGloo(const GroupOptions&) {
  return FailedPrecondition(
      "gloo (the CPU collectives) is not in this build: its headers were not found when it was configured "
      "(Debian: apt-get install libgloo-dev, then re-run cmake)");
}
#endif
#if !TANDEM_WITH_NCCL
StatusOr<std::unique_ptr<Group>> ConnectNccl(const GroupOptions&) {
  return FailedPrecondition(
      "NCCL (the CUDA collectives) is not in this build: it needs a CUDA build (TANDEM_WITH_CUDA) that found "
      "nccl.h and libnccl (TANDEM_NCCL_ROOT)");
}
#endif

StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(const GroupOptions& o) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + o.connect_timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(o.port);
  so.isServer = o.rank == 0;
  so.numWorkers = static_cast<size_t>(o.world_size);
  so.waitWorkers = false;  // counted below: LibTorch 1.13's wait gives up silently at the timeout
  // A rank may start before rank 0 listens: connect again until the deadline.
  c10::intrusive_ptr<c10d::Store> store = o.store;
  while (!store) {
    if (o.rank != 0 && !Accepts(o.host, o.port, std::chrono::milliseconds(250))) {
      if (Clock::now() >= deadline)
        return DeadlineExceeded("rendezvous: nothing accepted a connection on " + o.host + ":" +
                                std::to_string(o.port) + " within " + std::to_string(o.connect_timeout.count()) +
                                " ms (is rank 0 up?)");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    so.timeout = left();
    try {
      store = c10::make_intrusive<c10d::TCPStore>(o.host, so);
      break;
    } catch (const std::exception& e) {
      if (o.rank == 0 || Clock::now() >= deadline) {
        const Status s = FromException(o.rank == 0 ? "rendezvous: serving the store on port " + std::to_string(o.port)
                                                   : "rendezvous: joining rank 0's store",
                                       e);
        return o.rank == 0 ? s
                           : DeadlineExceeded(s.message() + " (retried for " + std::to_string(o.connect_timeout.count()) +
                                              " ms)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  // Every rank counts itself in and waits for the others.
  const std::string key = "tandem/joined";
  try {
    int64_t joined = store->add(key, 1);
    // More than world_size: the group behind this port formed without us
    // (a rank restarted while the other ranks' earlier group still lives).
    if (joined > o.world_size)
      return Unavailable("rendezvous: the group on " + o.host + ":" + std::to_string(o.port) +
                         " has formed already (its ranks are of an earlier start); wait for a new rank 0");
    while (joined < o.world_size) {
      if (Clock::now() >= deadline)
        return DeadlineExceeded("rendezvous: " + std::to_string(joined) + " of " + std::to_string(o.world_size) +
                                " ranks joined within " + std::to_string(o.connect_timeout.count()) + " ms");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      joined = store->add(key, 0);
    }
    store->setTimeout(o.connect_timeout);  // for the backend's own rendezvous through it
  } catch (const std::exception& e) {
    return FromException("rendezvous: waiting for the ranks", e);
  }
  return store;
}

Status FromException(const std::string& what, const std::exception& e) {
  const std::string m = ExceptionMessage(e);
  const bool timed_out = m.find("imed out") != std::string::npos || m.find("imeout") != std::string::npos;
  return timed_out ? DeadlineExceeded(what + ": " + m) : Unavailable(what + ": " + m);
}

StatusOr<std::vector<Bucket>> MakeBuckets(const std::vector<at::Tensor>& tensors, c10::Device device) {
  std::map<at::ScalarType, size_t> index;
  std::vector<Bucket> buckets;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    const std::string name = "tensor " + std::to_string(i);
    if (!t.defined()) return InvalidArgument(name + " is undefined");
    if (!at::isFloatingType(t.scalar_type())) return InvalidArgument(name + " is not floating point");
    if (t.device() != device)
      return InvalidArgument(name + " is on " + t.device().str() + ", the group's device is " + device.str());
    auto [it, fresh] = index.emplace(t.scalar_type(), buckets.size());
    if (fresh) buckets.emplace_back();
    buckets[it->second].members.push_back(i);
  }
  for (Bucket& b : buckets) {
    if (b.members.size() == 1 && tensors[b.members[0]].is_contiguous()) {
      b.flat = tensors[b.members[0]].view({-1});
      b.aliased = true;
      continue;
    }
    std::vector<at::Tensor> parts;
    for (const size_t i : b.members) parts.push_back(tensors[i].reshape({-1}));
    b.flat = at::cat(parts);
  }
  return buckets;
}

StatusOr<std::vector<at::Tensor>> AsBytes(const std::vector<at::Tensor>& tensors, c10::Device device) {
  std::vector<at::Tensor> bytes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    const std::string name = "tensor " + std::to_string(i);
    if (!t.defined()) return InvalidArgument(name + " is undefined");
    if (!t.is_contiguous()) return InvalidArgument(name + " is not contiguous");
    if (t.device() != device)
      return InvalidArgument(name + " is on " + t.device().str() + ", the group's device is " + device.str());
    if (t.numel() > 0) bytes.push_back(t.view({-1}).view(at::kByte));
  }
  return bytes;
}

void Unbucket(const Bucket& b, std::vector<at::Tensor>& tensors) {
  if (b.aliased) return;
  int64_t offset = 0;
  for (const size_t i : b.members) {
    at::Tensor& t = tensors[i];
    t.copy_(b.flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

Status BrokenGuard::Check() const {
  if (first_.empty()) return Status::Ok();
  return FailedPrecondition("the process group is broken by an earlier failure (" + first_ + ")");
}

Status BrokenGuard::Fail(Status s) {
  if (first_.empty()) first_ = s.ToString();
  return s;
}

}  // namespace internal
}  // namespace tandem::collective
