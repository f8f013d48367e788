// Reading a data set's JSON options strictly (dataset.h): each data set
// names the keys it accepts, and a missing required key, a wrong type or an
// unknown key is InvalidArgument naming the key and what was expected
// ("gsm8k options: key 'limit': expected a non-negative integer").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::data {

class DatasetOptions {
 public:
  // `options` must be null or an object whose keys are all in `known`.
  static StatusOr<DatasetOptions> Make(std::string_view dataset, const nlohmann::json& options,
                                       const std::vector<std::string_view>& known);

  StatusOr<std::optional<std::string>> String(std::string_view key) const;
  StatusOr<std::optional<uint64_t>> Unsigned(std::string_view key) const;
  // The raw value (null when absent), for nested option objects.
  nlohmann::json Raw(std::string_view key) const;
  // A string that must be one of `allowed` (the first is the default).
  StatusOr<std::string> Choice(std::string_view key, const std::vector<std::string_view>& allowed) const;

 private:
  DatasetOptions(std::string dataset, nlohmann::json options) : dataset_(std::move(dataset)), options_(std::move(options)) {}
  Status KeyError(std::string_view key, std::string_view expected) const;

  std::string dataset_;
  nlohmann::json options_;
};

}  // namespace tandem::data
