// The first `n` problems of a bounded data set, as a data set (the rest are
// held out for evaluation: sft and the actor train on the prefix).
#pragma once

#include <memory>
#include <optional>
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

// The training view of `base` when its tail is held out: the first `n`
// problems when `n` is set and less than base's size, else null (train on
// `base` itself).
inline std::unique_ptr<PrefixDataset> TrainingPrefix(const Dataset& base, std::optional<size_t> n) {
  if (!n || !base.size() || *n == *base.size()) return nullptr;
  return std::make_unique<PrefixDataset>(base, *n);
}

}  // namespace tandem::data
