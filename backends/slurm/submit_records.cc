// Submit mode's run-dir records: see submit_records.h.
#include "backends/slurm/submit_records.h"

#include <cerrno>
#include <fstream>

#include "common/json_field.h"

namespace tandem::backends::submit {

namespace fs = std::filesystem;
using nlohmann::json;

StatusOr<SubmitRef> ParseRef(const TaskRef& ref) {
  const auto& d = ref.data;
  auto bad = [&](const char* what) { return InvalidArgument("slurm task ref " + ref.task_id + ": " + what); };
  if (ref.backend != "slurm") return bad("backend is not \"slurm\"");
  if (!d.is_object() || StringField(d, "mode") != "submit") return bad("not a submit-mode ref");
  if (!d.contains("job_id") || !d["job_id"].is_string()) return bad("expected data.job_id");
  if (!d.contains("tandem_job") || !d["tandem_job"].is_string()) return bad("expected data.tandem_job");
  SubmitRef r{d["job_id"].get<std::string>(), d["tandem_job"].get<std::string>(), ""};
  if (d.contains("exit_path") && d["exit_path"].is_string()) r.exit_path = d["exit_path"].get<std::string>();
  return r;
}

json RequestToJson(const LaunchRequest& r) {
  return {{"job_id", r.job_id}, {"task_id", r.task_id}, {"argv", r.argv}, {"env", r.env},
          {"cwd", r.cwd.string()}, {"stdout_path", r.stdout_path.string()},
          {"stderr_path", r.stderr_path.string()}, {"exit_path", r.exit_path.string()}};
}

StatusOr<LaunchRequest> RequestFromJson(const json& j) {
  try {
    LaunchRequest r;
    r.job_id = j.at("job_id").get<std::string>();
    r.task_id = j.at("task_id").get<std::string>();
    r.argv = j.at("argv").get<std::vector<std::string>>();
    r.env = j.at("env").get<std::vector<std::string>>();
    r.cwd = j.at("cwd").get<std::string>();
    r.stdout_path = j.at("stdout_path").get<std::string>();
    r.stderr_path = j.at("stderr_path").get<std::string>();
    r.exit_path = j.at("exit_path").get<std::string>();
    return r;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("launch record: ") + e.what());
  }
}

fs::path Sibling(const fs::path& p, const std::string& suffix) {
  return p.empty() ? p : fs::path(p.string() + suffix);
}

Status WriteJson(const fs::path& path, const json& j) {
  if (path.empty()) return Status::Ok();
  const fs::path tmp = Sibling(path, ".tmp");
  std::error_code ec;
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return ErrnoStatus("write " + tmp.string());
    out << j.dump() << '\n';
    out.flush();
    if (!out) {
      const int err = errno ? errno : EIO;
      out.close();
      fs::remove(tmp, ec);
      return ErrnoStatus("write " + tmp.string(), err);
    }
    out.close();
    if (out.fail()) {
      fs::remove(tmp, ec);
      return ErrnoStatus("close " + tmp.string(), errno ? errno : EIO);
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return ErrnoStatus("rename " + tmp.string() + " to " + path.string(), ec.value());
  }
  return Status::Ok();
}

TaskExit Ended(std::string detail, int sig) {
  TaskExit x;
  x.exit_code = sig ? -1 : 1;
  x.signal = sig;
  x.detail = std::move(detail);
  x.ended_at = std::chrono::system_clock::now();
  return x;
}

}  // namespace tandem::backends::submit
