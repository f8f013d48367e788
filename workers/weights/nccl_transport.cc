// The nccl transport (nccl_transport.h): a version's buffers broadcast from
// the publisher's thread to its readers' group.
#include "workers/weights/nccl_transport.h"

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <charconv>
#include <utility>

#include "workers/collective/group.h"
#include "workers/weights/cuda_vmm.h"
#include "workers/weights/parameter_manifest.h"
#include "workers/weights/weight_manifest.h"

namespace tandem::weights {
namespace {

using Clock = std::chrono::steady_clock;

// The store's keys (every one under tandem/weights/).
std::string ManifestKey(int64_t version) { return "tandem/weights/v" + std::to_string(version) + "/manifest"; }
constexpr char kSentKey[] = "tandem/weights/sent";
// The publisher's connect_timeout and timeout in ms: a reader waits no
// longer than the publisher would (it abandons a group that does not form,
// or a broadcast that fails, after those), plus slack.
constexpr char kConnectTimeoutKey[] = "tandem/weights/connect_timeout_ms";
constexpr char kTimeoutKey[] = "tandem/weights/timeout_ms";
c10::intrusive_ptr<c10d::Store> EpochStore(const c10::intrusive_ptr<c10d::Store>& store, int64_t epoch) {
  return c10::make_intrusive<c10d::PrefixStore>("tandem/weights/e" + std::to_string(epoch), store);
}

std::string AsText(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }
std::vector<uint8_t> AsBytes(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

std::optional<int64_t> ParseInt(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// --- the URI: HOST:PORT/e<EPOCH>/n<R>#v<VERSION>
struct Uri {
  std::string host;
  int port = 0;
  int64_t epoch = 0, readers = 0, version = 0;
  std::string ToString() const {
    return "nccl:" + host + ":" + std::to_string(port) + "/e" + std::to_string(epoch) + "/n" + std::to_string(readers) +
           "#v" + std::to_string(version);
  }
};

StatusOr<Uri> ParseUri(std::string_view s) {
  const std::string whole = "nccl:" + std::string(s);
  auto bad = [&](const std::string& why) {
    return InvalidArgument("load_weights: source " + whole + ": " + why +
                           " (expected nccl:HOST:PORT/e<EPOCH>/n<READERS>#v<VERSION>)");
  };
  const size_t hash = s.rfind("#v");
  if (hash == std::string_view::npos) return bad("no #v<VERSION>");
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos || slash > hash) return bad("no /e<EPOCH>");
  const std::string_view authority = s.substr(0, slash), path = s.substr(slash + 1, hash - slash - 1);
  const size_t colon = authority.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad("no HOST:PORT");
  Uri u;
  u.host = std::string(authority.substr(0, colon));
  const std::optional<int64_t> port = ParseInt(authority.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535) return bad("the port is not in [1, 65535]");
  u.port = static_cast<int>(*port);
  const size_t mid = path.find('/');
  if (mid == std::string_view::npos || path.substr(0, 1) != "e" || path.substr(mid + 1, 1) != "n")
    return bad("the path is not e<EPOCH>/n<READERS>");
  const std::optional<int64_t> epoch = ParseInt(path.substr(1, mid - 1));
  const std::optional<int64_t> readers = ParseInt(path.substr(mid + 2));
  const std::optional<int64_t> version = ParseInt(s.substr(hash + 2));
  if (!epoch || *epoch < 1) return bad("the epoch is not a number >= 1");
  if (!readers || *readers < 1 || *readers > 4096) return bad("the readers are not a number in [1, 4096]");
  if (!version || *version < 0) return bad("the version is not a number >= 0");
  u.epoch = *epoch;
  u.readers = *readers;
  u.version = *version;
  return u;
}

// --- the reader's side: memberships of the publishers' groups, one per
// (publisher, epoch, reader): kept for the next versions.
struct Membership {
  std::string key;  // HOST:PORT/e<EPOCH>
  c10::intrusive_ptr<c10d::Store> store;
  std::unique_ptr<collective::Group> group;
  int64_t last = -1;  // the last version received
  bool busy = false;
};

class Memberships {
 public:
  // One this load may use (idle, of that group, behind `version`), or a new
  // one to join (group null). Marked busy until Return.
  std::shared_ptr<Membership> Take(const std::string& key, int64_t version) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::shared_ptr<Membership>& m : list_)
      if (m->key == key && !m->busy && m->last < version) {
        m->busy = true;
        return m;
      }
    auto m = std::make_shared<Membership>();
    m->key = key;
    m->busy = true;
    list_.push_back(m);
    return m;
  }
  // `keep`: the membership stays for the next versions; else it is dropped
  // (its group broke or never formed).
  void Return(const std::shared_ptr<Membership>& m, bool keep) {
    std::unique_ptr<collective::Group> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      m->busy = false;
      if (keep) return;
      std::erase(list_, m);
      dropped = std::move(m->group);
    }
  }
  // Memberships of this publisher's earlier epochs: their groups are over.
  void DropBefore(const std::string& publisher, int64_t epoch) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(list_, [&](const std::shared_ptr<Membership>& m) {
      if (m->busy || m->key.rfind(publisher + "/e", 0) != 0) return false;
      const std::optional<int64_t> e = ParseInt(std::string_view(m->key).substr(publisher.size() + 2));
      return e && *e < epoch;
    });
  }

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<Membership>> list_;
};

Memberships& ReaderMemberships() {
  static Memberships* m = new Memberships();  // process-wide; never destroyed (groups may outlive main)
  return *m;
}

class NcclSource final : public WeightSource {
 public:
  NcclSource(Uri uri, NcclReaderOptions options) : uri_(std::move(uri)), options_(options) {}

  Status LoadParameters(const model::ParameterSet& params) override {
    const std::string what = "load_weights from " + Describe();
    if (params.buffers().empty()) return InvalidArgument(what + ": the reader has no parameters");
    TANDEM_ASSIGN_OR_RETURN(c10::intrusive_ptr<c10d::Store> store,
                            collective::JoinStore(uri_.host, uri_.port, std::chrono::seconds(2), options_.timeout),
                            what + " (the publisher is gone)");
    TANDEM_ASSIGN_OR_RETURN(const WeightManifest manifest, ReadManifest(*store, uri_.version, what));
    BoundByPublisher(*store);
    TANDEM_RETURN_IF_ERROR(CheckReaderMatches(manifest, params), what);

    const std::string publisher = uri_.host + ":" + std::to_string(uri_.port);
    ReaderMemberships().DropBefore(publisher, uri_.epoch);
    std::shared_ptr<Membership> m = ReaderMemberships().Take(publisher + "/e" + std::to_string(uri_.epoch), uri_.version);
    const at::Device device = params.buffers()[0].device();
    Status st = m->group ? Status::Ok() : Join(*m, std::move(store), device);
    if (st.ok()) st = Receive(*m, manifest, params, device);
    if (st.ok()) m->last = uri_.version;
    ReaderMemberships().Return(m, st.ok() || st.code() == StatusCode::kNotFound);
    return st.WithContext(what);
  }
  std::string Describe() const override { return uri_.ToString(); }
  std::optional<int64_t> version() const override { return uri_.version; }

 private:
  // The version's manifest, once more checked to be the one the URI names.
  static StatusOr<WeightManifest> ReadManifest(c10d::Store& store, int64_t version, const std::string& what) {
    std::string text;
    try {
      if (store.check({kSentKey})) {
        const std::optional<int64_t> sent = ParseInt(AsText(store.get(kSentKey)));
        if (sent && *sent >= version)
          return NotFound(what + ": version " + std::to_string(version) +
                          " was sent already, to the readers of its group (a late reader loads the durable copy)");
      }
      if (!store.check({ManifestKey(version)}))
        return NotFound(what + ": version " + std::to_string(version) + " is not published (replaced by a newer one)");
      text = AsText(store.get(ManifestKey(version)));
    } catch (const std::exception& e) {
      return Unavailable(what + ": the publisher's store: " + collective::ExceptionMessage(e));
    }
    StatusOr<WeightManifest> m = ParseWeightManifest(text);
    if (!m.ok()) return DataLoss(what + ": its manifest: " + m.status().message());
    if (m->version != version)
      return DataLoss(what + ": its manifest is of version " + std::to_string(m->version));
    return m;
  }

  // Caps this reader's waits at twice the publisher's (a group forms within
  // its connect_timeout of the first arrival, and the previous broadcast may
  // still take its timeout) plus 5 s, so that a reader never outwaits a
  // publisher that gave up: the publisher's teardown does not reach a reader
  // still connecting, and the default 300 s would hold its load as long.
  void BoundByPublisher(c10d::Store& store) {
    const auto cap = [&store](std::chrono::milliseconds& own, const char* key) {
      if (!store.check({key})) return;  // an older publisher
      const std::optional<int64_t> ms = ParseInt(AsText(store.get(key)));
      if (!ms || *ms <= 0) return;
      own = std::min(own, std::chrono::milliseconds(2 * std::min<int64_t>(*ms, int64_t{1} << 40) + 5000));
    };
    try {
      cap(options_.connect_timeout, kConnectTimeoutKey);
      cap(options_.timeout, kTimeoutKey);
    } catch (const std::exception&) {  // the store went away: the loads below report it
    }
  }

  Status Join(Membership& m, c10::intrusive_ptr<c10d::Store> store, at::Device device) {
    m.store = std::move(store);
    const c10::intrusive_ptr<c10d::Store> epoch = EpochStore(m.store, uri_.epoch);
    int64_t rank = 0;
    try {
      rank = epoch->add("arrived", 1);
    } catch (const std::exception& e) {
      return Unavailable("joining the group: " + collective::ExceptionMessage(e));
    }
    if (rank > uri_.readers)
      return Unavailable("the group of epoch " + std::to_string(uri_.epoch) + " has its " +
                         std::to_string(uri_.readers) + " readers already (this reader restarted?)");
    collective::GroupOptions o;
    o.rank = static_cast<int>(rank);
    o.world_size = static_cast<int>(uri_.readers) + 1;
    o.host = uri_.host;  // gloo's pairs use the interface that reaches it
    o.device = device;
    o.store = epoch;
    o.connect_timeout = options_.connect_timeout;
    o.timeout = options_.timeout;
    TANDEM_ASSIGN_OR_RETURN(m.group, collective::Group::Connect(o), "joining the group");
    return Status::Ok();
  }

  Status Receive(Membership& m, const WeightManifest& manifest, const model::ParameterSet& params, at::Device device) {
    std::string header;
    TANDEM_RETURN_IF_ERROR(m.group->Broadcast(header, options_.timeout), "waiting for the version");
    const std::optional<int64_t> sent = ParseInt(header);
    if (!sent) return DataLoss("the publisher sent \"" + header.substr(0, 32) + "\", not a version number");
    if (*sent != uri_.version) {
      // A newer version replaced ours before it was sent: take it in
      // (every rank receives every broadcast) and say so.
      TANDEM_ASSIGN_OR_RETURN(const WeightManifest newer, ReadManifest(*m.store, *sent, "version " + header));
      std::vector<at::Tensor> scratch = Scratch(newer, device);
      TANDEM_RETURN_IF_ERROR(m.group->BroadcastTensors(scratch));
      m.last = *sent;
      return NotFound("version " + std::to_string(uri_.version) + " was replaced by version " + header +
                      " before it was sent");
    }
    if (SameLayout(manifest, params)) {
      std::vector<at::Tensor> own = params.buffers();  // the reader's memory itself
      return m.group->BroadcastTensors(own);
    }
    std::vector<at::Tensor> scratch = Scratch(manifest, device);
    TANDEM_RETURN_IF_ERROR(m.group->BroadcastTensors(scratch));
    std::vector<const std::byte*> bytes;
    for (const at::Tensor& t : scratch) bytes.push_back(static_cast<const std::byte*>(t.data_ptr()));
    TANDEM_RETURN_IF_ERROR(CopyIntoParameters(manifest, bytes, params, device));
    if (device.is_cuda()) {
      TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceCopier> copier, DeviceCopier::Create(device.index()));
      TANDEM_RETURN_IF_ERROR(copier->SynchronizeDevice());
    }
    return Status::Ok();
  }

  static std::vector<at::Tensor> Scratch(const WeightManifest& m, at::Device device) {
    std::vector<at::Tensor> scratch;
    for (const WeightManifest::Buffer& b : m.buffers)
      scratch.push_back(at::empty({static_cast<int64_t>(b.bytes)}, at::TensorOptions().dtype(at::kByte).device(device)));
    return scratch;
  }

  Uri uri_;
  NcclReaderOptions options_;
};

}  // namespace

// --- the publisher

NcclPublisher::NcclPublisher(NcclOptions options) : options_(std::move(options)) {}

StatusOr<std::unique_ptr<NcclPublisher>> NcclPublisher::Create(NcclOptions options) {
  if (options.readers < 1) return InvalidArgument("nccl publisher: readers must be >= 1");
  if (options.host.empty()) return InvalidArgument("nccl publisher: host (how readers reach it) is empty");
  if (options.connect_timeout.count() <= 0 || options.timeout.count() <= 0)
    return InvalidArgument("nccl publisher: timeouts must be > 0");
  std::unique_ptr<NcclPublisher> p(new NcclPublisher(std::move(options)));
  TANDEM_ASSIGN_OR_RETURN(p->store_, collective::ServeStore(p->options_.port, p->options_.timeout),
                          "nccl publisher");
  try {
    p->store_->set(kConnectTimeoutKey, AsBytes(std::to_string(p->options_.connect_timeout.count())));
    p->store_->set(kTimeoutKey, AsBytes(std::to_string(p->options_.timeout.count())));
  } catch (const std::exception& e) {
    return Unavailable("nccl publisher: its store: " + collective::ExceptionMessage(e));
  }
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

NcclPublisher::~NcclPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

StatusOr<std::string> NcclPublisher::Publish(int64_t version, const model::ParameterSet& params) {
  const std::string what = "publish_weights v" + std::to_string(version) + " over nccl";
  if (version <= last_version_)
    return FailedPrecondition("publish_weights: version " + std::to_string(version) + " after version " +
                              std::to_string(last_version_) + " (versions must grow)");
  TANDEM_ASSIGN_OR_RETURN(const WeightManifest manifest, ManifestOf(version, params), what);
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, options_.timeout, [&] { return !in_flight_.has_value(); }))
      return DeadlineExceeded(what + ": the broadcast of version " + std::to_string(in_flight_->number) +
                              " is still in flight after " + std::to_string(options_.timeout.count()) + " ms");
  }
  Version v;
  v.number = version;
  try {
    for (const at::Tensor& b : params.buffers()) {
      v.buffers.push_back(b.clone());  // on its device, ordered after the writes queued before
      v.bytes += static_cast<uint64_t>(b.nbytes());
    }
    store_->set(ManifestKey(version), AsBytes(ToJson(manifest).dump()));
  } catch (const std::exception& e) {
    return Internal(what + ": " + collective::ExceptionMessage(e));
  }
  std::string source;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_) {
      try {
        store_->deleteKey(ManifestKey(pending_->number));  // replaced before it was sent
      } catch (const std::exception&) {
      }
    }
    pending_ = std::move(v);
    source = Uri{options_.host, options_.port, epoch_, options_.readers, version}.ToString();
  }
  cv_.notify_all();
  last_version_ = version;
  return source;
}

uint64_t NcclPublisher::ExportedBytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return (pending_ ? pending_->bytes : 0) + (in_flight_ ? in_flight_->bytes : 0);
}

void NcclPublisher::ReleaseAll() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_) return;
  try {
    store_->deleteKey(ManifestKey(pending_->number));
  } catch (const std::exception&) {
  }
  pending_.reset();
}

int64_t NcclPublisher::sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sent_;
}

std::string NcclPublisher::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

void NcclPublisher::Fail(const std::string& what, const Status& why) {
  last_error_ = what + ": " + why.ToString();
  group_.reset();
  ++epoch_;
  if (pending_) {  // its readers were told the old epoch
    try {
      thread_store_->deleteKey(ManifestKey(pending_->number));
    } catch (const std::exception&) {
    }
    pending_.reset();
  }
}

// The thread's own store client: a TCPStore client is not for two threads.
void NcclPublisher::Run() {
  StatusOr<c10::intrusive_ptr<c10d::Store>> mine =
      collective::JoinStore("127.0.0.1", options_.port, std::chrono::seconds(5), options_.timeout);
  std::unique_lock<std::mutex> lock(mu_);
  if (!mine.ok()) {
    last_error_ = "nccl publisher: its own store: " + mine.status().ToString();
    return;
  }
  thread_store_ = *mine;
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || pending_.has_value(); });
    if (stop_) break;
    if (!group_) {
      const Status formed = FormGroup(lock);
      if (stop_) break;
      if (!formed.ok()) {
        Fail("epoch " + std::to_string(epoch_) + "'s group", formed);
        continue;
      }
    }
    if (!pending_) continue;  // released while the group formed
    in_flight_ = std::move(pending_);
    pending_.reset();
    const int64_t number = in_flight_->number;
    std::vector<at::Tensor> buffers = in_flight_->buffers;
    lock.unlock();
    std::string header = std::to_string(number);
    Status st = group_->Broadcast(header, options_.timeout);
    if (st.ok()) st = group_->BroadcastTensors(buffers);
    if (st.ok()) {
      try {
        thread_store_->set(kSentKey, AsBytes(header));
        thread_store_->deleteKey(ManifestKey(number));
      } catch (const std::exception& e) {
        st = Unavailable("recording the version sent: " + collective::ExceptionMessage(e));
      }
    }
    buffers.clear();
    lock.lock();
    if (st.ok()) {
      sent_ = number;
    } else {
      Fail("sending version " + header + " to epoch " + std::to_string(epoch_) + "'s group", st);
    }
    in_flight_.reset();
    cv_.notify_all();
  }
  group_.reset();
}

Status NcclPublisher::FormGroup(std::unique_lock<std::mutex>& lock) {
  const int64_t epoch = epoch_;
  const at::Device device = pending_->buffers.empty() ? at::Device(at::kCPU) : pending_->buffers[0].device();
  const c10::intrusive_ptr<c10d::Store> store = EpochStore(thread_store_, epoch);
  std::optional<Clock::time_point> first;
  for (;;) {
    int64_t arrived = 0;
    lock.unlock();
    try {
      arrived = store->add("arrived", 0);
    } catch (const std::exception& e) {
      lock.lock();
      return Unavailable("counting its readers: " + collective::ExceptionMessage(e));
    }
    lock.lock();
    if (stop_) return Status::Ok();
    if (arrived >= static_cast<int64_t>(options_.readers)) break;
    if (arrived > 0 && !first) first = Clock::now();
    if (first && Clock::now() - *first > options_.connect_timeout)
      return DeadlineExceeded(std::to_string(arrived) + " of " + std::to_string(options_.readers) +
                              " readers arrived within " + std::to_string(options_.connect_timeout.count()) + " ms");
    cv_.wait_for(lock, std::chrono::milliseconds(10));
  }
  collective::GroupOptions o;
  o.rank = 0;
  o.world_size = static_cast<int>(options_.readers) + 1;
  o.host = options_.host;
  o.device = device;
  o.store = store;
  o.connect_timeout = options_.connect_timeout;
  o.timeout = options_.timeout;
  lock.unlock();
  StatusOr<std::unique_ptr<collective::Group>> group = collective::Group::Connect(o);
  lock.lock();
  if (!group.ok()) return group.status();
  group_ = std::move(*group);
  return Status::Ok();
}

StatusOr<std::unique_ptr<WeightSource>> OpenNcclSource(std::string_view uri, NcclReaderOptions options) {
  TANDEM_ASSIGN_OR_RETURN(Uri u, ParseUri(uri));
  return std::unique_ptr<WeightSource>(new NcclSource(std::move(u), options));
}

}  // namespace tandem::weights
