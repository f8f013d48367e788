// Bounded JSONL reading with the bad-row policy (jsonl_reader.h).
#include "workers/data/jsonl_reader.h"

#include <cerrno>
#include <cstdio>
#include <memory>

#include "common/bounded_json.h"

namespace tandem::data {
namespace {

bool Blank(std::string_view s) {
  for (const char c : s)
    if (c != ' ' && c != '\t' && c != '\r') return false;
  return true;
}

}  // namespace

std::string KeyPathName(std::initializer_list<std::string_view> keys) {
  std::string path;
  for (const std::string_view k : keys) {
    if (!path.empty()) path += ".";
    path += k;
  }
  return "key '" + path + "'";
}

const nlohmann::json* JsonAt(const nlohmann::json& j, std::initializer_list<std::string_view> keys) {
  const nlohmann::json* cur = &j;
  for (const std::string_view k : keys) {
    if (!cur->is_object()) return nullptr;
    const auto it = cur->find(std::string(k));
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

StatusOr<std::string> JsonStringAt(const nlohmann::json& j, std::initializer_list<std::string_view> keys) {
  const nlohmann::json* v = JsonAt(j, keys);
  if (v == nullptr) return InvalidArgument(KeyPathName(keys) + ": missing");
  if (!v->is_string()) return InvalidArgument(KeyPathName(keys) + ": expected a string, got " + v->type_name());
  return v->get<std::string>();
}

Status ReadJsonl(const std::string& path, BadRowPolicy policy, std::optional<size_t> limit,
                 const std::function<Status(const nlohmann::json&, size_t)>& row, LoadReport* report) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return ErrnoStatus("open " + path);
  const std::string name = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  size_t line_no = 0;
  std::string line;
  bool too_long = false;
  bool done = false;

  // Handles one complete line; returns an error only under kError.
  auto finish_line = [&]() -> Status {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    Status st;
    if (too_long) {
      st = InvalidArgument("row longer than " + std::to_string(kMaxJsonlLineBytes) + " bytes (the limit)");
    } else if (Blank(line)) {
      line.clear();
      return Status::Ok();
    } else {
      StatusOr<nlohmann::json> j = ParseJsonBounded(line);
      st = j.ok() ? row(*j, line_no) : j.status();
    }
    line.clear();
    too_long = false;
    ++report->rows;
    if (st.ok()) {
      ++report->loaded;
      if (limit && report->loaded >= *limit) done = true;
      return Status::Ok();
    }
    const std::string why = name + ":" + std::to_string(line_no) + ": " + st.message();
    if (policy == BadRowPolicy::kError) return Status(st.code(), path + ":" + std::to_string(line_no) + ": " + st.message());
    ++report->skipped;
    if (report->first_skip_reasons.size() < LoadReport::kMaxSkipReasons) report->first_skip_reasons.push_back(why);
    return Status::Ok();
  };

  char buf[1 << 16];
  while (!done) {
    const size_t n = std::fread(buf, 1, sizeof buf, f.get());
    if (n == 0) {
      if (std::ferror(f.get())) return ErrnoStatus("read " + path);
      break;
    }
    std::string_view chunk(buf, n);
    while (!chunk.empty() && !done) {
      const size_t nl = chunk.find('\n');
      const std::string_view part = chunk.substr(0, nl);
      if (!too_long) {
        if (line.size() + part.size() > kMaxJsonlLineBytes) {
          too_long = true;
          line.clear();
        } else {
          line.append(part);
        }
      }
      if (nl == std::string_view::npos) break;
      chunk.remove_prefix(nl + 1);
      TANDEM_RETURN_IF_ERROR(finish_line());
    }
  }
  if (!done && (!line.empty() || too_long)) TANDEM_RETURN_IF_ERROR(finish_line());  // last line without '\n'
  return Status::Ok();
}

}  // namespace tandem::data
