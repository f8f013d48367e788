// What the job spec parser checks beyond the format, for a build other than
// this one. ParseJobSpec/ParseJobSpecText (job_spec.h) parse for this build:
// a role's "worker" must be one this build's tandem-worker has
// (common/native_workers.h), else it is refused with the ones it has. The
// format knows more worker kinds ("actor", "rollout", "teacher", "probe", "sft", "proxy");
// tests of the format's handoff rules for workers not built yet parse with
// ParseOptions{ParseOptions::AllWorkerKinds()}.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "orchestrator/spec/job_spec.h"

namespace tandem::spec {

struct ParseOptions {
  // The native workers a role's "worker" may name. Default: this build's.
  std::vector<std::string> workers = DefaultWorkers();

  static std::vector<std::string> DefaultWorkers();  // common/native_workers.h
  static std::vector<std::string> AllWorkerKinds();  // every kind the format knows
};

ParseResult ParseJobSpec(const nlohmann::ordered_json& doc, const ParseOptions& options);
ParseResult ParseJobSpec(const nlohmann::json& doc, const ParseOptions& options);
ParseResult ParseJobSpecText(std::string_view text, const ParseOptions& options);

}  // namespace tandem::spec
