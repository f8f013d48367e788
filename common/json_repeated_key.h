// The first key given twice within one JSON object (nlohmann keeps the last
// one silently), for parsers of hostile files that must refuse it: the
// safetensors header (workers/model/safetensors_header.cc) and the
// checkpoint manifest (workers/checkpoint/checkpoint_manifest.cc).
//
// A SAX pass of its own (json_key_sax.h), before the DOM parse: nlohmann's parser callback,
// which could do this while building the DOM, is quadratic in the keys of
// an object (20k tensors: 30 s instead of 0.1 s). Invalid JSON ends the pass
// with no answer (the DOM parse reports it). Header-only: common/ does not
// link nlohmann.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json_key_sax.h"

namespace tandem {

struct RepeatedKey {
  std::string key;
  size_t depth = 0;     // 1: a key of the top-level object
  std::string top_key;  // the top-level key it sits under ("" at depth 1)
};

namespace json_detail {
class RepeatedKeyFinder final : public JsonKeySax {
 public:
  std::optional<RepeatedKey> found;

  void OpenObject() override { open_.emplace_back(); }
  void CloseObject() override { open_.pop_back(); }
  bool Key(string_t& k, size_t depth) override {
    if (depth == 1) top_key_ = k;
    if (!open_.back().insert(k).second) {
      found = RepeatedKey{k, depth, depth == 1 ? std::string() : top_key_};
      return false;  // stop here
    }
    return true;
  }

 private:
  std::vector<std::set<std::string>> open_;
  std::string top_key_;
};
}  // namespace json_detail

inline std::optional<RepeatedKey> FindRepeatedKey(std::string_view text) {
  json_detail::RepeatedKeyFinder finder;
  (void)nlohmann::json::sax_parse(text.begin(), text.end(), &finder);
  return finder.found;
}

}  // namespace tandem
