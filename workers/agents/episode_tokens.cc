// An episode's training sequences (episode_tokens.h).
#include "workers/agents/episode_tokens.h"

#include <algorithm>
#include <numeric>

namespace tandem::agents {
namespace {

// The sequence of turn record `r` from token `from` on.
StatusOr<EpisodeSequence> Cut(const TokenRecord& r, size_t from, double reward) {
  const std::string where = "turn " + std::to_string(r.turn);
  if (r.mask.size() != r.ids.size() || r.logprobs.size() != r.ids.size() || r.weight_versions.size() != r.ids.size())
    return InvalidArgument(where + ": mask, log-probs or versions do not match its " + std::to_string(r.ids.size()) +
                           " tokens");
  if (from >= r.ids.size()) return InvalidArgument(where + ": no generated tokens");
  EpisodeSequence s;
  s.prompt.assign(r.ids.begin(), r.ids.begin() + static_cast<std::ptrdiff_t>(from));
  s.response.assign(r.ids.begin() + static_cast<std::ptrdiff_t>(from), r.ids.end());
  s.trained.assign(r.mask.begin() + static_cast<std::ptrdiff_t>(from), r.mask.end());
  s.logprobs.assign(r.logprobs.begin() + static_cast<std::ptrdiff_t>(from), r.logprobs.end());
  for (size_t i = from; i < r.ids.size(); ++i) {
    if (!r.mask[i]) {
      s.logprobs[i - from] = 0;
      continue;
    }
    const int64_t v = r.weight_versions[i];
    if (v >= 0 && (s.weight_version < 0 || v < s.weight_version)) s.weight_version = v;
  }
  if (std::find(s.trained.begin(), s.trained.end(), 1) == s.trained.end())
    return InvalidArgument(where + ": no generated tokens");
  s.reward = reward;
  return s;
}

}  // namespace

StatusOr<std::vector<EpisodeSequence>> EpisodeSequences(const SessionExport& session, const Episode& episode,
                                                        AdvantageUnit unit) {
  const std::string where = "session " + session.session_id;
  if (session.dropped_turns > 0)
    return InvalidArgument(where + ": " + std::to_string(session.dropped_turns) + " turns were dropped over its bounds");
  if (session.turns.empty()) return InvalidArgument(where + ": no turns recorded");
  std::vector<EpisodeSequence> out;
  if (unit == AdvantageUnit::kTurn) {
    if (session.turns.size() != episode.turn_rewards.size())
      return InvalidArgument(where + ": " + std::to_string(session.turns.size()) + " recorded turns for " +
                             std::to_string(episode.turn_rewards.size()) + " model turns");
    double to_go = std::accumulate(episode.turn_rewards.begin(), episode.turn_rewards.end(), 0.0);
    for (size_t k = 0; k < session.turns.size(); ++k) {
      TANDEM_ASSIGN_OR_RETURN(EpisodeSequence s, Cut(session.turns[k], session.turns[k].prompt_tokens, to_go), where);
      to_go -= episode.turn_rewards[k];
      out.push_back(std::move(s));
    }
    return out;
  }
  std::vector<bool> continued(session.turns.size(), false);
  for (const TokenRecord& r : session.turns)
    for (size_t k = 0; k < session.turns.size(); ++k)
      if (session.turns[k].turn == r.parent) continued[k] = true;
  for (size_t k = 0; k < session.turns.size(); ++k) {
    if (continued[k]) continue;
    const TokenRecord& r = session.turns[k];
    const size_t first = static_cast<size_t>(std::find(r.mask.begin(), r.mask.end(), 1) - r.mask.begin());
    TANDEM_ASSIGN_OR_RETURN(EpisodeSequence s, Cut(r, first, episode.reward), where);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tandem::agents
