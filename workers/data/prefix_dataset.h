// The first `n` problems of a bounded data set, as a data set (the rest are
// held out for evaluation: sft and the actor train on the prefix).
#pragma once

#include <string>

#include "workers/data/dataset.h"

namespace tandem::data {

class PrefixDataset final : public Dataset {
 public:
  // `base` must outlive the view.
  PrefixDataset(const Dataset& base, size_t n) : base_(base), n_(n) {}
  std::string_view name() const override { return base_.name(); }
  std::optional<size_t> size() const override { return n_; }
  StatusOr<Problem> Get(size_t i) const override {
    if (i >= n_) return InvalidArgument(std::string(base_.name()) + ": problem " + std::to_string(i) + " out of range");
    return base_.Get(i);
  }
  const Verifier& verifier() const override { return base_.verifier(); }

 private:
  const Dataset& base_;
  size_t n_;
};

}  // namespace tandem::data
