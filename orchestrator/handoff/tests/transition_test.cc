// The handoff transition function as a table (transition.h): state x event
// -> expected mode/phase, commands and transition ids; plus the whole
// docs/handoff.md choreography as a golden sequence, checked against the ordering
// rules on the simulated workers' real residency after every answer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "orchestrator/handoff/tests/group_sim.h"

namespace tandem::handoff::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The rules, on what the workers really hold.
void ExpectSafe(const Group& g) {
  auto holds = [&](const WorkerId& w, Tag t) {
    auto it = g.resident.find(w);
    return it != g.resident.end() && it->second.count(t) > 0;
  };
  const bool training = holds(kActor, Tag::kOptimizer) || holds(kActor, Tag::kGrads);
  for (const WorkerId& w : {kRollout, kJudge}) {
    for (Tag t : {Tag::kWeights, Tag::kKvCache, Tag::kCudaGraph}) {
      EXPECT_FALSE(training && holds(w, t)) << w.ToString() << " holds " << TagName(t)
                                            << " while the actor holds training state";
    }
  }
  EXPECT_LE(g.Reading()[0].used, g.state.config->capacity.at(0)) << "over capacity";
}

TEST(HandoffChoreography, AFullCycleFollowsDesignMd) {
  Group g;
  g.HelloAll();
  std::vector<std::string> sent;
  auto enter = [&](Phase p) {
    g.Feed(RequestPhase{p, g.Now()});
    for (auto& s : g.Sent()) sent.push_back(s);
    while (!g.pending.empty()) {
      g.AckNext();
      ExpectSafe(g);
      for (auto& s : g.Sent()) sent.push_back(s);
    }
    EXPECT_EQ(g.state.mode, Mode::kSettled);
    EXPECT_EQ(g.state.phase, p);
  };
  enter(Rollout());
  enter(Teacher(0));
  enter(Train());
  enter(Sync(1));
  enter(Rollout());
  EXPECT_THAT(sent, ElementsAreArray<std::string>({
                        // INIT -> ROLLOUT
                        "rollout/0 resume weights,kv_cache",
                        "rollout/0 resume cuda_graph",
                        "rollout/0 continue",
                        // -> TEACHER(0): rollout pauses and releases before the teacher resumes
                        "rollout/0 pause",
                        "rollout/0 release weights,kv_cache,cuda_graph",
                        "judge/0 resume weights",
                        "judge/0 continue",
                        // -> TRAIN: the teacher releases before the actor resumes
                        "judge/0 pause",
                        "judge/0 release weights",
                        "actor/0 resume params,grads,optimizer",
                        "actor/0 continue",
                        // -> SYNC(1): training state goes before the reader resumes;
                        // exports go after every reader loaded
                        "actor/0 pause",
                        "actor/0 release grads,optimizer",
                        "actor/0 publish_weights v1",
                        "rollout/0 resume weights",
                        "rollout/0 load_weights v1",
                        "actor/0 release ipc_exports",
                        // -> ROLLOUT: graphs come back after publication
                        "actor/0 release params",
                        "rollout/0 resume kv_cache",
                        "rollout/0 resume cuda_graph",
                        "rollout/0 continue",
                    }));
}

TEST(HandoffChoreography, ExportsWaitForEveryReader) {
  Group g({.rollout_ranks = 2, .capacity = 200});
  g.HelloAll();
  g.Enter(Rollout());
  g.Enter(Train());
  g.Feed(RequestPhase{Sync(1), g.Now()});
  std::vector<SendCommand> loads;
  while (!g.pending.empty()) {
    if (g.pending.front().kind == CommandKind::kLoadWeights) {
      loads.push_back(g.pending.front());
      g.pending.pop_front();
      continue;
    }
    g.AckNext();
  }
  ASSERT_EQ(loads.size(), 2u);
  g.Feed(g.Perform(loads[0]));
  EXPECT_THAT(g.Sent(), IsEmpty()) << "exports freed before the second reader acknowledged";
  EXPECT_THAT(g.last_ids, ElementsAre("T4"));
  g.Feed(g.Perform(loads[0]));  // a duplicate ack
  EXPECT_THAT(g.last_ids, ElementsAre("T7"));
  EXPECT_THAT(g.Sent(), IsEmpty());
  g.Feed(g.Perform(loads[1]));
  EXPECT_THAT(g.Sent(), ElementsAre("actor/0 release ipc_exports"));
}

// ---- The table --------------------------------------------------------------

struct Row {
  std::string name;
  GroupOptions options;
  std::function<void(Group&)> setup;           // brings the group to the row's state
  std::function<Event(Group&)> event;
  std::vector<std::string> controls;           // expected commands and outcomes
  std::vector<std::string_view> ids;           // expected transition ids
  Mode mode;
};

void Ready(Group& g) { g.HelloAll(); }
void InRollout(Group& g) { g.HelloAll(); g.Enter(Rollout()); }
void InTrain(Group& g) { InRollout(g); g.Enter(Train()); }
void InSync1(Group& g) { InTrain(g); g.Enter(Sync(1)); }
// Entering TRAIN from ROLLOUT, the rollout's pause acked, its release sent.
void MidRelease(Group& g) {
  InRollout(g);
  g.Feed(RequestPhase{Train(), g.Now()});
  g.AckNext();
}
uint64_t PendingId(Group& g) { return g.pending.front().command_id; }

Event AckPending(Group& g) { return g.Perform(g.pending.front()); }

const std::vector<Row>& Table() {
  static const std::vector<Row> rows = {
      {"request before every hello is refused", {}, [](Group&) {},
       [](Group& g) { return RequestPhase{Rollout(), g.Now()}; }, {"refused ROLLOUT"}, {"T3"}, Mode::kSettled},
      {"hello is recorded", {}, [](Group&) {},
       [](Group& g) { return Hello{kRollout, SizesOf(RoleKind::kRollout), {}, {}, g.Now()}; }, {}, {"T14"},
       Mode::kSettled},
      {"first ROLLOUT resumes the rollout", {}, Ready,
       [](Group& g) { return RequestPhase{Rollout(), g.Now()}; }, {"rollout/0 resume weights,kv_cache"},
       {"T1"}, Mode::kTransition},
      {"TRAIN starts by pausing the rollout", {}, InRollout,
       [](Group& g) { return RequestPhase{Train(), g.Now()}; }, {"rollout/0 pause"}, {"T1"},
       Mode::kTransition},
      {"the pause ack sends the release", {}, InRollout,
       [](Group& g) {
         g.Feed(RequestPhase{Train(), g.Now()});
         return AckPending(g);
       },
       {"rollout/0 release weights,kv_cache,cuda_graph"}, {"T5"}, Mode::kTransition},
      {"the same request while entering it is a no-op", {}, MidRelease,
       [](Group& g) { return RequestPhase{Train(), g.Now()}; }, {}, {"T2"}, Mode::kTransition},
      {"another request while busy is refused", {}, MidRelease,
       [](Group& g) { return RequestPhase{Sync(1), g.Now()}; }, {"refused SYNC(1)"}, {"T3"},
       Mode::kTransition},
      {"requesting the current phase answers at once", {}, InRollout,
       [](Group& g) { return RequestPhase{Rollout(), g.Now()}; }, {"reached ROLLOUT"}, {"T2"},
       Mode::kSettled},
      {"a stale version is refused", {},
       [](Group& g) {
         InSync1(g);
         g.Enter(Rollout());
       },
       [](Group& g) { return RequestPhase{Sync(1), g.Now()}; }, {"refused SYNC(1)"}, {"T3"}, Mode::kSettled},
      {"an unknown teacher is refused", {}, InRollout,
       [](Group& g) { return RequestPhase{Teacher(3), g.Now()}; }, {"refused TEACHER(3)"}, {"T3"},
       Mode::kSettled},
      {"a late ack of an answered command changes nothing", {}, InRollout,
       [](Group& g) { return Ack{kRollout, 1, {}, {}, g.Now()}; }, {}, {"T7"}, Mode::kSettled},
      {"an ack with a wrong worker changes nothing", {}, MidRelease,
       [](Group& g) { return Ack{kActor, PendingId(g), {}, {}, g.Now()}; }, {}, {"T7"}, Mode::kTransition},
      {"a late timeout changes nothing", {}, InRollout,
       [](Group& g) { return Timeout{kRollout, 2, g.Now()}; }, {}, {"T7"}, Mode::kSettled},
      {"an unknown worker is ignored", {}, MidRelease,
       [](Group& g) { return Ack{{"ghost", 0}, PendingId(g), {}, {}, g.Now()}; }, {}, {"T16"},
       Mode::kTransition},
      {"death mid-release restarts the worker", {}, MidRelease,
       [](Group& g) { return WorkerDied{kRollout, "killed", g.Now()}; }, {"restart rollout/0"},
       {"T9", "T11"}, Mode::kFaulted},
      {"death mid-release fails the group (on_fault fail)", {.on_fault = OnFault::kFail}, MidRelease,
       [](Group& g) { return WorkerDied{kRollout, "killed", g.Now()}; }, {"failed"}, {"T9", "T10"},
       Mode::kFailed},
      {"a timeout mid-release restarts the worker", {}, MidRelease,
       [](Group& g) { return Timeout{kRollout, PendingId(g), g.Now()}; }, {"restart rollout/0"},
       {"T8", "T11"}, Mode::kFaulted},
      {"an error answer faults the group", {.on_fault = OnFault::kFail}, MidRelease,
       [](Group& g) { return WorkerError{kRollout, PendingId(g), "cuda error", {}, {}, g.Now()}; },
       {"failed"}, {"T8", "T10"}, Mode::kFailed},
      {"a second death report is ignored", {},
       [](Group& g) {
         MidRelease(g);
         g.Feed(WorkerDied{kRollout, "killed", g.Now()});
       },
       [](Group& g) { return WorkerDied{kRollout, "connection closed", g.Now()}; }, {}, {"T7"},
       Mode::kFaulted},
      {"a failed group refuses phases", {.on_fault = OnFault::kFail},
       [](Group& g) {
         InRollout(g);
         g.Feed(WorkerDied{kActor, "killed", g.Now()});
       },
       [](Group& g) { return RequestPhase{Train(), g.Now()}; }, {"refused TRAIN"}, {"T3"}, Mode::kFailed},
      {"a failed group ignores hellos", {.on_fault = OnFault::kFail},
       [](Group& g) {
         InRollout(g);
         g.Feed(WorkerDied{kActor, "killed", g.Now()});
       },
       [](Group& g) { return Hello{kActor, SizesOf(RoleKind::kActor), {}, {}, g.Now()}; }, {}, {"T16"},
       Mode::kFailed},
      {"a restarted rollout gets its memory back (no version yet)", {},
       [](Group& g) {
         InRollout(g);
         g.Feed(WorkerDied{kRollout, "killed", g.Now()});
         g.resident.erase(kRollout);
       },
       [](Group& g) { return Hello{kRollout, SizesOf(RoleKind::kRollout), {}, {}, g.Now()}; },
       {"rollout/0 resume weights,kv_cache"}, {"T12"}, Mode::kRecovering},
      {"a restarted reader reloads the last published version", {},
       [](Group& g) {
         InSync1(g);
         g.Enter(Rollout());
         g.Feed(WorkerDied{kRollout, "killed", g.Now()});
         g.resident.erase(kRollout);
         g.Feed(Hello{kRollout, SizesOf(RoleKind::kRollout), {}, {}, g.Now()});
       },
       AckPending, {"rollout/0 load_weights v1"}, {"T5"}, Mode::kRecovering},
      {"recovery done: the transition runs again", {},
       [](Group& g) {
         InRollout(g);
         g.Feed(WorkerDied{kRollout, "killed", g.Now()});
         g.resident.erase(kRollout);
         g.Feed(Hello{kRollout, SizesOf(RoleKind::kRollout), {}, {}, g.Now()});
         g.AckNext();  // resume weights,kv_cache
       },
       AckPending, {"rollout/0 continue"}, {"T5", "T13"}, Mode::kTransition},
      {"the dead worker's own ack after the fault changes nothing", {},
       [](Group& g) {
         MidRelease(g);
         g.Feed(WorkerDied{kRollout, "killed", g.Now()});
       },
       [](Group& g) { return g.Perform(g.pending.front()); }, {}, {"T7"}, Mode::kFaulted},
      {"a resume that does not fit is refused and the group settles in no phase", {.capacity = 60}, InRollout,
       [](Group& g) {
         g.Feed(RequestPhase{Train(), g.Now()});
         g.AckNext();        // pause
         return AckPending(g);  // release -> resume params,grads,optimizer (70 > 60)
       },
       {"refused TRAIN"}, {"T5", "T15"}, Mode::kSettled},
      {"a resume that does not fit fails the group when on_fault says fail",
       {.capacity = 60, .on_fault = OnFault::kFail, .on_refusal = OnRefusal::kFail}, InRollout,
       [](Group& g) {
         g.Feed(RequestPhase{Train(), g.Now()});
         g.AckNext();        // pause
         return AckPending(g);  // release -> resume params,grads,optimizer (70 > 60)
       },
       {"refused TRAIN", "failed"}, {"T5", "T15"}, Mode::kFailed},
  };
  return rows;
}

class HandoffTable : public ::testing::TestWithParam<size_t> {};

TEST_P(HandoffTable, Row) {
  const Row& row = Table()[GetParam()];
  SCOPED_TRACE(row.name);
  Group g(row.options);
  row.setup(g);
  const Event e = row.event(g);
  const GroupState before = g.state;
  g.Feed(e);
  EXPECT_THAT(g.Controls(), ElementsAreArray(row.controls));
  EXPECT_THAT(g.last_ids, ElementsAreArray(row.ids));
  EXPECT_EQ(ModeName(g.state.mode), ModeName(row.mode));
  // A repeated event never sends a command twice.
  ApplyResult again = Apply(g.state, e);
  for (const Action& a : again.actions) {
    if (const auto* c = std::get_if<SendCommand>(&a)) {
      for (const Action& b : g.last) {
        if (const auto* d = std::get_if<SendCommand>(&b)) {
          EXPECT_FALSE(c->worker == d->worker && c->kind == d->kind && c->tags == d->tags)
              << "repeating the event re-sent " << Group::Describe(*c);
        }
      }
    }
  }
  (void)before;
}

INSTANTIATE_TEST_SUITE_P(Rows, HandoffTable, ::testing::Range<size_t>(0, Table().size()),
                         [](const ::testing::TestParamInfo<size_t>& row_info) {
                           std::string n = Table()[row_info.param].name;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

TEST(HandoffFaults, RefusalNamesTheGpuRolesAndBytes) {
  Group g({.capacity = 60});
  InRollout(g);
  g.Feed(RequestPhase{Train(), g.Now()});
  g.AckNext();
  g.AckNext();
  std::string why;
  for (const Action& a : g.last) {
    if (const auto* r = std::get_if<PhaseRefused>(&a)) why = r->reason;
  }
  EXPECT_THAT(why, HasSubstr("gpu 0"));
  EXPECT_THAT(why, HasSubstr("actor/0 optimizer=30"));
  EXPECT_THAT(why, HasSubstr("capacity 60"));
}

// A busy group's refusal is transient (the daemon answers `unavailable`,
// which a controller asks again after); a stale version's is not.
TEST(HandoffRefusals, BusyIsTransientAStaleVersionIsNot) {
  auto refusal = [](const Group& g) -> std::optional<PhaseRefused> {
    for (const Action& a : g.last)
      if (const auto* r = std::get_if<PhaseRefused>(&a)) return *r;
    return std::nullopt;
  };
  Group busy;
  MidRelease(busy);
  busy.Feed(RequestPhase{Sync(1), busy.Now()});
  ASSERT_TRUE(refusal(busy));
  EXPECT_TRUE(refusal(busy)->transient) << refusal(busy)->reason;
  Group stale;
  InSync1(stale);
  stale.Enter(Rollout());
  stale.Feed(RequestPhase{Sync(1), stale.Now()});
  ASSERT_TRUE(refusal(stale));
  EXPECT_FALSE(refusal(stale)->transient) << refusal(stale)->reason;
}

// on_fault "fail" given explicitly: the refusal fails the group, with the
// ledger's message as the cause the job reports.
TEST(HandoffFaults, RefusalFailsTheGroupOnlyWhenOnFaultSaysFail) {
  Group g({.capacity = 60, .on_fault = OnFault::kFail, .on_refusal = OnRefusal::kFail});
  InRollout(g);
  g.Feed(RequestPhase{Train(), g.Now()});
  g.AckNext();
  g.AckNext();
  std::string cause;
  for (const Action& a : g.last) {
    if (const auto* f = std::get_if<GroupFailed>(&a)) cause = f->cause;
  }
  EXPECT_THAT(cause, HasSubstr("phase TRAIN refused: "));
  EXPECT_THAT(cause, HasSubstr("actor/0 optimizer=30"));
  EXPECT_EQ(g.state.mode, Mode::kFailed);
  // The same refusal under on_fault=fail but the default refusal policy: goes on.
  Group goes_on({.capacity = 60, .on_fault = OnFault::kFail});
  InRollout(goes_on);
  goes_on.Feed(RequestPhase{Train(), goes_on.Now()});
  goes_on.AckNext();
  goes_on.AckNext();
  EXPECT_EQ(goes_on.state.mode, Mode::kSettled);
}

TEST(HandoffFaults, ActorDeathDuringSyncRepublishes) {
  Group g;
  InTrain(g);
  g.Feed(RequestPhase{Sync(1), g.Now()});
  while (g.pending.front().kind != CommandKind::kLoadWeights) g.AckNext();  // published, reader resumed
  g.Feed(WorkerDied{kActor, "killed", g.Now()});
  g.resident.erase(kActor);
  EXPECT_EQ(g.state.published_version, 0) << "the dead actor's exports cannot be read";
  g.AckNext();  // the reader's load (in flight) still answers
  g.Feed(Hello{kActor, SizesOf(RoleKind::kActor), {}, {}, g.Now()});
  EXPECT_THAT(g.Sent(), ElementsAre("actor/0 resume params")) << "restore what it held, not its exports";
  g.AckAll();
  EXPECT_EQ(g.state.mode, Mode::kSettled);
  EXPECT_EQ(g.state.phase, Sync(1));
  EXPECT_EQ(g.state.published_version, 1);
  EXPECT_TRUE(g.resident[kActor].count(Tag::kIpcExports) == 0) << "exports freed after the re-publish";
}

TEST(HandoffFaults, DeathWhileSettledRestartsAndContinues) {
  Group g;
  InRollout(g);
  g.Feed(WorkerDied{kRollout, "segfault", g.Now()});
  g.resident.erase(kRollout);
  g.Feed(Hello{kRollout, SizesOf(RoleKind::kRollout), {}, {}, g.Now()});
  g.AckAll();
  EXPECT_EQ(g.state.mode, Mode::kSettled);
  EXPECT_EQ(g.state.phase, Rollout());
  EXPECT_EQ(g.resident[kRollout].size(), 3u);
  EXPECT_TRUE(g.state.workers.at(kRollout).running);
}

}  // namespace
}  // namespace tandem::handoff::testing
