// Data sets of problems, by name (docs/model.md, "Data sets and rewards").
//
// A Dataset hands out Problems by index, deterministically: the same
// options give the same problem at the same index, every run. A procedural
// set (synthetic-arith) is unbounded (size() is nullopt, any index works);
// a file set (gsm8k, dapo-math) is loaded whole when opened and is bounded.
// Each data set carries its verifier (verifier.h), which scores a response
// against Problem::answer and gives reward 1 to the set's own reference
// solutions.
//
// OpenDataset(name, options) is the registry: options is a JSON object whose
// keys each data set documents; unknown keys are refused, so a typo does not
// silently train on the defaults.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/data/problem.h"
#include "workers/data/verifier.h"

namespace tandem::data {

// What opening a file set read: rows are non-blank lines; skipped rows are
// those refused under "on_bad_row": "skip", with the first few reasons
// ("train.jsonl:17: key 'answer': expected a string").
struct LoadReport {
  size_t rows = 0;
  size_t loaded = 0;
  size_t skipped = 0;
  std::vector<std::string> first_skip_reasons;  // at most kMaxSkipReasons
  static constexpr size_t kMaxSkipReasons = 10;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::string_view name() const = 0;
  // Number of problems; nullopt when unbounded (procedural).
  virtual std::optional<size_t> size() const = 0;
  // The problem at `index`; OutOfRange-like InvalidArgument past size().
  virtual StatusOr<Problem> Get(size_t index) const = 0;
  virtual const Verifier& verifier() const = 0;
  // For file sets, what loading read; zeros for procedural sets.
  virtual LoadReport load_report() const { return {}; }
};

// The data set registered as `name` ("synthetic-arith", "gsm8k",
// "dapo-math") opened with `options` (null: the defaults).
StatusOr<std::unique_ptr<Dataset>> OpenDataset(std::string_view name, const nlohmann::json& options);
std::vector<std::string> DatasetNames();

}  // namespace tandem::data
