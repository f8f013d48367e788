// tandemd's HTTP API; see api.h for the routes and docs/api.md for bodies.
#include "orchestrator/daemon/api.h"

#include <fstream>
#include <sstream>

#include <boost/asio/steady_timer.hpp>

#include "common/log.h"

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
    case StatusCode::kResourceExhausted: return "does_not_fit";
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

// Follows one task's output file, in chunks, until the task has ended and the
// file is drained (or the client goes away).
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
    std::ifstream in(file_, std::ios::binary);
    if (in) {
      in.seekg(static_cast<std::streamoff>(offset_));
      std::string buf(64 * 1024, '\0');
      while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        const auto n = static_cast<size_t>(in.gcount());
        if (n == 0) break;
        offset_ += n;
        ex_->Write(buf.substr(0, n));
      }
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

std::string SseEvent(const json& body) {
  return "id: " + std::to_string(body.value("seq", 0)) + "\nevent: " + body.value("type", "event") +
         "\ndata: " + body.dump() + "\n\n";
}

}  // namespace

int HttpStatusFor(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kResourceExhausted: return 409;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

Api::Api(boost::asio::io_context& io, JobManager& jobs, HandoffService& handoff, DaemonMetrics& metrics)
    : io_(io), jobs_(jobs), handoff_(handoff), metrics_(metrics) {}

void Api::Handle(const HttpRequest& req, std::shared_ptr<Exchange> ex) {
  metrics_.http_requests->WithLabels({req.method.size() <= 10 ? req.method : "other"}).Inc();
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
  auto spec = nlohmann::ordered_json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded())
    return ex->RespondError(400, "invalid_json", "request body is not valid JSON");
  jobs_.Submit(spec, [ex](StatusOr<json> result) {
    if (!result.ok()) {
      const Status& st = result.status();
      json details = st.code() == StatusCode::kInvalidArgument ? DetailsOf(st.message()) : json();
      return ex->RespondError(HttpStatusFor(st), ErrorCodeFor(st), st.message(), details);
    }
    ex->RespondJson(201, *result);
  });
}

void Api::Phase(const Job& job, const HttpRequest& req, std::shared_ptr<Exchange> ex) {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object() || !body.contains("phase") || !body["phase"].is_string())
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
  ex->BeginStream("text/event-stream");
  // History from the run dir, then live events (same io turn: nothing is missed).
  uint64_t last_seq = 0;
  std::ifstream in(fs::path(job.run_dir) / "events.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    json ev = json::parse(line, nullptr, false);
    if (ev.is_discarded()) continue;
    last_seq = std::max<uint64_t>(last_seq, ev.value("seq", 0));
    ex->Write(SseEvent(ev));
  }
  if (!follow || IsTerminal(job.state)) return ex->End();
  const std::string id = job.id;
  auto token = std::make_shared<uint64_t>(0);
  *token = jobs_.Subscribe([this, ex, id, token, last_seq](const Event& ev) {
    const json& b = ev.body;
    const bool mine = (b.contains("job") && b["job"].is_string() && b["job"] == id) ||
                      (b.contains("job") && b["job"].is_object() && b["job"].value("id", "") == id);
    if (!mine || ev.seq <= last_seq) return;
    json out = b;
    if (out["job"].is_object()) out["job"] = id;
    ex->Write(SseEvent(out));
    if (b.value("type", "") == "job_state" && IsTerminal(ParseJobState(b.value("state", "")).value_or(JobState::kPending))) {
      ex->End();
      jobs_.Unsubscribe(*token);
    }
  });
  ex->OnClose([this, token] { jobs_.Unsubscribe(*token); });
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
