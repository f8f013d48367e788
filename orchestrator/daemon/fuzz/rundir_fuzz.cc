// libFuzzer target: the readers of files a task can write into its run dir
// (issue #12 point 1) — events.jsonl lines as the daemon's events stream reads
// them (SseEventOfLine), and handoff.jsonl / residency.jsonl as `tandem
// events --handoff`, `tandem residency` and `tandem timeline` read them:
// ReadRunLogs on a real file, then the residency model, its JSON, the handoff
// text and the timeline page. Every input is both files at once. Nothing here
// may crash, throw, leak or trip a sanitizer. Seeds: tests/fuzz/rundir/.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "orchestrator/daemon/api.h"
#include "orchestrator/report/handoff_text.h"
#include "orchestrator/report/residency_model.h"
#include "orchestrator/report/run_logs.h"
#include "orchestrator/report/timeline.h"

namespace {

const std::filesystem::path& RunDir() {
  static const std::filesystem::path dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tandem-rundir-fuzz-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) std::abort();
    return std::filesystem::path(tmpl);
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  while (start <= bytes.size()) {
    size_t nl = bytes.find('\n', start);
    if (nl == std::string_view::npos) nl = bytes.size();
    (void)tandem::daemon::SseEventOfLine(bytes.substr(start, nl - start));
    start = nl + 1;
  }
  for (const char* name : {"handoff.jsonl", "residency.jsonl"}) {
    std::ofstream(RunDir() / name, std::ios::binary | std::ios::trunc).write(bytes.data(),
                                                                             static_cast<std::streamsize>(size));
  }
  auto logs = tandem::report::ReadRunLogs(RunDir().string());
  if (!logs.ok()) return 0;
  const auto model = tandem::report::BuildResidencyModel(*logs);
  (void)tandem::report::ResidencyJson(model).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  (void)tandem::report::ResidencyText(model);
  (void)tandem::report::HandoffLogText(*logs);
  (void)tandem::report::TimelineHtml(*logs, tandem::report::TimelineOptions{});
  (void)tandem::report::WarningsText(*logs);
  return 0;
}
