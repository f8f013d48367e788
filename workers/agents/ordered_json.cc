// Bounded parsing into ordered_json (ordered_json.h).
#include "workers/agents/ordered_json.h"

#include <vector>

#include "common/bounded_json.h"

namespace tandem::agents {
namespace {

// Counts the keys of each open object; stops at the first over the limit.
class KeyCounter : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit KeyCounter(size_t max_keys) : max_keys_(max_keys) {}
  bool over = false;

  bool key(string_t&) override {
    if (!open_.empty() && ++open_.back() > max_keys_) {
      over = true;
      return false;
    }
    return true;
  }
  bool start_object(std::size_t) override {
    open_.push_back(0);
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
  const size_t max_keys_;
  std::vector<size_t> open_;
};

}  // namespace

StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text, size_t max_depth, size_t max_keys) {
  // The depth first: the SAX pass keeps a counter per open object.
  if (!JsonDepthWithin(text, max_depth))
    return InvalidArgument("JSON nested deeper than " + std::to_string(max_depth) + " levels (the limit)");
  KeyCounter counter(max_keys);
  (void)nlohmann::json::sax_parse(text.begin(), text.end(), &counter);
  if (counter.over)
    return InvalidArgument("an object holds more than " + std::to_string(max_keys) + " keys (the limit)");
  return ParseJsonBounded<nlohmann::ordered_json>(text, max_depth);
}

}  // namespace tandem::agents
