// Strict data set options (dataset_options.h).
#include "workers/data/dataset_options.h"

namespace tandem::data {

StatusOr<DatasetOptions> DatasetOptions::Make(std::string_view dataset, const nlohmann::json& options,
                                              const std::vector<std::string_view>& known) {
  const std::string where = std::string(dataset) + " options";
  if (options.is_null()) return DatasetOptions(std::string(dataset), nlohmann::json::object());
  if (!options.is_object()) return InvalidArgument(where + ": expected a JSON object");
  for (const auto& item : options.items()) {
    bool ok = false;
    for (const std::string_view k : known) ok = ok || item.key() == k;
    if (!ok) {
      std::string names;
      for (const std::string_view k : known) {
        if (!names.empty()) names += ", ";
        names += k;
      }
      return InvalidArgument(where + ": unknown key '" + item.key() + "' (known: " + names + ")");
    }
  }
  return DatasetOptions(std::string(dataset), options);
}

Status DatasetOptions::KeyError(std::string_view key, std::string_view expected) const {
  return InvalidArgument(dataset_ + " options: key '" + std::string(key) + "': expected " + std::string(expected));
}

StatusOr<std::optional<std::string>> DatasetOptions::String(std::string_view key) const {
  const auto it = options_.find(std::string(key));
  if (it == options_.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return KeyError(key, "a string");
  return std::optional<std::string>(it->get<std::string>());
}

StatusOr<std::optional<uint64_t>> DatasetOptions::Unsigned(std::string_view key) const {
  const auto it = options_.find(std::string(key));
  if (it == options_.end() || it->is_null()) return std::optional<uint64_t>();
  if (it->is_number_unsigned()) return std::optional<uint64_t>(it->get<uint64_t>());
  if (it->is_number_integer() && it->get<int64_t>() >= 0)
    return std::optional<uint64_t>(static_cast<uint64_t>(it->get<int64_t>()));
  return KeyError(key, "a non-negative integer");
}

nlohmann::json DatasetOptions::Raw(std::string_view key) const {
  const auto it = options_.find(std::string(key));
  return it == options_.end() ? nlohmann::json() : *it;
}

StatusOr<std::string> DatasetOptions::Choice(std::string_view key, const std::vector<std::string_view>& allowed) const {
  TANDEM_ASSIGN_OR_RETURN(const std::optional<std::string> v, String(key));
  if (!v) return std::string(allowed.front());
  for (const std::string_view a : allowed)
    if (*v == a) return *v;
  std::string names;
  for (const std::string_view a : allowed) {
    if (!names.empty()) names += " or ";
    names += '"';
    names += a;
    names += '"';
  }
  return KeyError(key, names);
}

}  // namespace tandem::data
