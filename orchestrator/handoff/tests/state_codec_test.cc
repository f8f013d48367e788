// The engine state's JSON form (state_codec.h): at every step of whole
// handoffs, faults and refusals included, a state restored from its snapshot
// continues exactly as the original (same actions, same next state), and
// snapshots the codec cannot have written are refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "orchestrator/handoff/event_codec.h"
#include "orchestrator/handoff/state_codec.h"
#include "orchestrator/handoff/tests/group_sim.h"

namespace tandem::handoff::testing {
namespace {

using ::testing::HasSubstr;

// Feeds `e` to `g` and, beside it, to a state restored from g's snapshot
// taken just before; both must produce the same actions and the same state.
void CheckedFeed(Group& g, const Event& e) {
  const nlohmann::json before = StateToJson(g.state);
  auto restored = StateFromJson(before, g.state.config);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  ASSERT_EQ(StateToJson(*restored), before) << "the round trip changes the snapshot";
  ApplyResult shadow = Apply(*restored, e);
  g.Feed(e);
  EXPECT_EQ(Group::Describe(shadow.actions, false), Group::Describe(g.last, false));
  EXPECT_EQ(shadow.actions.size(), g.last.size());
  EXPECT_EQ(shadow.transitions, g.last_ids);
  EXPECT_EQ(StateToJson(shadow.state), StateToJson(g.state)) << "after " << EventToJson(e).dump();
}

void AckNext(Group& g) {
  SendCommand c = g.pending.front();
  g.pending.pop_front();
  CheckedFeed(g, g.Perform(c));
}

void Enter(Group& g, Phase p) {
  CheckedFeed(g, RequestPhase{p, g.Now()});
  while (!g.pending.empty()) AckNext(g);
}

void HelloAll(Group& g) {
  std::vector<std::pair<WorkerId, RoleKind>> workers;
  for (const auto& [w, ws] : g.state.workers) workers.emplace_back(w, ws.kind);
  for (const auto& [w, kind] : workers) CheckedFeed(g, Hello{w, SizesOf(kind), {}, {}, g.Now()});
}

TEST(HandoffStateCodec, WholeCyclesContinueIdentically) {
  Group g({.rollout_ranks = 2, .capacity = 200});
  HelloAll(g);
  for (int v = 1; v <= 2; ++v) {
    Enter(g, Rollout());
    Enter(g, Teacher(0));
    Enter(g, Train());
    Enter(g, Sync(v));
  }
  EXPECT_EQ(g.state.published_version, 2);
  EXPECT_EQ(g.state.mode, Mode::kSettled);
}

TEST(HandoffStateCodec, FaultsRestartsAndLeaksContinueIdentically) {
  Group g;
  HelloAll(g);
  Enter(g, Rollout());
  Enter(g, Train());
  // The actor dies mid-SYNC with the reader's load in flight; it comes back.
  CheckedFeed(g, RequestPhase{Sync(1), g.Now()});
  while (g.pending.front().kind != CommandKind::kLoadWeights) AckNext(g);
  CheckedFeed(g, WorkerDied{kActor, "killed", g.Now()});
  g.resident.erase(kActor);
  EXPECT_FALSE(g.state.down.empty());
  AckNext(g);
  CheckedFeed(g, Hello{kActor, SizesOf(RoleKind::kActor), {}, {}, g.Now()});
  while (!g.pending.empty()) AckNext(g);
  EXPECT_EQ(g.state.phase, Sync(1));
  // A release that keeps its memory on the device (a leak), an error, a timeout.
  g.leak_releases = true;
  Enter(g, Rollout());
  g.leak_releases = false;
  CheckedFeed(g, RequestPhase{Train(), g.Now()});
  SendCommand c = g.pending.front();
  g.pending.pop_front();
  CheckedFeed(g, WorkerError{c.worker, c.command_id, "cuda error", g.resident[c.worker], g.Reading(), g.Now()});
  CheckedFeed(g, Timeout{c.worker, c.command_id + 100, g.Now()});
  EXPECT_NE(g.state.mode, Mode::kSettled);
}

TEST(HandoffStateCodec, RefusedAndFailedGroupsContinueIdentically) {
  Group small({.capacity = 60});
  HelloAll(small);
  Enter(small, Rollout());
  Enter(small, Train());  // refused: the optimizer would not fit
  Group failing({.on_fault = OnFault::kFail});
  HelloAll(failing);
  Enter(failing, Rollout());
  CheckedFeed(failing, WorkerDied{kRollout, "segfault", failing.Now()});
  EXPECT_EQ(failing.state.mode, Mode::kFailed);
  CheckedFeed(failing, RequestPhase{Train(), failing.Now()});
}

TEST(HandoffStateCodec, RefusesSnapshotsItCannotHaveWritten) {
  Group g;
  HelloAll(g);
  Enter(g, Rollout());
  const nlohmann::json good = StateToJson(g.state);

  nlohmann::json foreign = good;
  foreign["workers"][0]["role"] = "stranger";
  auto r = StateFromJson(foreign, g.state.config);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("stranger/0"));

  nlohmann::json missing = good;
  missing["workers"].erase(0);
  EXPECT_EQ(StateFromJson(missing, g.state.config).status().code(), StatusCode::kDataLoss);

  for (const char* key : {"phase", "mode", "ledger", "next_command_id"}) {
    nlohmann::json broken = good;
    broken.erase(key);
    EXPECT_EQ(StateFromJson(broken, g.state.config).status().code(), StatusCode::kDataLoss) << key;
  }
  nlohmann::json bad_mode = good;
  bad_mode["mode"] = "sleeping";
  EXPECT_THAT(StateFromJson(bad_mode, g.state.config).status().message(), HasSubstr("sleeping"));
  EXPECT_EQ(StateFromJson(nlohmann::json::array(), g.state.config).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tandem::handoff::testing
