// The C++ engine and the Promela model (model/handoff.pml) stay in one-to-one
// correspondence: every transition id of transition.h and every ordering
// rule id of ordering_rules.h appears in the model.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <cctype>
#include <sstream>

#include "orchestrator/handoff/ordering_rules.h"
#include "orchestrator/handoff/transition.h"

namespace tandem::handoff {
namespace {

std::string Model() {
  const char* dir = std::getenv("TANDEM_SOURCE_DIR");
  std::filesystem::path p = std::filesystem::path(dir ? dir : ".") / "orchestrator/handoff/model/handoff.pml";
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `id` as a whole word ("T1" does not match inside "T13").
bool Mentions(const std::string& text, std::string_view id) {
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = text.find(id); at != std::string::npos; at = text.find(id, at + 1)) {
    const bool left = at == 0 || !word(text[at - 1]);
    const size_t end = at + id.size();
    if (left && (end == text.size() || !word(text[end]))) return true;
  }
  return false;
}

TEST(ModelCorrespondence, EveryTransitionIdIsInTheModel) {
  const std::string model = Model();
  ASSERT_FALSE(model.empty()) << "model/handoff.pml not found (TANDEM_SOURCE_DIR)";
  for (std::string_view id : kTransitionIds) EXPECT_TRUE(Mentions(model, id)) << id << " is not in the model";
}

TEST(ModelCorrespondence, EveryOrderingRuleIsInTheModel) {
  const std::string model = Model();
  for (const OrderingRule& r : OrderingRules()) {
    EXPECT_TRUE(Mentions(model, r.id)) << r.id << " (" << r.why << ") is not in the model";
  }
}

}  // namespace
}  // namespace tandem::handoff
