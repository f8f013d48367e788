// The actor's replica protocol (actor_replicas.h): how a step's groups are
// dealt, and rank 0's messages, round trip and hostile bytes.
#include "workers/roles/actor_replicas.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

namespace tandem::roles {
namespace {

train::Trajectory T(int64_t group, size_t prompt, size_t response, double reward = 1) {
  train::Trajectory t;
  t.group = group;
  t.prompt.assign(prompt, 7);
  t.response.assign(response, 9);
  t.old_logprobs.assign(response, -0.5f);
  t.reward = reward;
  return t;
}

int64_t Tokens(const std::vector<train::Trajectory>& share) {
  int64_t n = 0;
  for (const train::Trajectory& t : share) n += static_cast<int64_t>(t.prompt.size() + t.response.size());
  return n;
}

TEST(DealGroups, WholeGroupsBalancedInTheirOrder) {
  // Groups of 40, 10, 30, 20 tokens (two trajectories each) over 2 ranks:
  // 40 -> 0, 30 -> 1, 20 -> 1, 10 -> 0: loads 50 and 50.
  std::vector<train::Trajectory> all;
  for (const auto& [g, len] : std::vector<std::pair<int64_t, size_t>>{{0, 10}, {1, 1}, {2, 7}, {3, 4}}) {
    all.push_back(T(g, len, len));
    all.push_back(T(g, 0, len == 1 ? 8 : (len == 7 ? 16 : (len == 4 ? 12 : 20))));
  }
  const auto shares = DealGroups(all, 2);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(Tokens(shares[0]), Tokens(shares[1]));
  std::multiset<int64_t> groups;
  for (const auto& share : shares) {
    for (size_t i = 0; i < share.size(); ++i) {
      groups.insert(share[i].group);
      if (i > 0) EXPECT_LE(share[i - 1].group, share[i].group) << "each share keeps the groups' order";
    }
  }
  EXPECT_EQ(groups, (std::multiset<int64_t>{0, 0, 1, 1, 2, 2, 3, 3})) << "every trajectory once, groups whole";
}

TEST(DealGroups, MoreRanksThanGroupsLeavesSomeEmpty) {
  const auto shares = DealGroups({T(5, 2, 3), T(5, 2, 4)}, 3);
  ASSERT_EQ(shares.size(), 3u);
  EXPECT_EQ(shares[0].size(), 2u);
  EXPECT_TRUE(shares[1].empty());
  EXPECT_TRUE(shares[2].empty());
  const auto none = DealGroups({}, 2);
  ASSERT_EQ(none.size(), 2u);
  EXPECT_TRUE(none[0].empty() && none[1].empty());
  EXPECT_EQ(DealGroups({T(0, 1, 1)}, 1)[0].size(), 1u);
}

TEST(ReplicaMessage, RoundTrips) {
  ReplicaMessage step;
  step.kind = ReplicaMessage::Kind::kStep;
  step.step = 12;
  step.progress = 0.25;
  step.check = true;
  step.shares = {{T(0, 3, 2, std::nan("")), T(0, 3, 1)}, {}};
  step.shares[0][0].prompt[1] = std::numeric_limits<int32_t>::max();
  step.shares[0][0].old_logprobs[1] = -1e-30f;
  step.shares[0][1].route = {0.3f, 0.7f};  // MOPD: a route and teacher log-probs (one teacher's empty)
  step.shares[0][1].teacher_logprobs = {{}, {-0.25f}};
  step.shares[0][1].teacher_top_ids = {{}, {7, 0}};  // and the teacher's top-2
  step.shares[0][1].teacher_top_logprobs = {{}, {-0.125f, -3.5f}};
  auto back = DecodeReplicaMessage(EncodeReplicaMessage(step), 2);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->kind, ReplicaMessage::Kind::kStep);
  EXPECT_EQ(back->step, 12);
  EXPECT_EQ(back->progress, 0.25);
  EXPECT_TRUE(back->check);
  ASSERT_EQ(back->shares.size(), 2u);
  ASSERT_EQ(back->shares[0].size(), 2u);
  EXPECT_TRUE(back->shares[1].empty());
  const train::Trajectory& t = back->shares[0][0];
  EXPECT_EQ(t.prompt, step.shares[0][0].prompt);
  EXPECT_EQ(t.response, step.shares[0][0].response);
  EXPECT_EQ(t.old_logprobs, step.shares[0][0].old_logprobs) << "log-probs exact";
  EXPECT_TRUE(std::isnan(t.reward)) << "a NaN reward travels (the trainer drops it)";
  EXPECT_TRUE(t.route.empty() && t.teacher_logprobs.empty());
  EXPECT_EQ(back->shares[0][1].route, step.shares[0][1].route);
  EXPECT_EQ(back->shares[0][1].teacher_logprobs, step.shares[0][1].teacher_logprobs);
  EXPECT_EQ(back->shares[0][1].teacher_top_ids, step.shares[0][1].teacher_top_ids);
  EXPECT_EQ(back->shares[0][1].teacher_top_logprobs, step.shares[0][1].teacher_top_logprobs);
  EXPECT_TRUE(t.teacher_top_ids.empty() && t.teacher_top_logprobs.empty());

  for (const ReplicaMessage::Kind k : {ReplicaMessage::Kind::kStart, ReplicaMessage::Kind::kEnd, ReplicaMessage::Kind::kAbort}) {
    ReplicaMessage m;
    m.kind = k;
    m.checkpoint = "checkpoints/step-00000002";
    m.error = "INTERNAL: x";
    auto r = DecodeReplicaMessage(EncodeReplicaMessage(m), 4);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->kind, k);
    if (k == ReplicaMessage::Kind::kStart) EXPECT_EQ(r->checkpoint, m.checkpoint);
    if (k == ReplicaMessage::Kind::kAbort) EXPECT_EQ(r->error, m.error);
  }
}

TEST(ReplicaMessage, HostileBytesAreErrorsNamingWhat) {
  using nlohmann::json;
  auto bytes = [](const json& j) {
    const std::vector<uint8_t> b = json::to_msgpack(j);
    return std::string(b.begin(), b.end());
  };
  auto with = [](json base, const json& patch) {
    base.merge_patch(patch);
    return base;
  };
  const json good_t = {{"p", {1, 2}}, {"r", {3}}, {"l", {-0.1}}, {"w", 1.0}, {"g", 0}};
  const json step = {{"kind", "step"}, {"step", 1}, {"progress", 0.5}, {"check", false}, {"shares", {json::array({good_t}), json::array()}}};
  ASSERT_TRUE(DecodeReplicaMessage(bytes(step), 2).ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {std::string("\xc1\xff\x00", 3), "not a MessagePack object"},
      {"", "not a MessagePack object"},
      {bytes(json::array()), "not a MessagePack object"},
      {bytes({{"kind", "launch"}}), "unknown kind 'launch'"},
      {bytes({{"kind", 3}}), "no kind"},
      {bytes({{"kind", "start"}}), "checkpoint"},
      {bytes(with(step, {{"shares", {json::array()}}})), "shares: expected an array of 2"},
      {bytes(with(step, {{"step", 0}})), "step: expected an integer >= 1"},
      {bytes(with(step, {{"progress", 2}})), "progress"},
      {bytes(with(step, {{"check", "yes"}})), "check"},
      {bytes(with(step, {{"shares", {json::array({with(good_t, {{"p", {1, 1ll << 40}}})}), json::array()}}})),
       "shares[0][0].p: expected 32-bit integers"},
      {bytes(with(step, {{"shares", {json::array({with(good_t, {{"l", {"x"}}})}), json::array()}}})),
       "shares[0][0].l: expected numbers"},
      {bytes(with(step, {{"shares", {json::array({with(good_t, {{"o", {"x"}}})}), json::array()}}})),
       "shares[0][0].o: expected numbers"},
      {bytes(with(step, {{"shares", {json::array({with(good_t, {{"t", 1}})}), json::array()}}})),
       "shares[0][0].t: expected an array per teacher"},
      {bytes(with(step, {{"shares", {json::array({with(good_t, {{"t", {{-1}, 2}}})}), json::array()}}})),
       "shares[0][0].t[1]: expected an array of numbers"},
      {bytes(with(step, {{"shares", {json::array({with(good_t, {{"ti", {{1, 2.5}}}})}), json::array()}}})),
       "shares[0][0].ti[0]: expected 32-bit integers"},
      {bytes(with(step, {{"shares", {json::array({with(good_t, {{"tl", {"x"}}})}), json::array()}}})),
       "shares[0][0].tl[0]: expected an array of numbers"},
      {bytes(with(step, {{"shares", {json::array({with(good_t, {{"g", 0.5}})}), json::array()}}})),
       "shares[0][0].g"},
      {bytes(with(step, {{"shares", {json::array({1}), json::array()}}})), "shares[0][0]: expected an object"},
  };
  for (const auto& [in, want] : cases) {
    auto r = DecodeReplicaMessage(in, 2);
    ASSERT_FALSE(r.ok()) << want;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().ToString() << " / want: " << want;
  }
}

}  // namespace
}  // namespace tandem::roles
