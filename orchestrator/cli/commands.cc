// The client-side subcommands: validate, submit, status, cancel, logs, events.
#include "orchestrator/cli/commands.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "common/bounded_json.h"
#include "common/json_field.h"
#include "orchestrator/report/bounded_lines.h"
#include "orchestrator/spec/job_spec.h"

namespace tandem::cli {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

int Unreachable(const Status& st) {
  std::cerr << "tandem: " << st.message() << "\n";
  return kExitUnreachable;
}

int Refused(const Response& r) {
  std::cerr << "tandem: " << ErrorText(r) << "\n";
  return r.status == 400 ? kExitFailed : kExitRefused;
}

std::string Clock(int64_t ms) {
  if (ms <= 0) return "-";
  std::time_t t = ms / 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03d", buf, static_cast<int>(ms % 1000));
  return out;
}

std::string Join(const json& arr) {
  std::string s;
  if (!arr.is_array()) return s;
  for (const auto& v : arr) s += (s.empty() ? "" : ",") + (v.is_string() ? v.get<std::string>() : v.dump());
  return s;
}

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i)
      std::cout << (i + 1 < r.size() ? (r[i] + std::string(w[i] - r[i].size() + 2, ' ')) : r[i]);
    std::cout << "\n";
  }
}
}  // namespace

int ExitCodeForState(const std::string& state) {
  if (state == "succeeded") return kExitOk;
  if (state == "cancelled") return kExitCancelled;
  return kExitFailed;
}

std::string FormatEvent(const json& ev) {
  // Lines of a run dir's events.jsonl (and of the daemon's replay of it) may
  // come from a task: any field may be missing or of any type.
  static const json kNone;
  auto field = [](const json& j, const char* key) -> const json& {
    if (!j.is_object()) return kNone;
    const auto it = j.find(key);
    return it == j.end() ? kNone : *it;
  };
  const std::string type = StringField(ev, "type");
  std::ostringstream o;
  o << Clock(IntField(ev, "at", 0)) << "  ";
  const std::string detail = StringField(ev, "detail");
  if (type == "job_submitted") {
    const json& job = field(ev, "job");
    const json& tasks = field(job, "tasks");
    if (job.is_object()) o << "job submitted  " << StringField(job, "name") << " tasks=" << (tasks.is_array() ? tasks.size() : 0);
    else o << "job submitted";
  } else if (type == "job_state") {
    o << "job " << StringField(ev, "state");
    if (!detail.empty()) o << "  (" << detail << ")";
  } else if (type == "job_devices") {
    const json& devices = field(ev, "physical_devices");
    o << "devices " << (!devices.is_array() || devices.empty() ? std::string("released") : "granted [" + Join(devices) + "]");
  } else if (type == "job_cancel") {
    o << "cancel requested";
  } else if (type == "task_state") {
    o << std::left << std::setw(14) << StringField(ev, "task") << " " << StringField(ev, "state");
    if (const json& pid = field(field(field(ev, "ref"), "data"), "pid"); !pid.is_null()) o << " pid=" << DumpJson(pid);
    if (const json& ports = field(ev, "ports"); ports.is_array() && !ports.empty()) o << " ports=" << Join(ports);
    if (!detail.empty()) o << "  (" << detail << ")";
  } else {
    o << DumpJson(ev);
  }
  return o.str();
}

StatusOr<nlohmann::ordered_json> LoadSpecForSubmit(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto parsed = ParseJsonBounded<nlohmann::ordered_json>(ss.str());
  if (!parsed.ok()) return InvalidArgument(path + ": " + parsed.status().message() + " (run `tandem validate " + path + "`)");
  nlohmann::ordered_json spec = std::move(parsed).value();
  if (spec.is_object() && spec.contains("run_dir") && spec["run_dir"].is_string()) {
    fs::path rd = spec["run_dir"].get<std::string>();
    if (!rd.empty() && rd.is_relative()) spec["run_dir"] = (fs::current_path() / rd).lexically_normal().string();
  }
  return spec;
}

int CmdValidate(const std::string& path) {
  std::ifstream in(path);
  if (!in) { std::cerr << "tandem: cannot read " << path << "\n"; return kExitFailed; }
  std::stringstream ss;
  ss << in.rdbuf();
  spec::ParseResult r = spec::ParseJobSpecText(ss.str());
  if (r.errors.empty()) {
    std::cout << path << ": valid (" << r.spec->roles.size() << " roles)\n";
    return kExitOk;
  }
  for (const auto& e : r.errors) std::cerr << path << ": " << e.ToString() << "\n";
  return kExitFailed;
}

int CmdSubmit(Client& c, const std::string& path, bool wait) {
  auto spec = LoadSpecForSubmit(path);
  if (!spec.ok()) { std::cerr << "tandem: " << spec.status().message() << "\n"; return kExitFailed; }
  auto r = c.Request("POST", "/v1/jobs", spec->dump());
  if (!r.ok()) return Unreachable(r.status());
  if (r->status != 201) return Refused(*r);
  const std::string id = r->Json().value("id", "");
  if (wait) {
    std::cerr << "submitted " << id << "\n";
    const int rc = WaitForJob(c, id, false);
    std::cout << id << "\n";
    return rc;
  }
  std::cout << id << "\n";
  return kExitOk;
}

int CmdStatus(Client& c, const std::string& job, bool as_json) {
  auto r = c.Request("GET", job.empty() ? "/v1/jobs" : "/v1/jobs/" + job);
  if (!r.ok()) return Unreachable(r.status());
  if (r->status != 200) return Refused(*r);
  json j = r->Json();
  if (as_json) { std::cout << j.dump(2) << "\n"; return kExitOk; }
  if (job.empty()) {
    std::vector<std::vector<std::string>> rows{{"JOB", "STATE", "TASKS", "SUBMITTED", "DETAIL"}};
    for (const auto& s : j["jobs"]) {
      std::string counts;
      for (auto& [k, v] : s["task_states"].items()) counts += (counts.empty() ? "" : " ") + k + "=" + v.dump();
      rows.push_back({s.value("id", ""), s.value("state", ""), counts, Clock(s.value("submitted_ms", int64_t{0})),
                      s.value("detail", "")});
    }
    PrintTable(rows);
    return kExitOk;
  }
  std::cout << "job      " << j.value("id", "") << "  (" << j.value("name", "") << ")\n"
            << "state    " << j.value("state", "") << (j.value("detail", "").empty() ? "" : "  " + j.value("detail", "")) << "\n"
            << "run dir  " << j.value("run_dir", "") << "\n"
            << "devices  [" << Join(j["physical_devices"]) << "]\n\n";
  std::vector<std::vector<std::string>> rows{{"TASK", "STATE", "PID", "DEVICES", "PORTS", "RESTARTS", "DETAIL"}};
  for (const auto& t : j["tasks"]) {
    std::string pid = "-";
    if (t["ref"].is_object() && t["ref"]["data"].contains("pid")) pid = t["ref"]["data"]["pid"].dump();
    rows.push_back({t.value("name", ""), t.value("state", ""), pid, Join(t["physical_devices"]),
                    Join(t["ports"]), std::to_string(t.value("restarts", 0)), t.value("detail", "")});
  }
  PrintTable(rows);
  return kExitOk;
}

int CmdPhase(Client& c, const std::string& job, const std::string& phase, int64_t version, const std::string& group) {
  json body = {{"phase", phase}};
  if (version > 0) body["version"] = version;
  if (!group.empty()) body["group"] = group;
  auto r = c.Request("POST", "/v1/jobs/" + job + "/phase", body.dump());
  if (!r.ok()) return Unreachable(r.status());
  if (r->status != 200) return Refused(*r);
  const json b = r->Json();
  std::cout << b.value("group", "") << ": " << b.value("phase", "") << " reached in "
            << static_cast<int64_t>(b.value("duration_s", 0.0) * 1000) << " ms\n";
  return kExitOk;
}

int CmdCancel(Client& c, const std::string& job) {
  auto r = c.Request("POST", "/v1/jobs/" + job + "/cancel");
  if (!r.ok()) return Unreachable(r.status());
  if (r->status != 202) return Refused(*r);
  std::cout << "cancelling " << job << "\n";
  return kExitOk;
}

int CmdLogs(Client& c, const std::string& job, const std::string& task, bool follow, bool err) {
  std::string target = "/v1/jobs/" + job + "/logs?stream=" + (err ? "stderr" : "stdout");
  if (!task.empty()) target += "&task=" + task;
  if (follow) target += "&follow=1";
  // The output goes to stdout as it arrives (flushed, so a pipe sees each
  // line while the task runs); an error answer is a small JSON body, kept to
  // print for people.
  int status = 0;
  std::string error_body;
  auto st = c.Stream(
      target,
      [&](std::string_view d) {
        if (status != 200) {
          if (error_body.size() < 64 * 1024) error_body.append(d.substr(0, 64 * 1024 - error_body.size()));
          return;
        }
        std::cout.write(d.data(), static_cast<std::streamsize>(d.size()));
        std::cout.flush();
      },
      [&](int code) { status = code; });
  if (!st.ok()) return Unreachable(st.status());
  if (*st == 200) return kExitOk;
  const Response r{*st, error_body};
  const json e = r.Json();
  std::string code;
  if (e.is_object() && e.contains("error") && e["error"].is_object() && e["error"].contains("code") &&
      e["error"]["code"].is_string()) {
    code = e["error"]["code"].get<std::string>();
  }
  if (code == "task_required" || code == "not_found") {
    // Name the tasks the job has, from the job itself.
    std::string names;
    if (auto j = c.Request("GET", "/v1/jobs/" + job); j.ok() && j->status == 200) {
      const json body = j->Json();
      if (body.is_object() && body.contains("tasks") && body["tasks"].is_array()) {
        for (const auto& t : body["tasks"]) {
          if (t.is_object() && t.contains("name") && t["name"].is_string())
            names += (names.empty() ? "" : ", ") + t["name"].get<std::string>();
        }
      }
    }
    if (code == "task_required") {
      std::cerr << "tandem logs: job " << job << " has several tasks; name one with --task"
                << (names.empty() ? "" : " (" + names + ")") << ", e.g. tandem logs " << job << " --task "
                << (names.empty() ? "ROLE.RANK" : names.substr(0, names.find(','))) << "\n";
      return kExitUsage;
    }
    if (!names.empty()) {
      std::cerr << "tandem logs: job " << job << " has no task " << task << "; its tasks: " << names << "\n";
      return kExitRefused;
    }
  }
  std::cerr << "tandem: " << ErrorText(r) << "\n";
  return kExitRefused;
}

// Reads server-sent events ("data: {...}" lines) from a stream.
static int StreamEvents(Client& c, const std::string& job, bool follow,
                        const std::function<void(const json&)>& on_event) {
  std::string pending;
  auto st = c.Stream("/v1/jobs/" + job + "/events" + (follow ? "" : "?follow=0"), [&](std::string_view d) {
    pending.append(d);
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (line.rfind("data: ", 0) == 0) {
        json ev = json::parse(line.substr(6), nullptr, false);
        if (!ev.is_discarded()) on_event(ev);
      } else if (line.rfind("{\"error\"", 0) == 0) {
        json e = json::parse(line, nullptr, false);
        if (!e.is_discarded()) std::cerr << "tandem: " << e["error"].value("message", line) << "\n";
      }
    }
  });
  if (!st.ok()) return Unreachable(st.status());
  return *st == 200 ? kExitOk : kExitRefused;
}

int CmdEvents(Client& c, const std::string& job, bool follow) {
  // A run dir (what `tandem run` leaves behind) is read directly.
  if (fs::is_regular_file(fs::path(job) / "events.jsonl")) {
    std::ifstream in(fs::path(job) / "events.jsonl");
    std::string line;
    bool too_long = false;
    while (report::ReadBoundedLine(in, line, too_long)) {
      auto ev = too_long ? StatusOr<json>(InvalidArgument("too long")) : ParseJsonBounded(line);
      if (ev.ok() && ev->is_object()) std::cout << FormatEvent(*ev) << "\n";
    }
    if (fs::is_regular_file(fs::path(job) / "handoff.jsonl"))
      std::cerr << "(this run has a handoff log: tandem events " << job << " --handoff)\n";
    return kExitOk;
  }
  return StreamEvents(c, job, follow, [](const json& ev) { std::cout << FormatEvent(ev) << std::endl; });
}

int WaitForJob(Client& c, const std::string& job, bool quiet) {
  std::string final_state;
  int rc = StreamEvents(c, job, true, [&](const json& ev) {
    if (!quiet) std::cerr << FormatEvent(ev) << std::endl;
    if (ev.value("type", "") == "job_state") {
      const std::string s = ev.value("state", "");
      if (s == "succeeded" || s == "failed" || s == "cancelled") final_state = s;
    }
  });
  if (rc != kExitOk) return rc;
  if (final_state.empty()) {
    auto r = c.Request("GET", "/v1/jobs/" + job);
    if (!r.ok()) return Unreachable(r.status());
    final_state = r->Json().value("state", "");
  }
  return ExitCodeForState(final_state);
}

}  // namespace tandem::cli
