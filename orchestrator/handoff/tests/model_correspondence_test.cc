// The C++ engine and the Promela model (model/handoff.pml) stay in one-to-one
// correspondence: every transition id of transition.h and every ordering
// rule id of ordering_rules.h appears in the model, the model's stage table
// is StageOrder(), and its choreography table is DefaultChoreography() under
// the model's abstraction (one teacher that holds only weights; grads,
// optimizer and activations are one tag TR).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "orchestrator/handoff/choreography.h"
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

bool WordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `id` as a whole word ("T1" does not match inside "T13").
bool Mentions(const std::string& text, std::string_view id) {
  for (size_t at = text.find(id); at != std::string::npos; at = text.find(id, at + 1)) {
    const bool left = at == 0 || !WordChar(text[at - 1]);
    const size_t end = at + id.size();
    if (left && (end == text.size() || !WordChar(text[end]))) return true;
  }
  return false;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// The model's stage table: the lines "stage[N] = S_name;" that hold one
// assignment each (the mutants' lines hold several), as names by index.
std::map<int, std::string> ModelStageTable(const std::string& model) {
  std::map<int, std::string> table;
  for (const std::string& raw : Lines(model)) {
    const std::string line = Trim(raw);
    const std::string head = "stage[";
    if (line.rfind(head, 0) != 0 || line.back() != ';' || line.find(';') != line.size() - 1) continue;
    const size_t close = line.find("] = S_");
    if (close == std::string::npos) continue;
    const std::string index = line.substr(head.size(), close - head.size());
    if (index.empty() || !std::isdigit(static_cast<unsigned char>(index[0]))) continue;
    const size_t name_at = close + std::string("] = S_").size();
    table[std::stoi(index)] = line.substr(name_at, line.size() - 1 - name_at);
  }
  return table;
}

// The model's choreography: "rel[PH_X * NW + ROLE] = A | B" and "res[...]",
// as (table, phase, role) -> the tag names on the right.
using ModelChoreo = std::map<std::string, std::string>;  // "rel ROLLOUT ACTOR" -> "P|TR|X"
ModelChoreo ModelChoreography(const std::string& model) {
  ModelChoreo out;
  for (const char* table : {"rel", "res"}) {
    const std::string head = std::string(table) + "[PH_";
    for (size_t at = model.find(head); at != std::string::npos; at = model.find(head, at + 1)) {
      if (at > 0 && WordChar(model[at - 1])) continue;
      const size_t phase_end = model.find(' ', at);
      const size_t plus = model.find("+ ", phase_end);
      const size_t bracket = model.find(']', plus);
      const size_t eq = model.find("= ", bracket);
      if (phase_end == std::string::npos || plus == std::string::npos || bracket == std::string::npos ||
          eq == std::string::npos || eq != bracket + 2) {
        continue;
      }
      const size_t stop = model.find_first_of(";\n", eq);
      std::string tags;
      for (char c : model.substr(eq + 2, stop - eq - 2)) {
        if (!std::isspace(static_cast<unsigned char>(c))) tags += c;
      }
      const std::string phase = model.substr(at + head.size(), phase_end - at - head.size());
      const std::string role = model.substr(plus + 2, bracket - plus - 2);
      out[std::string(table) + " " + phase + " " + role] = tags;
    }
  }
  return out;
}

// A C++ tag set in the model's names, in the model's order (W KV G P TR X).
std::string ModelTags(const TagSet& tags, RoleKind kind) {
  std::vector<std::string> out;
  auto has = [&](Tag t) { return tags.count(t) > 0; };
  if (has(Tag::kWeights)) out.push_back("W");
  if (kind != RoleKind::kTeacher) {  // the model's teacher holds weights only
    if (has(Tag::kKvCache)) out.push_back("KV");
    if (has(Tag::kCudaGraph)) out.push_back("G");
  }
  if (has(Tag::kParams)) out.push_back("P");
  if (has(Tag::kGrads) || has(Tag::kOptimizer) || has(Tag::kActivations)) out.push_back("TR");
  if (has(Tag::kIpcExports)) out.push_back("X");
  std::string joined;
  for (const std::string& t : out) joined += (joined.empty() ? "" : "|") + t;
  return joined;
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

TEST(ModelCorrespondence, TheModelsStageTableIsStageOrder) {
  const std::map<int, std::string> table = ModelStageTable(Model());
  const std::vector<Stage>& order = StageOrder();
  ASSERT_EQ(table.size(), order.size()) << "the model's stage[] table has the wrong number of entries";
  for (size_t i = 0; i < order.size(); ++i) {
    ASSERT_TRUE(table.count(static_cast<int>(i))) << "stage[" << i << "] is not set in the model";
    EXPECT_EQ(table.at(static_cast<int>(i)), StageName(order[i])) << "stage[" << i << "]";
  }
}

TEST(ModelCorrespondence, TheModelsChoreographyIsTheDefault) {
  const ModelChoreo model = ModelChoreography(Model());
  ASSERT_FALSE(model.empty()) << "no rel[PH_...]/res[PH_...] lines in the model";
  const std::map<PhaseKind, std::string> phases{{PhaseKind::kRollout, "ROLLOUT"},
                                                {PhaseKind::kTeacher, "TEACHER"},
                                                {PhaseKind::kTrain, "TRAIN"},
                                                {PhaseKind::kSync, "SYNC"}};
  const std::map<RoleKind, std::string> roles{
      {RoleKind::kActor, "ACTOR"}, {RoleKind::kRollout, "ROLLOUT"}, {RoleKind::kTeacher, "TEACHER"}};
  const Choreography c = DefaultChoreography();
  ModelChoreo expected;
  for (const auto& [kind, plan] : c.phases) {
    for (const auto& [role, tags] : plan.release) {
      // In TEACHER(i) the teachers' release applies to the others; the
      // model's only teacher is the chosen one.
      if (kind == PhaseKind::kTeacher && role == RoleKind::kTeacher) continue;
      const std::string t = ModelTags(tags, role);
      if (!t.empty()) expected["rel " + phases.at(kind) + " " + roles.at(role)] = t;
    }
    for (const auto& [role, tags] : plan.resume) {
      const std::string t = ModelTags(tags, role);
      if (!t.empty()) expected["res " + phases.at(kind) + " " + roles.at(role)] = t;
    }
  }
  EXPECT_EQ(model, expected);
}

}  // namespace
}  // namespace tandem::handoff
