// Seeded epochs of shuffled order with a resumable cursor (prompt_sampler.h).
#include "workers/data/prompt_sampler.h"

#include <numeric>
#include <string>
#include <utility>

#include "workers/data/seeded_random.h"

namespace tandem::data {

nlohmann::json SamplerCursorToJson(const SamplerCursor& c) {
  nlohmann::json j = {{"seed", c.seed}, {"epoch", c.epoch}, {"position", c.position}};
  j["population"] = c.population ? nlohmann::json(*c.population) : nlohmann::json();
  return j;
}

StatusOr<SamplerCursor> SamplerCursorFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("sampler cursor: expected a JSON object");
  auto get = [&j](const char* key, bool nullable, std::optional<uint64_t>* out) -> Status {
    const auto it = j.find(key);
    if (it == j.end()) return InvalidArgument(std::string("sampler cursor: key '") + key + "': missing");
    if (nullable && it->is_null()) {
      out->reset();
      return Status::Ok();
    }
    if (it->is_number_unsigned()) *out = it->get<uint64_t>();
    else if (it->is_number_integer() && it->get<int64_t>() >= 0) *out = static_cast<uint64_t>(it->get<int64_t>());
    else
      return InvalidArgument(std::string("sampler cursor: key '") + key + "': expected a non-negative integer" +
                             (nullable ? " or null" : ""));
    return Status::Ok();
  };
  std::optional<uint64_t> seed, epoch, position, population;
  TANDEM_RETURN_IF_ERROR(get("seed", false, &seed));
  TANDEM_RETURN_IF_ERROR(get("epoch", false, &epoch));
  TANDEM_RETURN_IF_ERROR(get("position", false, &position));
  TANDEM_RETURN_IF_ERROR(get("population", true, &population));
  return SamplerCursor{*seed, *epoch, *position, population};
}

StatusOr<PromptSampler> PromptSampler::Create(std::optional<size_t> population, uint64_t seed) {
  return Restore(population, SamplerCursor{seed, 0, 0, population});
}

StatusOr<PromptSampler> PromptSampler::Restore(std::optional<size_t> population, const SamplerCursor& cursor) {
  if (population && *population == 0) return InvalidArgument("prompt sampler: no problems to sample (population 0)");
  auto show = [](std::optional<uint64_t> n) { return n ? std::to_string(*n) : std::string("unbounded"); };
  if (cursor.population != population)
    return FailedPrecondition("prompt sampler: the cursor was saved for a population of " + show(cursor.population) +
                              ", this data set has " + show(population));
  if (population && cursor.position > *population)
    return InvalidArgument("prompt sampler: cursor position " + std::to_string(cursor.position) +
                           " is past the epoch's end (" + std::to_string(*population) + ")");
  PromptSampler s(cursor);
  if (population) s.ShuffleEpoch();
  return s;
}

void PromptSampler::ShuffleEpoch() {
  order_.resize(*cursor_.population);
  std::iota(order_.begin(), order_.end(), size_t{0});
  SeededRandom rng(cursor_.seed, cursor_.epoch);
  for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng.Below(i)]);
}

size_t PromptSampler::Next() {
  if (!cursor_.population) return static_cast<size_t>(cursor_.position++);
  if (cursor_.position == *cursor_.population) {
    ++cursor_.epoch;
    cursor_.position = 0;
    ShuffleEpoch();
  }
  return order_[cursor_.position++];
}

}  // namespace tandem::data
