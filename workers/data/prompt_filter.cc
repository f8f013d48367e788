// Filtering a bounded data set by prompt length (prompt_filter.h).
#include "workers/data/prompt_filter.h"

#include <limits>
#include <string>

namespace tandem::data {

StatusOr<FilteredIndices> FilterByPromptLength(const Dataset& dataset, const PromptLengthLimit& limit) {
  const std::optional<size_t> n = dataset.size();
  if (!n)
    return InvalidArgument(std::string(dataset.name()) + ": an unbounded data set is filtered as it is drawn, not up front");
  FilteredIndices out;
  size_t shortest = std::numeric_limits<size_t>::max();
  for (size_t i = 0; i < *n; ++i) {
    TANDEM_ASSIGN_OR_RETURN(const Problem p, dataset.Get(i));
    const size_t tokens = limit.count(p);
    shortest = std::min(shortest, tokens);
    if (tokens <= limit.max_tokens) {
      out.kept.push_back(i);
      out.longest_kept = std::max(out.longest_kept, tokens);
    } else {
      ++out.dropped;
    }
  }
  if (out.kept.empty())
    return InvalidArgument("no prompt of " + std::string(dataset.name()) + " fits in " + std::to_string(limit.max_tokens) +
                           " tokens" + (*n > 0 ? "; the shortest has " + std::to_string(shortest) : std::string(" (it is empty)")));
  return out;
}

}  // namespace tandem::data
