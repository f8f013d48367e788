// tandemd's HTTP API; see api.h for the routes and docs/api.md for bodies.
#include "orchestrator/daemon/api.h"

#include <functional>
#include <optional>
#include <sstream>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/bounded_json.h"
#include "common/log.h"
#include "common/task_file.h"

namespace tandem::daemon {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kVersion = "0.1.0";

std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  std::string p;
  while (std::getline(ss, p, '/'))
    if (!p.empty()) parts.push_back(p);
  return parts;
}

std::string_view ErrorCodeFor(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument: return "invalid_spec";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kResourceExhausted: return TaskLimitOf(st) != TaskLimitKind::kNone ? "task_limit" : "does_not_fit";
    case StatusCode::kPermissionDenied: return "forbidden";
    case StatusCode::kUnavailable: return IsJournalUnavailable(st) ? "journal_unavailable" : "unavailable";
    default: return "internal";
  }
}

// "a.b: expected x\nc: y" -> [{"path":"a.b","message":"expected x"}, ...]
json DetailsOf(const std::string& message) {
  json out = json::array();
  std::stringstream ss(message);
  std::string line;
  while (std::getline(ss, line)) {
    const size_t sep = line.find(": ");
    if (sep == std::string::npos) out.push_back({{"path", ""}, {"message", line}});
    else out.push_back({{"path", line.substr(0, sep)}, {"message", line.substr(sep + 2)}});
  }
  return out;
}

// Reads `file` from `offset` in 64 KiB chunks, handing each to `take`, while
// the client keeps up with what it was sent (the streams' back-pressure).
// kYield: this io turn's share was read and more may follow; the caller
// posts itself to read on, so that streams of a long file (a history
// replayed to 8 clients: 16 MiB each, parsed line by line) hold the io
// thread for a few milliseconds at a time, and a request waits for one
// round of them per step it takes (accept, read, answer).
enum class FileRead { kAtEnd, kBacklogged, kClosed, kYield };
constexpr size_t kReadPerTurn = 32 * 1024;
FileRead ReadWhileDrained(const fs::path& file, uint64_t& offset, Exchange& ex,
                          const std::function<void(std::string_view)>& take) {
  // A task may have replaced the file by a FIFO or a symlink
  // (common/task_file.h): that reads as nothing.
  auto fd = OpenTaskFile(file);
  if (!fd.ok()) return FileRead::kAtEnd;
  constexpr size_t kChunk = 16 * 1024;
  for (size_t turn = 0; !ex.backlogged(); turn += kChunk) {
    if (turn >= kReadPerTurn) return FileRead::kYield;
    auto chunk = ReadAt(fd->get(), offset, kChunk, file);
    if (!chunk.ok() || chunk->empty()) break;
    offset += chunk->size();
    take(*chunk);
    if (ex.closed()) return FileRead::kClosed;
  }
  return ex.backlogged() ? FileRead::kBacklogged : FileRead::kAtEnd;
}

// Follows one task's output file, in chunks, until the task has ended and the
// file is drained (or the client goes away). Reads only as the client takes
// the bytes (Exchange::backlogged / OnDrain): a follower that does not read
// holds no more than the stream's bound, however big the file grows.
class LogFollower : public std::enable_shared_from_this<LogFollower> {
 public:
  LogFollower(boost::asio::io_context& io, JobManager& jobs, std::string job_id, std::string task,
              fs::path file, bool follow, std::shared_ptr<Exchange> ex)
      : timer_(io), jobs_(jobs), job_id_(std::move(job_id)), task_(std::move(task)),
        file_(std::move(file)), follow_(follow), ex_(std::move(ex)) {}

  void Start() {
    ex_->BeginStream("text/plain; charset=utf-8");
    Pump();
  }

 private:
  void Pump() {
    if (ex_->closed()) return;
    switch (ReadWhileDrained(file_, offset_, *ex_, [this](std::string_view b) { ex_->Write(std::string(b)); })) {
      case FileRead::kClosed: return;
      // The client has not taken what it has: read on when it does.
      case FileRead::kBacklogged: return ex_->OnDrain([self = shared_from_this()] { self->Pump(); });
      case FileRead::kYield: return boost::asio::post(timer_.get_executor(), [self = shared_from_this()] { self->Pump(); });
      case FileRead::kAtEnd: break;
    }
    const Job* job = jobs_.Find(job_id_);
    const Task* t = job ? job->FindTask(task_) : nullptr;
    const bool ended = !t || IsTerminal(t->state);
    if (!follow_ || ended) {
      // One more read after the end was seen, so the last bytes are not lost.
      if (follow_ && !final_pass_) { final_pass_ = true; return Pump(); }
      return ex_->End();
    }
    timer_.expires_after(std::chrono::milliseconds(100));
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->Pump();
    });
  }

  boost::asio::steady_timer timer_;
  JobManager& jobs_;
  std::string job_id_, task_;
  fs::path file_;
  bool follow_;
  bool final_pass_ = false;
  std::shared_ptr<Exchange> ex_;
  uint64_t offset_ = 0;
};

std::string SseEvent(uint64_t seq, const std::string& type, const json& body) {
  return "id: " + std::to_string(seq) + "\nevent: " + type + "\ndata: " +
         body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

// GET /v1/jobs/{id}/events: the job's history from events.jsonl, read as the
// client takes it, then (following) its live events. The file is read in
// shares of kReadPerTurn per io turn, and the read that reaches its end and
// the live subscription happen in the same turn: the daemon writes each
// event's line before it publishes it, so nothing is missed or repeated.
// Live events are queued; a client over the stream's bound is dropped.
class EventStream : public std::enable_shared_from_this<EventStream> {
 public:
  EventStream(boost::asio::io_context& io, JobManager& jobs, std::string job_id, fs::path file, bool follow,
              std::shared_ptr<Exchange> ex)
      : io_(io), jobs_(jobs), job_id_(std::move(job_id)), file_(std::move(file)), follow_(follow), ex_(std::move(ex)) {}

  void Start() {
    ex_->BeginStream("text/event-stream");
    std::weak_ptr<EventStream> weak = shared_from_this();
    ex_->OnClose([weak] {
      if (auto self = weak.lock()) self->StopLive();
    });
    Replay();
  }

 private:
  static constexpr size_t kMaxLineBytes = 1024 * 1024;  // longer lines are not events: skipped

  void Replay() {
    if (ex_->closed()) return;
    switch (ReadWhileDrained(file_, offset_, *ex_, [this](std::string_view b) { TakeBytes(b); })) {
      case FileRead::kClosed: return;
      case FileRead::kBacklogged: return ex_->OnDrain([self = shared_from_this()] { self->Replay(); });
      case FileRead::kYield: return boost::asio::post(io_, [self = shared_from_this()] { self->Replay(); });
      case FileRead::kAtEnd: break;
    }
    // The end of the file: a last line without its newline counts too.
    if (!partial_.empty() && !skipping_) EmitLine(partial_);
    partial_.clear();
    skipping_ = false;
    if (skipped_ > 0) {
      log::Debug("http", "events.jsonl lines that are not events skipped job={} skipped={}", job_id_, skipped_);
      ex_->Write(": skipped " + std::to_string(skipped_) + " lines of events.jsonl that are not events\n\n");
    }
    const Job* job = jobs_.Find(job_id_);
    if (!follow_ || !job || IsTerminal(job->state)) return ex_->End();
    Subscribe();
  }

  void TakeBytes(std::string_view bytes) {
    while (!bytes.empty()) {
      const size_t nl = bytes.find('\n');
      const std::string_view piece = bytes.substr(0, nl);
      if (!skipping_) {
        if (partial_.size() + piece.size() > kMaxLineBytes) {
          skipping_ = true;
          partial_.clear();
          ++skipped_;
        } else {
          partial_.append(piece);
        }
      }
      if (nl == std::string_view::npos) return;
      if (!skipping_) EmitLine(partial_);
      partial_.clear();
      skipping_ = false;
      bytes.remove_prefix(nl + 1);
    }
  }

  void EmitLine(const std::string& line) {
    if (line.empty()) return;
    std::string event = SseEventOfLine(line);
    if (event.empty()) { ++skipped_; return; }
    ex_->Write(std::move(event));
  }

  // The subscription holds the stream until StopLive (or the job manager's end).
  void Subscribe() {
    token_ = jobs_.Subscribe([self = shared_from_this()](const Event& ev) { self->OnLive(ev); });
  }

  void OnLive(const Event& ev) {
    if (ex_->closed()) return StopLive();
    try {
      const json& b = ev.body;
      auto job = b.find("job");
      if (job == b.end()) return;
      const bool mine = (job->is_string() && *job == job_id_) ||
                        (job->is_object() && job->contains("id") && (*job)["id"].is_string() &&
                         (*job)["id"] == job_id_);
      if (!mine) return;
      json out = b;
      if (out["job"].is_object()) out["job"] = job_id_;
      const auto type = b.find("type");
      const std::string type_text = type != b.end() && type->is_string() ? type->get<std::string>() : "event";
      ex_->Write(SseEvent(ev.seq, type_text, out));
      const auto state = b.find("state");
      if (type_text == "job_state" && state != b.end() && state->is_string() &&
          IsTerminal(ParseJobState(state->get<std::string>()).value_or(JobState::kPending))) {
        ex_->End();
        StopLive();
      }
    } catch (const std::exception& e) {
      log::Error("http", "event stream failed job={} error={}", job_id_, e.what());
      ex_->End();
      StopLive();
    }
  }

  // Ends the live part; the stream is freed once nothing refers to it.
  void StopLive() {
    if (token_) jobs_.Unsubscribe(*token_);
    token_.reset();
  }

  boost::asio::io_context& io_;
  JobManager& jobs_;
  std::string job_id_;
  fs::path file_;
  bool follow_;
  std::shared_ptr<Exchange> ex_;
  std::optional<uint64_t> token_;
  uint64_t offset_ = 0;
  std::string partial_;  // the line read so far
  bool skipping_ = false;  // in a line over kMaxLineBytes
  size_t skipped_ = 0;
};

// The method as a metric label: one of HTTP's, else "other" (a label value
// per made-up method would grow /metrics without bound).
std::string MethodLabel(const std::string& method) {
  for (const char* m : {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"})
    if (method == m) return method;
  return "other";
}

}  // namespace

// The daemon writes these lines, but the job's tasks can write the file too:
// an object, "seq" an integer >= 0 and "type" a one-line string when present.
std::string SseEventOfLine(std::string_view line) {
  auto ev = ParseJsonBounded(line);
  if (!ev.ok() || !ev->is_object()) return "";
  uint64_t seq = 0;
  std::string type = "event";
  if (auto it = ev->find("seq"); it != ev->end()) {
    if (!it->is_number_unsigned()) return "";
    seq = it->get<uint64_t>();
  }
  if (auto it = ev->find("type"); it != ev->end()) {
    if (!it->is_string()) return "";
    type = it->get<std::string>();
    // A type is one SSE field: no line breaks.
    if (type.find_first_of("\r\n") != std::string::npos) return "";
  }
  return SseEvent(seq, type, *ev);
}

int HttpStatusFor(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kResourceExhausted: return TaskLimitOf(st) == TaskLimitKind::kDaemon ? 429 : 409;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

Api::Api(boost::asio::io_context& io, JobManager& jobs, HandoffService& handoff, DaemonMetrics& metrics)
    : io_(io), jobs_(jobs), handoff_(handoff), metrics_(metrics) {}

void Api::Handle(const HttpRequest& req, std::shared_ptr<Exchange> ex) {
  metrics_.http_requests->WithLabels({MethodLabel(req.method)}).Inc();
  const auto parts = SplitPath(req.path);
  const bool get = req.method == "GET", post = req.method == "POST";
  auto method_not_allowed = [&] { ex->RespondError(405, "method_not_allowed", req.method + " " + req.path); };

  if (req.path == "/healthz") {
    if (!get) return method_not_allowed();
    const double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    json health = {{"status", "ok"}, {"version", kVersion}, {"uptime_s", up}, {"jobs", jobs_.table().jobs.size()}};
    if (!containment_.is_null()) health["process_containment"] = containment_;
    return ex->RespondJson(200, health);
  }
  if (req.path == "/metrics") {
    if (!get) return method_not_allowed();
    return Metrics(ex);
  }
  if (parts.size() < 2 || parts[0] != "v1" || parts[1] != "jobs")
    return ex->RespondError(404, "not_found", "no route " + req.path);

  if (parts.size() == 2) {
    if (post) return Submit(req, ex);
    if (!get) return method_not_allowed();
    json list = json::array();
    auto want = req.query.find("state");
    for (const auto& j : jobs_.table().jobs)
      if (want == req.query.end() || ToString(j.state) == want->second) list.push_back(j.Summary());
    return ex->RespondJson(200, {{"jobs", list}});
  }
  const Job* job = jobs_.Find(parts[2]);
  if (!job) return ex->RespondError(404, "not_found", "no job " + parts[2]);
  if (parts.size() == 3) {
    if (!get) return method_not_allowed();
    return ex->RespondJson(200, job->ToJson());
  }
  if (parts.size() != 4) return ex->RespondError(404, "not_found", "no route " + req.path);
  const std::string& what = parts[3];
  if (what == "cancel") {
    if (!post) return method_not_allowed();
    // Answered once the cancel is durable (or refused: then nothing changed).
    return jobs_.Cancel(job->id, [this, ex, id = job->id](Status st) {
      const Job* j = jobs_.Find(id);
      if (st.ok() && !j) st = NotFound("no job " + id);
      if (!st.ok()) return ex->RespondError(HttpStatusFor(st), ErrorCodeFor(st), st.message());
      ex->RespondJson(202, j->Summary());
    });
  }
  if (what == "phase") {
    if (!post) return method_not_allowed();
    return Phase(*job, req, ex);
  }
  if (!get) return method_not_allowed();
  if (what == "residency") {
    auto r = handoff_.Residency(job->id);
    if (!r.ok()) return ex->RespondError(HttpStatusFor(r.status()), ErrorCodeFor(r.status()), r.status().message());
    return ex->RespondJson(200, *r);
  }
  if (what == "tasks") {
    json tasks = json::array();
    for (const auto& t : job->tasks) tasks.push_back(t.ToJson());
    return ex->RespondJson(200, {{"tasks", tasks}});
  }
  if (what == "logs") return Logs(*job, req, ex);
  if (what == "events") return Events(*job, req, ex);
  return ex->RespondError(404, "not_found", "no route " + req.path);
}

void Api::Submit(const HttpRequest& req, std::shared_ptr<Exchange> ex) {
  auto spec = ParseJsonBounded<nlohmann::ordered_json>(req.body);
  if (!spec.ok())
    return ex->RespondError(400, "invalid_json", "request body: " + spec.status().message());
  jobs_.Submit(*spec, [ex](StatusOr<json> result) {
    if (!result.ok()) {
      const Status& st = result.status();
      json details = st.code() == StatusCode::kInvalidArgument ? DetailsOf(st.message()) : json();
      return ex->RespondError(HttpStatusFor(st), ErrorCodeFor(st), st.message(), details);
    }
    ex->RespondJson(201, *result);
  });
}

void Api::Phase(const Job& job, const HttpRequest& req, std::shared_ptr<Exchange> ex) {
  auto parsed = ParseJsonBounded(req.body);
  json body = parsed.ok() ? std::move(parsed).value() : json();
  if (!body.is_object() || !body.contains("phase") || !body["phase"].is_string())
    return ex->RespondError(400, "bad_request", "expected {\"phase\": \"rollout|train|sync|teacher[:ROLE]\", \"version\"?: N, \"group\"?: NAME}");
  const int64_t version = body.contains("version") && body["version"].is_number_integer() ? body["version"].get<int64_t>() : 0;
  const std::string group = body.contains("group") && body["group"].is_string() ? body["group"].get<std::string>() : "";
  handoff_.RequestPhase(job.id, group, body["phase"].get<std::string>(), version, [ex](StatusOr<json> r) {
    if (!r.ok()) return ex->RespondError(HttpStatusFor(r.status()), ErrorCodeFor(r.status()), r.status().message());
    ex->RespondJson(200, *r);
  });
}

void Api::Logs(const Job& job, const HttpRequest& req, std::shared_ptr<Exchange> ex) {
  std::string task = req.query.count("task") ? req.query.at("task") : "";
  if (task.empty() && job.tasks.size() == 1) task = job.tasks[0].name;
  const Task* t = task.empty() ? nullptr : job.FindTask(task);
  if (!t) {
    std::string names;
    for (const auto& x : job.tasks) names += (names.empty() ? "" : ", ") + x.name;
    return ex->RespondError(task.empty() ? 400 : 404, task.empty() ? "task_required" : "not_found",
                            "name a task with ?task=: one of " + names);
  }
  const std::string stream = req.query.count("stream") ? req.query.at("stream") : "stdout";
  if (stream != "stdout" && stream != "stderr")
    return ex->RespondError(400, "bad_request", "stream must be stdout or stderr");
  const bool follow = req.query.count("follow") && req.query.at("follow") != "0";
  fs::path file = fs::path(job.run_dir) / "tasks" / (t->name + (stream == "stdout" ? ".out" : ".err"));
  if (!fs::exists(file) && remote_tail_ && t->ref.is_object() && t->ref.value("backend", "") == "redis") {
    // Not on this machine: the last MiB from the node (docs/redis.md "Log tails"); no follow.
    auto tail = remote_tail_(t->ref, stream);
    if (!tail.ok()) return ex->RespondError(HttpStatusFor(tail.status()), "unavailable", tail.status().message());
    return ex->Respond(200, "text/plain; charset=utf-8", std::move(tail).value());
  }
  std::make_shared<LogFollower>(io_, jobs_, job.id, t->name, file, follow, ex)->Start();
}

void Api::Events(const Job& job, const HttpRequest& req, std::shared_ptr<Exchange> ex) {
  const bool follow = !(req.query.count("follow") && req.query.at("follow") == "0");
  std::make_shared<EventStream>(io_, jobs_, job.id, fs::path(job.run_dir) / "events.jsonl", follow, ex)->Start();
}

void Api::Metrics(std::shared_ptr<Exchange> ex) {
  std::map<std::string, double> jobs_by_state, tasks_by_state;
  for (auto s : {"pending", "running", "succeeded", "failed", "cancelled"}) jobs_by_state[s] = 0;
  for (auto s : {"pending", "running", "restarting", "succeeded", "failed", "cancelled", "lost"}) tasks_by_state[s] = 0;
  for (const auto& j : jobs_.table().jobs) {
    jobs_by_state[std::string(ToString(j.state))] += 1;
    for (const auto& t : j.tasks) tasks_by_state[std::string(ToString(t.state))] += 1;
  }
  for (const auto& [s, n] : jobs_by_state)
    metrics_.jobs->WithLabels({s}).Set(n);
  for (const auto& [s, n] : tasks_by_state)
    metrics_.tasks->WithLabels({s}).Set(n);
  ex->Respond(200, "text/plain; version=0.0.4; charset=utf-8", metrics_.registry.Render());
}

}  // namespace tandem::daemon
