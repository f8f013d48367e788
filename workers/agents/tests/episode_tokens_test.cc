// An episode's session cut into training sequences (episode_tokens.h).
#include <gtest/gtest.h>

#include "workers/agents/episode_tokens.h"

namespace tandem::agents {
namespace {

// A two-turn chain: prompt {1, 2}, the model's {3, 4}, the environment's
// {5, 6}, the model's {7}.
SessionExport Chain() {
  SessionExport e;
  e.session_id = "ep";
  TokenRecord first;
  first.turn = 0;
  first.ids = {1, 2, 3, 4};
  first.mask = {0, 0, 1, 1};
  first.logprobs = {0, 0, -0.5f, -0.25f};
  first.weight_versions = {-1, -1, 3, 3};
  first.prompt_tokens = 2;
  TokenRecord second;
  second.turn = 1;
  second.parent = 0;
  second.ids = {1, 2, 3, 4, 5, 6, 7};
  second.mask = {0, 0, 1, 1, 0, 0, 1};
  second.logprobs = {0, 0, -0.5f, -0.25f, 0, 0, -1};
  second.weight_versions = {-1, -1, 3, 3, -1, -1, 4};
  second.prompt_tokens = 6;
  e.turns = {first, second};
  return e;
}

TEST(EpisodeTokens, PerEpisodeOneMaskedSequencePerLeaf) {
  Episode ep;
  ep.reward = 0.5;
  ep.turn_rewards = {0, 0.5};
  auto seqs = EpisodeSequences(Chain(), ep, AdvantageUnit::kEpisode);
  ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
  ASSERT_EQ(seqs->size(), 1u);
  const EpisodeSequence& s = (*seqs)[0];
  EXPECT_EQ(s.prompt, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(s.response, (std::vector<int32_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(s.trained, (std::vector<uint8_t>{1, 1, 0, 0, 1}));
  EXPECT_EQ(s.logprobs, (std::vector<float>{-0.5f, -0.25f, 0, 0, -1}));
  EXPECT_EQ(s.reward, 0.5);
  EXPECT_EQ(s.weight_version, 3);

  // A second branch from turn 0 (the agent asked again differently): two leaves.
  SessionExport forked = Chain();
  TokenRecord other = forked.turns[1];
  other.turn = 2;
  other.ids.back() = 8;
  forked.turns.push_back(other);
  seqs = EpisodeSequences(forked, ep, AdvantageUnit::kEpisode);
  ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
  ASSERT_EQ(seqs->size(), 2u);
  EXPECT_EQ((*seqs)[1].response.back(), 8);
}

TEST(EpisodeTokens, PerTurnRewardsToGo) {
  Episode ep;
  ep.reward = 0.5;
  ep.turn_rewards = {0.25, 0.25};
  auto seqs = EpisodeSequences(Chain(), ep, AdvantageUnit::kTurn);
  ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
  ASSERT_EQ(seqs->size(), 2u);
  EXPECT_EQ((*seqs)[0].prompt, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ((*seqs)[0].response, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ((*seqs)[0].reward, 0.5);
  EXPECT_EQ((*seqs)[1].prompt, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ((*seqs)[1].response, (std::vector<int32_t>{7}));
  EXPECT_EQ((*seqs)[1].trained, (std::vector<uint8_t>{1}));
  EXPECT_EQ((*seqs)[1].reward, 0.25);
  EXPECT_EQ((*seqs)[1].weight_version, 4);
}

TEST(EpisodeTokens, RefusesAnExportItCannotTrust) {
  Episode ep;
  ep.turn_rewards = {0, 0};
  SessionExport dropped = Chain();
  dropped.dropped_turns = 1;
  SessionExport short_mask = Chain();
  short_mask.turns[1].mask.pop_back();
  SessionExport nothing_generated = Chain();
  nothing_generated.turns[1].mask.assign(7, 0);
  nothing_generated.turns[0].mask.assign(4, 0);
  const std::pair<SessionExport, const char*> table[] = {
      {dropped, "1 turns were dropped over its bounds"},
      {short_mask, "turn 1: mask, log-probs or versions do not match its 7 tokens"},
      {nothing_generated, "turn 1: no generated tokens"},
      {SessionExport{}, "no turns recorded"},
  };
  for (const auto& [e, want] : table) {
    auto seqs = EpisodeSequences(e, ep, AdvantageUnit::kEpisode);
    ASSERT_FALSE(seqs.ok()) << want;
    EXPECT_NE(seqs.status().message().find(want), std::string::npos) << seqs.status().message();
  }
  ep.turn_rewards = {1};
  auto seqs = EpisodeSequences(Chain(), ep, AdvantageUnit::kTurn);
  ASSERT_FALSE(seqs.ok());
  EXPECT_NE(seqs.status().message().find("2 recorded turns for 1 model turns"), std::string::npos)
      << seqs.status().message();
}

}  // namespace
}  // namespace tandem::agents
