// The handoff engine inside a real tandemd with real worker processes
// (issue #3 parts 2, 3, 5, 8): probe workers run RL cycles through the
// control socket; the API drives phases and reads residency; the ledger
// refuses what would not fit; and the faults: a worker that never answers, a
// worker killed in the middle of a release (restarted, brought back), bad
// control lines, and tandemd killed mid-handoff and restarted. In every case
// the job ends in a defined state, nothing is left running, and the logs say
// what happened.
#include <sys/socket.h>
#include <sys/un.h>

#include <map>
#include <set>

#include <gmock/gmock.h>

#include "common/control/control_token.h"
#include "tests/daemon/daemon_process.h"

namespace tandem::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1 << 20;


json Probe(std::vector<std::string> tags, std::vector<std::string> extra = {}, int replicas = 1, int gpus = 1) {
  std::vector<std::string> args;
  for (const auto& t : tags) {
    args.push_back("--tag");
    args.push_back(t);
  }
  for (const char* a : {"--cpu-capacity", "64MiB", "--start-released"}) args.push_back(a);
  args.insert(args.end(), extra.begin(), extra.end());
  return {{"worker", "probe"}, {"args", args}, {"replicas", replicas}, {"gpus_per_replica", gpus}};
}

// actor (2 GPUs), rollout x2 (1 GPU each), judge (teacher, 2 GPUs): 12 MiB
// per GPU, less than everything together, so every phase must hand off.
json ColocatedSpec(const std::string& name, std::vector<std::string> controller_args, json handoff = json::object()) {
  json actor = Probe({"params=2MiB:backup", "grads=2MiB", "optimizer=4MiB:backup", "activations=1MiB"},
                     controller_args, 1, 2);
  json rollout = Probe({"weights=2MiB:backup", "kv_cache=4MiB", "cuda_graph=1MiB:backup"}, {"--reconnect-ms", "20000"}, 2, 1);
  rollout["colocate_with"] = "actor";
  rollout["env"] = {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False"}};
  json judge = Probe({"weights=3MiB:backup", "kv_cache=1MiB"}, {"--reconnect-ms", "20000"}, 1, 2);
  judge["colocate_with"] = "actor";
  json h = {{"roles", {{"actor", "actor"}, {"rollout", "rollout"}, {"judge", "teacher"}}},
            {"gpu_memory", 12 * kMiB}, {"timeout_s", 30}};
  for (const auto& [k, v] : handoff.items()) h[k] = v;
  return {{"name", name}, {"backend", {{"kind", "local"}}}, {"devices", {{"count", 2}}},
          {"roles", {{"actor", actor}, {"rollout", rollout}, {"judge", judge}}}, {"handoff", h}};
}

class HandoffTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("tandem-handoff");
    d_ = std::make_unique<DaemonProcess>(dir_, std::vector<std::string>{"--gpus", "0,1", "--grace", "2"});
    d_->Start();
  }
  void TearDown() override {
    if (!::testing::Test::HasFailure()) fs::remove_all(dir_);
  }

  json Residency(const std::string& id) {
    auto r = d_->client().Request("GET", "/v1/jobs/" + id + "/residency");
    EXPECT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.status().ToString());
    return r.ok() ? r->Json() : json();
  }
  std::pair<int, json> Phase(const std::string& id, json body) {
    auto r = d_->client(60).Request("POST", "/v1/jobs/" + id + "/phase", body.dump());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::pair{r->status, r->Json()} : std::pair{0, json()};
  }
  // Waits until every handoff worker of the job is connected.
  bool WaitConnected(const std::string& id, size_t n) {
    return WaitFor([&] {
      json r = Residency(id);
      size_t connected = 0;
      for (const auto& g : r["groups"])
        for (const auto& w : g["workers"]) connected += w.value("connected", false) && w.value("hello", false);
      return connected == n;
    }, std::chrono::seconds(60));
  }
  pid_t WorkerPid(const std::string& id, const std::string& role, int rank) {
    const json r = Residency(id);
    for (const auto& g : r["groups"])
      for (const auto& w : g["workers"])
        if (w["role"] == role && w["rank"] == rank) return w.value("pid", 0);
    return 0;
  }
  std::string RunDir(const std::string& id) { return d_->Job(id).value("run_dir", ""); }
  // The control token of a task's first launch (the daemon's control.key).
  std::string Token(const std::string& job, const std::string& task) {
    return control::ControlToken(ReadFile(dir_ / "control.key").substr(0, 64), job, task, 1);
  }

  fs::path dir_;
  std::unique_ptr<DaemonProcess> d_;
};

// Replays residency.jsonl: the bytes per GPU never exceed the capacity, and no
// inference role gains memory while the actor holds optimizer or grads (H4);
// lines come in the order of the events that produced them.
void CheckResidencyInvariants(const fs::path& run_dir, uint64_t capacity) {
  std::map<std::pair<std::string, std::string>, uint64_t> held;  // (role/rank, tag) -> bytes
  std::map<std::string, std::vector<int>> gpus;
  size_t lines = 0;
  uint64_t event = 0;
  for (const json& l : JsonLines(run_dir / "residency.jsonl")) {
    ++lines;
    EXPECT_GE(l["event"].get<uint64_t>(), event) << "out of event order: " << l.dump();
    event = l["event"].get<uint64_t>();
    const std::string who = l["role"].get<std::string>() + "/" + std::to_string(l["rank"].get<int>());
    held[{who, l["tag"]}] = l["bytes"];
    gpus[who] = l["gpus"].get<std::vector<int>>();
    std::map<int, uint64_t> per_gpu;
    for (const auto& [k, b] : held)
      for (int g : gpus[k.first]) per_gpu[g] += b;
    for (const auto& [g, b] : per_gpu) EXPECT_LE(b, capacity) << "gpu " << g << " over capacity at " << l.dump();
    if (l["role"] != "actor" && l["delta"].get<int64_t>() > 0) {
      const uint64_t training = held[std::pair<std::string, std::string>{"actor/0", "optimizer"}] +
                                held[std::pair<std::string, std::string>{"actor/0", "grads"}];
      EXPECT_EQ(training, 0u)
          << "inference role resumed while the actor held training state: " << l.dump();
    }
    EXPECT_FALSE(l["allocator"].is_null());
  }
  EXPECT_GT(lines, 10u);
}

TEST_F(HandoffTest, ControllerRunsCyclesThatFollowTheChoreography) {
  const std::string id = d_->Submit(ColocatedSpec(
      "cycles", {"--controller", "--cycles", "2", "--phases", "rollout,teacher,train,sync"}, {{"controller", "actor"}}));
  ASSERT_EQ(d_->WaitJob(id, std::chrono::seconds(120)), "succeeded") << d_->log();
  const fs::path run = RunDir(id);
  std::vector<std::string> phases;
  for (const json& l : JsonLines(run / "handoff.jsonl")) {
    EXPECT_EQ(l["outcome"], "ok") << l.dump();
    if (phases.empty() || phases.back() != l["phase"]) phases.push_back(l["phase"]);
    if (l["role"] == "rollout") {
      EXPECT_EQ(l["allocator"]["PYTORCH_CUDA_ALLOC_CONF"], "expandable_segments:False");
    }
  }
  EXPECT_EQ(phases, (std::vector<std::string>{"ROLLOUT", "TEACHER(0)", "TRAIN", "SYNC(1)", "ROLLOUT", "TEACHER(0)",
                                              "TRAIN", "SYNC(2)"}));
  CheckResidencyInvariants(run, 12 * kMiB);
  // The workers were shut down by the daemon, cleanly, once the controller finished.
  const json job = d_->Job(id);
  for (const auto& t : job["tasks"]) EXPECT_EQ(t["state"], "succeeded") << t.dump();
  EXPECT_FALSE(fs::exists(dir_ / "handoff" / id)) << "the group's journal outlived its job";
}

TEST_F(HandoffTest, ApiDrivesPhasesAndReportsResidency) {
  const std::string id = d_->Submit(ColocatedSpec("api", {}));
  ASSERT_TRUE(WaitConnected(id, 4)) << d_->log();
  auto [st, body] = Phase(id, {{"phase", "rollout"}});
  ASSERT_EQ(st, 200) << body.dump();
  EXPECT_EQ(body["phase"], "ROLLOUT");
  json r = Residency(id);
  ASSERT_EQ(r["groups"].size(), 1u);
  const json& g = r["groups"][0];
  EXPECT_EQ(g["group"], "actor");
  EXPECT_EQ(g["phase"], "ROLLOUT");
  for (const auto& gpu : g["gpus"]) {
    EXPECT_EQ(gpu["resident"], 6 * kMiB + 1 * kMiB) << gpu.dump();  // one rollout's weights, kv_cache, cuda_graph
    EXPECT_EQ(gpu["capacity"], 12 * kMiB);
  }
  EXPECT_EQ(Phase(id, {{"phase", "dance"}}).first, 400);
  EXPECT_EQ(Phase(id, {{"phase", "sync"}}).first, 400) << "sync needs a version";
  EXPECT_EQ(Phase(id, {{"phase", "teacher:nobody"}}).first, 400);
  std::tie(st, body) = Phase(id, {{"phase", "train"}});
  ASSERT_EQ(st, 200) << body.dump();
  r = Residency(id);
  for (const auto& gpu : r["groups"][0]["gpus"]) {
    EXPECT_EQ(gpu["resident"], 8 * kMiB) << "params + grads + optimizer: " << gpu.dump();
    EXPECT_GE(gpu["peak"].get<uint64_t>(), 8 * kMiB);
  }
  std::tie(st, body) = Phase(id, {{"phase", "sync"}, {"version", 1}});
  ASSERT_EQ(st, 200) << body.dump();
  EXPECT_EQ(Residency(id)["groups"][0]["published_version"], 1);
  EXPECT_EQ(Phase(id, {{"phase", "sync"}, {"version", 1}}).first, 200) << "the phase it is in: answered at once";
  // The same through the CLI.
  const std::string cmd = (BinDir() / "tandem").string() + " --socket " + (dir_ / "tandemd.sock").string() +
                          " phase " + id + " rollout > " + (dir_ / "phase.out").string() + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << ReadFile(dir_ / "phase.out");
  EXPECT_NE(ReadFile(dir_ / "phase.out").find("actor: ROLLOUT reached in"), std::string::npos) << ReadFile(dir_ / "phase.out");
  EXPECT_NE(std::system(((BinDir() / "tandem").string() + " --socket " + (dir_ / "tandemd.sock").string() + " phase " +
                         id + " sync > /dev/null 2>&1").c_str()), 0) << "sync without --version is refused";
  auto c = d_->client().Request("POST", "/v1/jobs/" + id + "/cancel");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(d_->WaitJob(id), "cancelled");
}

// A refusal names GPU, roles and sizes in human units, and without
// on_fault "fail" it does not fail the job (issue #12 point 4): the job goes
// on, and the next request is heard.
TEST_F(HandoffTest, LedgerRefusesAResumeThatWouldNotFitAndTheJobGoesOn) {
  const std::string id = d_->Submit(ColocatedSpec("tight", {}, {{"gpu_memory", 5 * kMiB}}));
  ASSERT_TRUE(WaitConnected(id, 4)) << d_->log();
  auto [st, body] = Phase(id, {{"phase", "rollout"}});
  EXPECT_EQ(st, 409) << body.dump();
  const std::string msg = body["error"].value("message", "");
  EXPECT_NE(msg.find("would not fit"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gpu 0: "), std::string::npos) << msg;
  EXPECT_NE(msg.find(" MiB resuming > capacity 5.0 MiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rollout/0 weights=2.0 MiB"), std::string::npos) << msg;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(d_->JobState(id), "running") << d_->Job(id).dump();
  const json r = Residency(id);
  EXPECT_EQ(r["groups"][0]["mode"], "settled") << r.dump();
  // Heard again, and refused again for the same reason (not "the group failed").
  auto [st2, body2] = Phase(id, {{"phase", "train"}});
  EXPECT_EQ(st2, 409) << body2.dump();
  EXPECT_NE(body2["error"].value("message", "").find("would not fit"), std::string::npos) << body2.dump();
  bool refused = false;
  for (const json& l : JsonLines(RunDir(id) + "/handoff.jsonl")) refused |= l["outcome"] == "refused";
  EXPECT_TRUE(refused);
  ASSERT_TRUE(d_->client().Request("POST", "/v1/jobs/" + id + "/cancel").ok());
  EXPECT_EQ(d_->WaitJob(id), "cancelled");
}

// With on_fault "fail" given, the same refusal fails the job (issue #12
// point 4: the job's on_fault decides): the requester is told why, the job
// reports the ledger's message and no task is left running.
TEST_F(HandoffTest, LedgerRefusalFailsTheJobWhenOnFaultSaysFail) {
  const std::string id = d_->Submit(ColocatedSpec("tight-fail", {}, {{"gpu_memory", 5 * kMiB}, {"on_fault", "fail"}}));
  ASSERT_TRUE(WaitConnected(id, 4)) << d_->log();
  auto [st, body] = Phase(id, {{"phase", "rollout"}});
  EXPECT_EQ(st, 409) << body.dump();
  EXPECT_NE(body["error"].value("message", "").find("would not fit"), std::string::npos) << body.dump();
  EXPECT_EQ(d_->WaitJob(id), "failed") << d_->Job(id).dump();
  const json job = d_->Job(id);
  EXPECT_NE(job.dump().find("phase ROLLOUT refused: "), std::string::npos) << job.dump();
  for (const auto& t : job["tasks"]) EXPECT_NE(t["state"], "running") << job.dump();
}

// A worker in Python that says hello and then never answers.
constexpr const char* kSilentWorker = R"(
import json, os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(os.environ["TANDEM_CONTROL"][len("unix:"):])
s.sendall((json.dumps({"type": "hello", "protocol": 1, "job_id": os.environ["TANDEM_JOB_ID"],
    "task_id": os.environ["TANDEM_TASK_ID"], "token": os.environ["TANDEM_CONTROL_TOKEN"], "role": os.environ["TANDEM_ROLE"], "rank": int(os.environ["TANDEM_RANK"]),
    "devices": [0], "capabilities": [], "tags": [{"name": "weights", "bytes": 1048576, "backup": True}],
    "residency": {"tags": {"weights": 0}, "device": {"index": 0, "used": 0, "total": 67108864, "source": "pool"}}}) + "\n").encode())
time.sleep(3600)
)";

TEST_F(HandoffTest, WorkerThatNeverAnswersTimesOutAndFailsTheJob) {
  json spec = ColocatedSpec("silent", {}, {{"timeout_s", 1}});
  spec["roles"]["rollout"] = {{"command", {"python3", "-c", kSilentWorker}}, {"gpus_per_replica", 1}, {"replicas", 2},
                              {"colocate_with", "actor"}};
  const std::string id = d_->Submit(spec);
  ASSERT_TRUE(WaitConnected(id, 4)) << d_->log();
  auto [st, body] = Phase(id, {{"phase", "rollout"}});
  EXPECT_EQ(st, 409) << body.dump();
  EXPECT_NE(body.dump().find("timed out"), std::string::npos) << body.dump();
  EXPECT_EQ(d_->WaitJob(id), "failed");
  bool timeout = false;
  for (const json& l : JsonLines(RunDir(id) + "/handoff.jsonl")) timeout |= l["outcome"] == "timeout";
  EXPECT_TRUE(timeout);
  const json job = d_->Job(id);
  for (const auto& t : job["tasks"]) EXPECT_NE(t["state"], "running");
}

// The start of the Python workers below: connects to the control socket,
// says hello with two tags (2 and 4 MiB, weights backed up) and defines
// commands(), the commands after the welcome, and answer(m), which applies m
// to the held tags and acks it.
constexpr const char* kPyWorker = R"(
import json, os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(os.environ["TANDEM_CONTROL"][len("unix:"):])
sizes = json.loads(os.environ["PY_TAGS"]) if "PY_TAGS" in os.environ else {"weights": 2 << 20, "kv_cache": 4 << 20}
held = {t: 0 for t in sizes}
res = lambda: {"tags": dict(held), "device": {"index": 0, "used": sum(held.values()), "total": 64 << 20, "source": "pool"}}
send = lambda m: s.sendall((json.dumps(m) + "\n").encode())
send({"type": "hello", "protocol": 1, "job_id": os.environ["TANDEM_JOB_ID"], "task_id": os.environ["TANDEM_TASK_ID"],
      "token": os.environ["TANDEM_CONTROL_TOKEN"],
      "role": os.environ["TANDEM_ROLE"], "rank": int(os.environ["TANDEM_RANK"]), "devices": [0], "capabilities": [],
      "tags": [{"name": t, "bytes": b, "backup": t == "weights"} for t, b in sizes.items()], "residency": res()})
def commands():
    for line in s.makefile("r"):
        m = json.loads(line)
        if m["type"] != "welcome": yield m
def answer(m):
    for t in m.get("tags") or []:
        if m["type"] == "release": held[t] = 0
        if m["type"] == "resume": held[t] = sizes[t]
    send({"type": "ack", "id": m["id"], "command": m["type"], "residency": res()})
)";

// A Python worker whose release hangs while a flag file exists (the test
// kills it there, mid-release); without the flag it answers like a probe.
const std::string kHangingWorker = std::string(kPyWorker) + R"(
flag = sys.argv[1]
for m in commands():
    if m["type"] == "release" and os.path.exists(flag) and os.environ["TANDEM_RANK"] == "0":
        open(flag + ".pid", "w").write(str(os.getpid()))
        time.sleep(3600)
    answer(m)
    if m["type"] == "shutdown": break
)";

TEST_F(HandoffTest, WorkerKilledMidReleaseIsRestartedAndBroughtBack) {
  const fs::path flag = dir_ / "hang";
  std::ofstream(flag) << "1";
  json spec = ColocatedSpec("restart", {}, {{"on_fault", "restart"}});
  spec["roles"]["rollout"] = {{"command", {"python3", "-c", kHangingWorker, flag.string()}}, {"gpus_per_replica", 1},
                              {"replicas", 2}, {"colocate_with", "actor"}};
  const std::string id = d_->Submit(spec);
  ASSERT_TRUE(WaitConnected(id, 4)) << d_->log();
  ASSERT_EQ(Phase(id, {{"phase", "rollout"}}).first, 200);
  // TRAIN makes the rollouts release; one of them hangs in its release.
  std::thread train([&] {
    auto [st, body] = Phase(id, {{"phase", "train"}});
    EXPECT_EQ(st, 200) << body.dump();
  });
  ASSERT_TRUE(WaitFor([&] { return fs::exists(flag.string() + ".pid"); })) << d_->log();
  const pid_t hung = std::stoi(ReadFile(flag.string() + ".pid"));
  fs::remove(flag);
  ::kill(hung, SIGKILL);
  train.join();
  json r = Residency(id);
  EXPECT_EQ(r["groups"][0]["phase"], "TRAIN") << r.dump();
  EXPECT_EQ(r["groups"][0]["mode"], "settled") << r.dump();
  int restarts = 0;
  const json job = d_->Job(id);
  for (const auto& t : job["tasks"]) restarts += t.value("restarts", 0);
  EXPECT_EQ(restarts, 1);
  // Back to ROLLOUT: the restarted worker takes part like the others.
  EXPECT_EQ(Phase(id, {{"phase", "rollout"}}).first, 200);
  bool died = false;
  for (const json& l : JsonLines(RunDir(id) + "/handoff.jsonl")) died |= l["outcome"] == "died";
  EXPECT_TRUE(died) << "handoff.jsonl says the worker died mid-release";
  bool forgotten = false;
  for (const json& l : JsonLines(RunDir(id) + "/residency.jsonl")) forgotten |= l.value("note", "") == "worker died";
  EXPECT_TRUE(forgotten);
  ASSERT_TRUE(d_->client().Request("POST", "/v1/jobs/" + id + "/cancel").ok());
  EXPECT_EQ(d_->WaitJob(id), "cancelled");
  EXPECT_FALSE(ProcessAlive(hung));
}

// A Python rollout worker that answers like a probe and appends every
// command it gets to cmds.<rank>.<pid>.jsonl in its run dir.
const std::string kRecordingWorker = std::string(kPyWorker) + R"(
log = open("cmds.%s.%d.jsonl" % (os.environ["TANDEM_RANK"], os.getpid()), "a")
for m in commands():
    log.write(json.dumps(m) + "\n")
    log.flush()
    answer(m)
    if m["type"] == "shutdown": break
)";

// A rollout restarted after SYNC (issue #12 point 4) is brought back by
// recovery, which reloads the published version: by then release_exports has
// freed the actor's exports, so the reload must name the durable copy the
// actor was told about in publish_weights, never ipc:.
TEST_F(HandoffTest, RestartedReaderLoadsFromTheDurableCopyNotFreedExports) {
  json spec = ColocatedSpec("reader", {}, {{"on_fault", "restart"}});
  spec["roles"]["rollout"] = {{"command", {"python3", "-c", kRecordingWorker}}, {"gpus_per_replica", 1},
                              {"replicas", 2}, {"colocate_with", "actor"}};
  const std::string id = d_->Submit(spec);
  ASSERT_TRUE(WaitConnected(id, 4)) << d_->log();
  for (const json& phase : {json{{"phase", "rollout"}}, json{{"phase", "train"}}, json{{"phase", "sync"}, {"version", 1}},
                            json{{"phase", "rollout"}}}) {
    auto [st, body] = Phase(id, phase);
    ASSERT_EQ(st, 200) << phase.dump() << ": " << body.dump() << d_->log();
  }
  const fs::path run = RunDir(id);
  const pid_t first = WorkerPid(id, "rollout", 0);
  ASSERT_GT(first, 0);
  ::kill(first, SIGKILL);
  ASSERT_TRUE(WaitFor([&] {
    const json r = Residency(id);
    const pid_t now = WorkerPid(id, "rollout", 0);
    return now > 0 && now != first && r["groups"][0]["mode"] == "settled";
  }, std::chrono::seconds(60))) << Residency(id).dump() << d_->log();
  const pid_t second = WorkerPid(id, "rollout", 0);
  std::vector<json> loads;
  for (const json& m : JsonLines(run / ("cmds.0." + std::to_string(second) + ".jsonl")))
    if (m["type"] == "load_weights") loads.push_back(m);
  ASSERT_EQ(loads.size(), 1u) << "the restarted reader reloads version 1 once";
  EXPECT_EQ(loads[0]["version"], 1);
  EXPECT_EQ(loads[0]["source"], "file:" + (run / "weights" / "v1").string()) << loads[0].dump();
  // The SYNC itself loaded from the live exports, and told the actor where the durable copy goes.
  bool ipc = false;
  for (const json& m : JsonLines(run / ("cmds.0." + std::to_string(first) + ".jsonl")))
    ipc |= m["type"] == "load_weights" && m["source"] == "ipc:v1";
  EXPECT_TRUE(ipc);
  ASSERT_TRUE(d_->client().Request("POST", "/v1/jobs/" + id + "/cancel").ok());
  EXPECT_EQ(d_->WaitJob(id), "cancelled");
}

// An actor whose publish_weights ack names where it put the version
// (detail.source): the readers' load_weights of that SYNC are sent there.
const std::string kPublishingActor = std::string(kPyWorker) + R"(
for m in commands():
    if m["type"] == "publish_weights":
        send({"type": "ack", "id": m["id"], "command": m["type"], "residency": res(),
              "detail": {"source": "shm:/tandem-test-actor-v%d" % m["version"]}})
        continue
    answer(m)
    if m["type"] == "shutdown": break
)";

TEST_F(HandoffTest, ReadersLoadFromTheSourceThePublisherNamed) {
  json spec = ColocatedSpec("source", {});
  spec["roles"]["actor"] = {{"command", {"python3", "-c", kPublishingActor}}, {"gpus_per_replica", 2},
                            {"env", {{"PY_TAGS", json{{"params", 2 * kMiB}, {"grads", 2 * kMiB},
                                                      {"optimizer", 4 * kMiB}, {"activations", kMiB}}.dump()}}}};
  spec["roles"]["rollout"] = {{"command", {"python3", "-c", kRecordingWorker}}, {"gpus_per_replica", 1},
                              {"replicas", 2}, {"colocate_with", "actor"}};
  const std::string id = d_->Submit(spec);
  ASSERT_TRUE(WaitConnected(id, 4)) << d_->log();
  for (const json& phase : {json{{"phase", "rollout"}}, json{{"phase", "train"}}, json{{"phase", "sync"}, {"version", 3}}}) {
    auto [st, body] = Phase(id, phase);
    ASSERT_EQ(st, 200) << phase.dump() << ": " << body.dump() << d_->log();
  }
  int loads = 0;
  for (const auto& entry : fs::directory_iterator(RunDir(id))) {
    if (entry.path().filename().string().rfind("cmds.", 0) != 0) continue;
    for (const json& m : JsonLines(entry.path())) {
      if (m["type"] != "load_weights") continue;
      ++loads;
      EXPECT_EQ(m["source"], "shm:/tandem-test-actor-v3") << m.dump();
    }
  }
  EXPECT_EQ(loads, 2) << "both rollouts load version 3";
  ASSERT_TRUE(d_->client().Request("POST", "/v1/jobs/" + id + "/cancel").ok());
  EXPECT_EQ(d_->WaitJob(id), "cancelled");
}

// Raw control connections: nothing a client sends takes the daemon down.
int ConnectControl(const fs::path& sock) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}
void SendRaw(int fd, const std::string& s) { ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size())); }
json ReadLine(int fd) {
  std::string line;
  char c;
  while (::recv(fd, &c, 1, 0) == 1 && c != '\n') line += c;
  return json::parse(line, nullptr, false);
}

// A Python rollout worker that answers a command only once every rollout
// rank has received its own command of that stage (a barrier through files
// in argv[1]; argv[2] ranks): if the daemon waited for one worker's answer
// before sending the next worker its command, the barrier could not close,
// and after 5 s the worker answers anyway and leaves a "late" file.
const std::string kBarrierWorker = std::string(kPyWorker) + R"(
d, n, rank = sys.argv[1], int(sys.argv[2]), os.environ["TANDEM_RANK"]
k = 0
for m in commands():
    if m["type"] != "shutdown":
        k += 1
        open(f"{d}/r{rank}.c{k}", "w").close()
        deadline = time.time() + 5
        while not all(os.path.exists(f"{d}/r{r}.c{k}") for r in range(n)):
            if time.time() > deadline:
                open(f"{d}/late.r{rank}.c{k}.{m['type']}", "w").close()
                break
            time.sleep(0.002)
    answer(m)
    if m["type"] == "shutdown": break
)";

// The commands of one stage reach every worker of the stage before any of
// them has to answer (docs/benchmarks.md "Handoff control overhead": a
// stage costs one parallel round trip, not one per worker).
TEST_F(HandoffTest, StageCommandsReachEveryWorkerBeforeAnyAnswer) {
  const fs::path barrier = dir_ / "barrier";
  fs::create_directories(barrier);
  json spec = ColocatedSpec("barrier", {});
  spec["roles"]["rollout"] = {{"command", {"python3", "-c", kBarrierWorker, barrier.string(), "2"}},
                              {"gpus_per_replica", 1}, {"replicas", 2}, {"colocate_with", "actor"}};
  const std::string id = d_->Submit(spec);
  ASSERT_TRUE(WaitConnected(id, 4)) << d_->log();
  for (const json& phase : {json{{"phase", "rollout"}}, json{{"phase", "train"}}, json{{"phase", "sync"}, {"version", 1}},
                            json{{"phase", "rollout"}}}) {
    auto [st, body] = Phase(id, phase);
    ASSERT_EQ(st, 200) << phase.dump() << ": " << body.dump() << d_->log();
  }
  size_t received = 0;
  std::vector<std::string> late;
  for (const auto& e : fs::directory_iterator(barrier)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("late.", 0) == 0) late.push_back(name);
    else ++received;
  }
  EXPECT_GE(received, 2u * 6) << "each rollout got at least 6 commands over the four phases";
  EXPECT_TRUE(late.empty()) << "a worker waited 5 s for a stage's command to reach the other rank: " << late.front();
  auto c = d_->client().Request("POST", "/v1/jobs/" + id + "/cancel");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(d_->WaitJob(id), "cancelled");
}

TEST_F(HandoffTest, MalformedControlLinesAreAnsweredAndNeverFatal) {
  json spec = ColocatedSpec("malformed", {});
  spec["roles"]["sidecar"] = {{"command", {"sleep", "3600"}}};
  const std::string id = d_->Submit(spec);
  ASSERT_TRUE(WaitConnected(id, 4)) << d_->log();
  const fs::path sock = dir_ / "control.sock";
  {  // not a hello
    int fd = ConnectControl(sock);
    SendRaw(fd, "this is not json\n");
    EXPECT_EQ(ReadLine(fd)["code"], "malformed");
    ::close(fd);
  }
  {  // another version; an unknown job
    int fd = ConnectControl(sock);
    SendRaw(fd, R"({"type":"hello","protocol":2,"role":"x","rank":0})" "\n");
    EXPECT_EQ(ReadLine(fd)["code"], "unsupported_version");
    ::close(fd);
    fd = ConnectControl(sock);
    SendRaw(fd, R"({"type":"hello","protocol":1,"job_id":"nope","task_id":"nope.x.0","role":"x","rank":0,"token":"00"})" "\n");
    EXPECT_EQ(ReadLine(fd)["code"], "unauthenticated");
    ::close(fd);
  }
  {  // a plain task's identity: welcomed, takes no part; garbage is answered line by line
    int fd = ConnectControl(sock);
    json hello = {{"type", "hello"}, {"protocol", 1}, {"job_id", id}, {"task_id", id + ".sidecar.0"},
                  {"role", "sidecar"}, {"rank", 0}, {"devices", json::array()}, {"capabilities", json::array()},
                  {"tags", json::array()}, {"token", Token(id, id + ".sidecar.0")}};
    SendRaw(fd, hello.dump() + "\n");
    json w = ReadLine(fd);
    EXPECT_EQ(w["type"], "welcome") << w.dump();
    EXPECT_EQ(w["handoff"], false);
    SendRaw(fd, "{not json\n");
    EXPECT_EQ(ReadLine(fd)["code"], "malformed");
    SendRaw(fd, "[1,2,3]\n");
    EXPECT_EQ(ReadLine(fd)["code"], "malformed");
    SendRaw(fd, R"({"id":4})" "\n");
    EXPECT_EQ(ReadLine(fd)["code"], "malformed");
    SendRaw(fd, std::string(2 << 20, 'x') + "\n");
    EXPECT_EQ(ReadLine(fd)["code"], "line_too_long");
    SendRaw(fd, R"({"type":"dance","id":5})" "\n");
    json u = ReadLine(fd);
    EXPECT_EQ(u["code"], "unknown_command");
    EXPECT_EQ(u["id"], 5);
    SendRaw(fd, R"({"type":"request_phase","id":6,"phase":"train"})" "\n");
    EXPECT_EQ(ReadLine(fd)["code"], "failed_precondition");
    SendRaw(fd, R"({"type":"ack","id":123456789,"command":"release"})" "\n");  // an ack of nothing: ignored
    ::close(fd);
  }
  {  // a handoff worker's identity, taken by an impostor, with late and duplicate acks
    int fd = ConnectControl(sock);
    json hello = {{"type", "hello"}, {"protocol", 1}, {"job_id", id}, {"task_id", id + ".judge.0"}, {"role", "judge"},
                  {"rank", 1}, {"devices", json::array()}, {"capabilities", json::array()}, {"tags", json::array()},
                  {"token", Token(id, id + ".judge.0")}};
    SendRaw(fd, hello.dump() + "\n");
    EXPECT_EQ(ReadLine(fd)["code"], "invalid_argument") << "rank 1 is not the task's rank";
    ::close(fd);
  }
  auto h = d_->client().Request("GET", "/healthz");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->status, 200);
  auto [st, body] = Phase(id, {{"phase", "rollout"}});
  EXPECT_EQ(st, 200) << body.dump() << d_->log();
  ASSERT_TRUE(d_->client().Request("POST", "/v1/jobs/" + id + "/cancel").ok());
  EXPECT_EQ(d_->WaitJob(id), "cancelled");
}

TEST_F(HandoffTest, DaemonKilledMidHandoffResumesAndTheJobFinishes) {
  // Journals compacted every 4 records: the restart restores the group from
  // its snapshot and replays only the events after it.
  d_.reset();
  d_ = std::make_unique<DaemonProcess>(dir_, std::vector<std::string>{"--gpus", "0,1", "--grace", "2",
                                                                      "--compact-every", "4"});
  d_->Start();
  // Big enough tags that a transition is in flight when the daemon dies.
  json spec = ColocatedSpec("survivor", {"--controller", "--cycles", "3", "--phases", "rollout,train,sync",
                                         "--reconnect-ms", "30000", "--phase-timeout-ms", "120000"},
                            {{"controller", "actor"}, {"timeout_s", 60}});
  const std::string id = d_->Submit(spec);
  const fs::path run = RunDir(id);
  ASSERT_TRUE(WaitFor([&] { return JsonLines(run / "handoff.jsonl").size() >= 12; }, std::chrono::seconds(90)))
      << d_->log();
  EXPECT_TRUE(fs::exists(dir_ / "handoff" / id / "actor" / "snapshot.json")) << "the group journal was compacted";
  d_->Kill9();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  d_->Start();
  ASSERT_EQ(d_->WaitJob(id, std::chrono::seconds(180)), "succeeded") << d_->log();
  EXPECT_THAT(d_->log(), ::testing::HasSubstr("group=actor restored snapshot at event"));
  std::set<std::string> phases;
  for (const json& l : JsonLines(run / "handoff.jsonl")) phases.insert(l["phase"]);
  EXPECT_TRUE(phases.count("SYNC(3)")) << "the third cycle ran after the restart";
  // The whole log, across the restart: lines of events journaled just before
  // the kill but not yet logged are written by the replay, once.
  CheckResidencyInvariants(run, 12 * kMiB);
  const json job = d_->Job(id);
  for (const auto& t : job["tasks"]) EXPECT_EQ(t["state"], "succeeded") << t.dump();
}

// README's promise (issue #12 point 7): a handoff job of plain probes, with
// no reconnect flag anywhere, survives a kill -9 of the daemon. The probes
// reconnect by default (backing off, the same token in a fresh hello), the
// restarted daemon re-adopts them (no task is relaunched) and the controller
// finishes its cycles.
TEST_F(HandoffTest, ProbesReconnectByDefaultWhenTheDaemonIsKilled) {
  const std::string id = d_->Submit(ProbeHandoffSpec("kill9", "local", 25));
  const fs::path run = RunDir(id);
  ASSERT_TRUE(WaitFor([&] { return JsonLines(run / "handoff.jsonl").size() >= 12; }, std::chrono::seconds(60)))
      << d_->log();
  d_->Kill9();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  d_->Start();
  ASSERT_EQ(d_->WaitJob(id, std::chrono::seconds(120)), "succeeded") << d_->Job(id).dump(2) << d_->log();
  const json job = d_->Job(id);
  for (const auto& t : job["tasks"]) {
    EXPECT_EQ(t["state"], "succeeded") << t.dump();
    EXPECT_EQ(t.value("restarts", 0), 0) << "re-adopted, not relaunched: " << t.dump();
  }
  std::set<std::string> phases;
  for (const json& l : JsonLines(run / "handoff.jsonl")) phases.insert(l["phase"]);
  EXPECT_TRUE(phases.count("SYNC(25)")) << "the last cycle ran after the restart";
}

}  // namespace
}  // namespace tandem::testing
