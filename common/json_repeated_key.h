// The first key given twice within one JSON object (nlohmann keeps the last
// one silently), for parsers of hostile files that must refuse it: the
// safetensors header (workers/model/safetensors_header.cc) and the
// checkpoint manifest (workers/checkpoint/checkpoint_manifest.cc).
//
// A SAX pass of its own, before the DOM parse: nlohmann's parser callback,
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

namespace tandem {

struct RepeatedKey {
  std::string key;
  size_t depth = 0;     // 1: a key of the top-level object
  std::string top_key;  // the top-level key it sits under ("" at depth 1)
};

namespace json_detail {
class RepeatedKeyFinder : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::optional<RepeatedKey> found;

  bool key(string_t& k) override {
    if (open_.empty()) return true;
    if (open_.size() == 1) top_key_ = k;
    if (!open_.back().insert(k).second) {
      found = RepeatedKey{k, open_.size(), open_.size() == 1 ? std::string() : top_key_};
      return false;  // stop here
    }
    return true;
  }
  bool start_object(std::size_t) override {
    open_.emplace_back();
    return true;
  }
  bool end_object() override {
    if (!open_.empty()) open_.pop_back();
    return true;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

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
