// Bounded parsing into ordered_json (ordered_json.h).
#include "workers/agents/ordered_json.h"

#include <vector>

#include "common/bounded_json.h"
#include "common/json_key_sax.h"

namespace tandem::agents {
namespace {

// Counts the keys of each open object; stops at the first over the limit.
class KeyCounter final : public JsonKeySax {
 public:
  explicit KeyCounter(size_t max_keys) : max_keys_(max_keys) {}
  bool over = false;

  void OpenObject() override { open_.push_back(0); }
  void CloseObject() override { open_.pop_back(); }
  bool Key(string_t&, size_t) override {
    over = ++open_.back() > max_keys_;
    return !over;
  }

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
