// The ordering rules (ordering_rules.h) are acyclic and put every stage in
// an order that obeys each rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "orchestrator/handoff/ordering_rules.h"

namespace tandem::handoff {
namespace {

TEST(OrderingRules, EveryStageIsOrderedAndEveryRuleHolds) {
  const std::vector<Stage>& order = StageOrder();
  ASSERT_EQ(order.size(), static_cast<size_t>(kStageCount)) << "the rules have a cycle";
  auto pos = [&](Stage s) { return std::find(order.begin(), order.end(), s) - order.begin(); };
  std::set<std::string_view> ids;
  for (const OrderingRule& r : OrderingRules()) {
    EXPECT_LT(pos(r.before), pos(r.after)) << r.id << ": " << r.why;
    EXPECT_TRUE(ids.insert(r.id).second) << "duplicate id " << r.id;
  }
}

}  // namespace
}  // namespace tandem::handoff
