// A data set held in memory: the problems a file loader read, its verifier
// and its load report (dataset.h). The file sets (gsm8k, dapo-math) are this
// class with their own row parsers.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "workers/data/dataset.h"

namespace tandem::data {

class LoadedDataset final : public Dataset {
 public:
  LoadedDataset(std::string name, std::vector<Problem> problems, std::unique_ptr<Verifier> verifier, LoadReport report)
      : name_(std::move(name)), problems_(std::move(problems)), verifier_(std::move(verifier)), report_(std::move(report)) {}

  std::string_view name() const override { return name_; }
  std::optional<size_t> size() const override { return problems_.size(); }
  StatusOr<Problem> Get(size_t index) const override {
    if (index >= problems_.size())
      return InvalidArgument(name_ + ": problem " + std::to_string(index) + " out of range (size " +
                             std::to_string(problems_.size()) + ")");
    return problems_[index];
  }
  const Verifier& verifier() const override { return *verifier_; }
  LoadReport load_report() const override { return report_; }

 private:
  std::string name_;
  std::vector<Problem> problems_;
  std::unique_ptr<Verifier> verifier_;
  LoadReport report_;
};

}  // namespace tandem::data
