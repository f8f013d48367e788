// handoff.jsonl / residency.jsonl writers (log_writer.h).
#include "orchestrator/handoff/log_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>

#include <cerrno>

#include "common/bounded_json.h"
#include "common/json_field.h"
#include "common/task_file.h"
#include "orchestrator/handoff/event_codec.h"

namespace tandem::handoff {
namespace {

constexpr int kLogVersion = 1;

Status AppendText(int fd, const std::string& text, const char* what) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(std::string("write ") + what);
    }
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// True for an empty file and for one whose last byte is a newline.
bool EndsWithNewline(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) return true;
  auto last = ReadAt(fd, static_cast<uint64_t>(st.st_size) - 1, 1, path);
  return !last.ok() || *last == "\n";
}

// The "event" of the last line of `group` in the JSONL file open at `fd` (0
// when none). Lines of one group are appended in event order, so the file is
// read backwards in blocks and the scan stops at the group's last line:
// reopening a long job's logs costs one block, not the whole file. Lines of
// other groups, torn and foreign lines are skipped; so is the rest of a line
// longer than any this writer makes (a task may have written anything).
uint64_t LastLoggedEvent(int fd, const std::string& path, const std::string& group) {
  constexpr uint64_t kBlock = 64 * 1024;
  constexpr size_t kMaxCarry = 1 << 20;
  const std::string needle = "\"group\":" + nlohmann::json(group).dump();
  struct stat st {};
  if (::fstat(fd, &st) != 0) return 0;
  uint64_t end = static_cast<uint64_t>(st.st_size);
  std::string carry;  // the start of the line cut by the previous block
  while (end > 0) {
    const uint64_t start = end > kBlock ? end - kBlock : 0;
    auto block = ReadAt(fd, start, static_cast<size_t>(end - start), path);
    if (!block.ok()) return 0;
    std::string text = std::move(block).value() + carry;
    // Whole lines only: the first one may continue in the block before.
    size_t first = 0;
    if (start > 0) {
      first = text.find('\n');
      if (first == std::string::npos) {
        carry = text.size() > kMaxCarry ? std::string() : std::move(text);
        end = start;
        continue;
      }
      ++first;
    }
    size_t stop = text.size();
    while (stop > first) {
      size_t begin = text.rfind('\n', stop - 1);
      begin = (begin == std::string::npos || begin < first) ? first : begin + 1;
      const std::string_view line(text.data() + begin, stop - begin);
      if (line.find(needle) != std::string_view::npos) {
        auto j = ParseJsonBounded(line);
        if (j.ok() && StringField(*j, "group") == group && j->is_object() && j->contains("event") &&
            (*j)["event"].is_number_unsigned()) {
          return (*j)["event"].get<uint64_t>();
        }
      }
      stop = begin > first ? begin - 1 : first;
    }
    carry = first > kMaxCarry ? std::string() : text.substr(0, first);
    end = start;
  }
  return 0;
}

}  // namespace

EnvMap AllocatorConfig(const EnvMap& env) {
  static const char* const kNamed[] = {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF",
                                       "PYTORCH_NO_CUDA_MEMORY_CACHING",
                                       "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT", "CUDA_MODULE_LOADING"};
  EnvMap out;
  for (const auto& [k, v] : env) {
    bool named = k.find("ALLOC") != std::string::npos;
    for (const char* n : kNamed) named = named || k == n;
    if (named) out[k] = v;
  }
  return out;
}

const EnvMap& LogContext::AllocatorOf(const std::string& role) const {
  static const EnvMap kNone;
  auto it = allocator.find(role);
  return it == allocator.end() ? kNone : it->second;
}

const std::vector<int>& LogContext::GpusOf(const WorkerId& w) const {
  static const std::vector<int> kNone;
  auto it = gpus.find(w);
  return it == gpus.end() ? kNone : it->second;
}

std::vector<nlohmann::json> HandoffLines(const LogContext& ctx, const HandoffRecord& r) {
  nlohmann::json base = {
      {"v", kLogVersion},
      {"group", ctx.group},
      {"phase", PhaseName(r.phase)},
      {"step", r.step},
      {"stage", r.stage},
      {"role", r.worker.role},
      {"rank", r.worker.rank},
      {"gpus", ctx.GpusOf(r.worker)},
      {"command", CommandKindName(r.command)},
      {"start", r.start},
      {"duration", r.duration},
      {"outcome", r.outcome},
      {"allocator", ctx.AllocatorOf(r.worker.role)},
  };
  if (r.command == CommandKind::kPublishWeights || r.command == CommandKind::kLoadWeights) {
    base["version"] = r.version;
  }
  if (!r.message.empty()) base["message"] = r.message;
  std::vector<nlohmann::json> out;
  if (r.tags.empty()) {
    base["tag"] = nullptr;
    base["bytes"] = r.bytes;
    out.push_back(std::move(base));
    return out;
  }
  for (Tag t : r.tags) {
    nlohmann::json line = base;
    line["tag"] = TagName(t);
    auto it = r.bytes_by_tag.find(t);
    line["bytes"] = it == r.bytes_by_tag.end() ? 0 : it->second;
    out.push_back(std::move(line));
  }
  return out;
}

nlohmann::json ResidencyLine(const LogContext& ctx, const ResidencyRecord& r) {
  nlohmann::json line = {
      {"v", kLogVersion},        {"group", ctx.group},  {"ts", r.at},
      {"role", r.worker.role},   {"rank", r.worker.rank}, {"gpus", ctx.GpusOf(r.worker)},
      {"tag", TagName(r.tag)},   {"bytes", r.bytes},    {"delta", r.delta},
      {"devices", DevicesToJson(r.devices)}, {"leak", r.leak}, {"allocator", ctx.AllocatorOf(r.worker.role)},
  };
  if (!r.note.empty()) line["note"] = r.note;
  return line;
}

LogWriter::LogWriter(int handoff_fd, int residency_fd, LogContext ctx)
    : handoff_fd_(handoff_fd), residency_fd_(residency_fd), ctx_(std::move(ctx)) {}

LogWriter::~LogWriter() {
  ::close(handoff_fd_);
  ::close(residency_fd_);
}

StatusOr<std::unique_ptr<LogWriter>> LogWriter::Open(const std::string& run_dir, LogContext ctx) {
  const std::string h = run_dir + "/handoff.jsonl", r = run_dir + "/residency.jsonl";
  // The run dir's tasks may have left anything at these paths (common/task_file.h).
  TANDEM_ASSIGN_OR_RETURN(UniqueFd hfd, OpenTaskFile(h, O_RDWR | O_CREAT | O_APPEND, 0644), "");
  TANDEM_ASSIGN_OR_RETURN(UniqueFd rfd, OpenTaskFile(r, O_RDWR | O_CREAT | O_APPEND, 0644), "");
  // A line cut short (a full disk) stays a foreign line: ours start on a new one.
  for (auto [fd, path] : {std::pair{hfd.get(), h}, std::pair{rfd.get(), r}}) {
    if (!EndsWithNewline(fd, path)) TANDEM_RETURN_IF_ERROR(AppendText(fd, "\n", path.c_str()));
  }
  const uint64_t handoff_logged = LastLoggedEvent(hfd.get(), h, ctx.group);
  const uint64_t residency_logged = LastLoggedEvent(rfd.get(), r, ctx.group);
  std::unique_ptr<LogWriter> w(new LogWriter(hfd.Release(), rfd.Release(), std::move(ctx)));
  w->handoff_logged_ = handoff_logged;
  w->residency_logged_ = residency_logged;
  return w;
}

Status LogWriter::WriteAll(const std::vector<Action>& actions, uint64_t event) {
  // One write per file for the whole batch: whole lines, fewer syscalls.
  std::string handoff, residency;
  for (const Action& a : actions) {
    if (const auto* h = std::get_if<HandoffRecord>(&a); h && event > handoff_logged_) {
      for (nlohmann::json& line : HandoffLines(ctx_, *h)) {
        line["event"] = event;
        handoff += line.dump() + "\n";
      }
    }
    if (const auto* r = std::get_if<ResidencyRecord>(&a); r && event > residency_logged_) {
      nlohmann::json line = ResidencyLine(ctx_, *r);
      line["event"] = event;
      residency += line.dump() + "\n";
    }
  }
  if (!handoff.empty()) {
    TANDEM_RETURN_IF_ERROR(AppendText(handoff_fd_, handoff, "handoff.jsonl"));
    handoff_logged_ = event;
  }
  if (!residency.empty()) {
    TANDEM_RETURN_IF_ERROR(AppendText(residency_fd_, residency, "residency.jsonl"));
    residency_logged_ = event;
  }
  return Status::Ok();
}

}  // namespace tandem::handoff
