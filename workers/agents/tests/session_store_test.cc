// Sessions (session_store.h): continuing a turn, branching, the same
// question again, the bounds, closing, and the export's ids and masks.
#include <gtest/gtest.h>

#include <memory>

#include "workers/agents/session_store.h"

namespace tandem::agents {
namespace {

constexpr int32_t kEnd = 99;

Message Msg(std::string role, std::string content) {
  Message m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

std::shared_ptr<Conversation> Ask(std::vector<Message> messages) {
  auto c = std::make_shared<Conversation>();
  c->messages = std::move(messages);
  return c;
}

Turn MakeTurn(int64_t parent, std::vector<int32_t> prompt, std::vector<int32_t> output, std::shared_ptr<Conversation> asked,
              std::string reply, int64_t version = 3) {
  Turn t;
  t.parent = parent;
  t.prompt_ids = std::move(prompt);
  t.output_ids = std::move(output);
  for (size_t i = 0; i < t.output_ids.size(); ++i) t.output_logprobs.push_back(-0.5f - static_cast<float>(i));
  t.weight_version = version;
  t.finish_reason = "stop";
  t.asked = std::move(asked);
  t.reply = Msg("assistant", std::move(reply));
  return t;
}

TEST(SessionStore, ASecondCallContinuesTheTurnItRepeats) {
  SessionStore store;
  auto serial = store.Open("ep", 0);
  ASSERT_TRUE(serial.ok());
  auto first = Ask({Msg("user", "hi")});
  EXPECT_EQ(store.FindParent("ep", *first, kEnd).kind, Parent::Kind::kNone);
  EXPECT_EQ(store.Record("ep", *serial, {MakeTurn(-1, {1, 2, 3}, {10, 11, kEnd}, first, "yo")}), std::vector<int64_t>{0});

  auto second = Ask({Msg("user", "hi"), Msg("assistant", "yo"), Msg("user", "more")});
  const Parent p = store.FindParent("ep", *second, kEnd);
  ASSERT_EQ(p.kind, Parent::Kind::kContinues);
  EXPECT_EQ(p.turn, 0);
  EXPECT_EQ(p.next_message, 2u);
  EXPECT_EQ(p.ids, (std::vector<int32_t>{1, 2, 3, 10, 11, kEnd}));
  EXPECT_TRUE(p.ended_on_turn_end);
  EXPECT_EQ(p.serial, *serial);

  // The reply changed by the client: not the same history, a new root.
  auto edited = Ask({Msg("user", "hi"), Msg("assistant", "YO"), Msg("user", "more")});
  EXPECT_EQ(store.FindParent("ep", *edited, kEnd).kind, Parent::Kind::kNone);
  // Another system prompt before: a new root too.
  auto other = Ask({Msg("system", "s"), Msg("user", "hi"), Msg("assistant", "yo"), Msg("user", "more")});
  EXPECT_EQ(store.FindParent("ep", *other, kEnd).kind, Parent::Kind::kNone);
  // Other tools: a new root.
  auto tooled = Ask({Msg("user", "hi"), Msg("assistant", "yo"), Msg("user", "more")});
  tooled->tools_key = "[...]";
  EXPECT_EQ(store.FindParent("ep", *tooled, kEnd).kind, Parent::Kind::kNone);
  // Another session sees nothing.
  auto s2 = store.Open("other", 0);
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(store.FindParent("other", *second, kEnd).kind, Parent::Kind::kNone);
}

TEST(SessionStore, TheSameQuestionAgainIsASibling) {
  SessionStore store;
  const uint64_t s = *store.Open("ep", 0);
  auto q = Ask({Msg("user", "hi")});
  store.Record("ep", s, {MakeTurn(-1, {1, 2}, {5, kEnd}, q, "a")});
  const Parent p = store.FindParent("ep", *Ask({Msg("user", "hi")}), kEnd);
  EXPECT_EQ(p.kind, Parent::Kind::kSamePrompt);
  EXPECT_EQ(p.turn, -1);
  EXPECT_EQ(p.ids, (std::vector<int32_t>{1, 2}));
}

TEST(SessionStore, TheLongestHistoryWinsAndBranchesShareTheirPrefix) {
  SessionStore store;
  const uint64_t s = *store.Open("ep", 0);
  auto q1 = Ask({Msg("user", "q")});
  // Two choices of one call (n = 2): siblings.
  store.Record("ep", s, {MakeTurn(-1, {1}, {10, kEnd}, q1, "a"), MakeTurn(-1, {1}, {20, kEnd}, q1, "b")});
  // Branch on the second choice.
  auto q2 = Ask({Msg("user", "q"), Msg("assistant", "b"), Msg("user", "q2")});
  Parent p = store.FindParent("ep", *q2, kEnd);
  ASSERT_EQ(p.kind, Parent::Kind::kContinues);
  EXPECT_EQ(p.turn, 1);
  store.Record("ep", s, {MakeTurn(1, {1, 20, kEnd, 7}, {30}, q2, "c", 4)});  // stopped on length: no end token
  auto q3 = Ask({Msg("user", "q"), Msg("assistant", "b"), Msg("user", "q2"), Msg("assistant", "c"), Msg("user", "q3")});
  p = store.FindParent("ep", *q3, kEnd);
  ASSERT_EQ(p.kind, Parent::Kind::kContinues);
  EXPECT_EQ(p.turn, 2);
  EXPECT_FALSE(p.ended_on_turn_end);
  store.Record("ep", s, {MakeTurn(2, {1, 20, kEnd, 7, 30, kEnd, 8}, {40, kEnd}, q3, "d", 5)});

  auto e = store.Export("ep");
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->turns.size(), 4u);
  const TokenRecord& last = e->turns[3];
  EXPECT_EQ(last.parent, 2);
  EXPECT_EQ(last.ids, (std::vector<int32_t>{1, 20, kEnd, 7, 30, kEnd, 8, 40, kEnd}));
  // 1 only where the model generated: turn 1's 20, end; turn 2's 30; its own 40, end.
  // The end token the proxy added after turn 2 (stopped on length) is 0.
  EXPECT_EQ(last.mask, (std::vector<uint8_t>{0, 1, 1, 0, 1, 0, 0, 1, 1}));
  EXPECT_EQ(last.weight_versions, (std::vector<int64_t>{-1, 3, 3, -1, 4, -1, -1, 5, 5}));
  EXPECT_FLOAT_EQ(last.logprobs[1], -0.5f);
  EXPECT_FLOAT_EQ(last.logprobs[2], -1.5f);
  EXPECT_FLOAT_EQ(last.logprobs[4], -0.5f);
  EXPECT_FLOAT_EQ(last.logprobs[3], 0.0f);
  EXPECT_EQ(last.prompt_tokens, 7u);
  // Every record's ids extend its parent's (one trie), and masks agree on shared prefixes.
  for (const TokenRecord& r : e->turns) {
    EXPECT_EQ(r.ids.size(), r.mask.size());
    EXPECT_EQ(r.ids.size(), r.logprobs.size());
    if (r.parent < 0) continue;
    const TokenRecord& up = e->turns[static_cast<size_t>(r.parent)];
    ASSERT_LE(up.ids.size(), r.ids.size());
    EXPECT_TRUE(std::equal(up.ids.begin(), up.ids.end(), r.ids.begin()));
    EXPECT_TRUE(std::equal(up.mask.begin(), up.mask.end(), r.mask.begin()));
  }
  // Tokens in the tree: 1 + 2 (turn 0), 1 + 2 (turn 1: a root counts its prompt),
  // 1 + 1 (turn 2), 2 + 2 (turn 3).
  EXPECT_EQ(e->tokens, 12u);
  const auto j = ExportJson(*e);
  EXPECT_EQ(j["turns"][3]["mask"].size(), 9u);
  EXPECT_TRUE(j["turns"][0]["parent"].is_null());
  EXPECT_EQ(j["turns"][3]["completion_tokens"], 2);
}

TEST(SessionStore, BoundsAreRefusals) {
  SessionLimits limits;
  limits.max_sessions = 2;
  limits.max_tokens = 10;
  limits.max_turns = 2;
  SessionStore store(limits);
  ASSERT_TRUE(store.Open("a", 0).ok());
  ASSERT_TRUE(store.Open("b", 0).ok());
  auto third = store.Open("c", 0);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(store.Open("a", 0).ok()) << "an open session is not a new one";

  const uint64_t s = *store.Open("a", 0);
  EXPECT_FALSE(store.Open("a", 11).ok()) << "over max_tokens";
  auto q = Ask({Msg("user", "q")});
  store.Record("a", s, {MakeTurn(-1, {1, 2, 3}, {4, 5}, q, "x")});
  auto over = store.Open("a", 6);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("limit of 10"), std::string::npos);
  // A call over the bound when it finishes is dropped, counted.
  EXPECT_EQ(store.Record("a", s, {MakeTurn(-1, {1, 2, 3, 4}, {5, 6}, q, "y")}), std::vector<int64_t>{-1});
  EXPECT_EQ(store.Export("a")->dropped_turns, 1u);
  store.Record("a", s, {MakeTurn(-1, {1}, {2}, q, "z")});
  EXPECT_FALSE(store.Open("a", 0).ok()) << "max_turns";
}

TEST(SessionStore, ClosingFreesEverythingAndALateCallRecordsNothing) {
  SessionLimits limits;
  limits.max_sessions = 1;
  SessionStore store(limits);
  const uint64_t s = *store.Open("ep", 0);
  auto q = Ask({Msg("user", "q")});
  store.Record("ep", s, {MakeTurn(-1, {1}, {2}, q, "a")});
  EXPECT_TRUE(store.Close("ep").ok());
  EXPECT_EQ(store.sessions(), 0u);
  EXPECT_EQ(store.Export("ep").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store.Close("ep").code(), StatusCode::kNotFound);
  // The slot is free again; a call of the closed session that finishes now
  // records nothing into the new one of the same name.
  const uint64_t again = *store.Open("ep", 0);
  EXPECT_NE(again, s);
  EXPECT_TRUE(store.Record("ep", s, {MakeTurn(-1, {1}, {2}, q, "late")}).empty());
  EXPECT_TRUE(store.Export("ep")->turns.empty());
  EXPECT_EQ(store.FindParent("ep", *q, kEnd).kind, Parent::Kind::kNone);
  EXPECT_EQ(store.FindParent("nothing", *q, kEnd).kind, Parent::Kind::kNone);
}

}  // namespace
}  // namespace tandem::agents
