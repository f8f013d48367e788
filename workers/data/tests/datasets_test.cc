// The data set registry: synthetic-arith (deterministic, levels, exact
// answers), gsm8k and dapo-math on fixtures written to a temp dir, and
// hostile rows (docs/model.md, "Data sets and rewards").
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <optional>
#include <sstream>
#include <string>

#include "workers/data/dataset.h"
#include "workers/data/gsm8k.h"
#include "workers/data/jsonl_reader.h"
#include "workers/data/number.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("tandem_datasets_test_" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& content) const {
    const fs::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }

 private:
  fs::path path_;
};

std::unique_ptr<Dataset> Open(std::string_view name, const nlohmann::json& options) {
  StatusOr<std::unique_ptr<Dataset>> d = OpenDataset(name, options);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? std::move(d).value() : nullptr;
}

std::string OpenError(std::string_view name, const nlohmann::json& options) {
  StatusOr<std::unique_ptr<Dataset>> d = OpenDataset(name, options);
  EXPECT_FALSE(d.ok());
  return d.ok() ? "" : d.status().message();
}

TEST(Registry, NamesAndUnknown) {
  EXPECT_EQ(DatasetNames(), (std::vector<std::string>{"synthetic-arith", "gsm8k", "dapo-math"}));
  EXPECT_NE(OpenError("mnist", nullptr).find("unknown data set 'mnist' (known: synthetic-arith, gsm8k, dapo-math)"),
            std::string::npos);
}

TEST(SyntheticArith, DeterministicPerSeedAndIndex) {
  const uint64_t seed = std::random_device{}();
  auto a = Open("synthetic-arith", {{"seed", seed}, {"level", {1, 2, 3, 4, 5}}});
  auto b = Open("synthetic-arith", {{"seed", seed}, {"level", {1, 2, 3, 4, 5}}});
  auto c = Open("synthetic-arith", {{"seed", seed + 1}, {"level", {1, 2, 3, 4, 5}}});
  ASSERT_TRUE(a && b && c);
  EXPECT_FALSE(a->size().has_value());
  size_t differ = 0;
  for (size_t i = 0; i < 200; ++i) {
    const Problem pa = *a->Get(i), pb = *b->Get(i), pc = *c->Get(i);
    EXPECT_EQ(pa.prompt[0].content, pb.prompt[0].content);
    EXPECT_EQ(pa.answer, pb.answer);
    differ += pa.prompt[0].content != pc.prompt[0].content;
  }
  EXPECT_GT(differ, 150u);
  // A far index works (unbounded).
  EXPECT_TRUE(a->Get(size_t{1} << 62).ok());
}

// Evaluates a reference solution's arithmetic lines: each "x op y = z" must
// hold, chain from one to the next, and end at the answer.
void CheckSolution(const Problem& p) {
  ASSERT_TRUE(p.reference_solution.has_value());
  std::istringstream in(*p.reference_solution);
  std::string line, last;
  std::optional<int64_t> prev;
  int steps = 0;
  while (std::getline(in, line)) {
    last = line;
    if (line.rfind("Answer: ", 0) == 0) break;
    int64_t x = 0, y = 0, z = 0;
    char op = 0, eq = 0;
    std::istringstream ls(line);
    ASSERT_TRUE(ls >> x >> op >> y >> eq >> z) << line;
    ASSERT_EQ(eq, '=');
    const int64_t want = op == '+' ? x + y : op == '-' ? x - y : op == '*' ? x * y : (y != 0 && x % y == 0 ? x / y : -1);
    EXPECT_EQ(z, want) << line;
    EXPECT_GE(z, 0) << line;
    if (prev) {
      EXPECT_EQ(x, *prev) << "steps do not chain: " << *p.reference_solution;
    }
    prev = z;
    ++steps;
  }
  EXPECT_EQ(last, "Answer: " + p.answer);
  ASSERT_TRUE(prev.has_value());
  EXPECT_EQ(std::to_string(*prev), p.answer);
  EXPECT_GE(steps, 1);
}

TEST(SyntheticArith, LevelsHaveExactAnswersAndSolvedReferences) {
  const uint64_t seed = std::random_device{}();
  for (int level = 1; level <= 5; ++level) {
    for (const char* style : {"word", "plain"}) {
      auto d = Open("synthetic-arith", {{"seed", seed}, {"level", level}, {"style", style}});
      ASSERT_TRUE(d);
      size_t max_steps = 0;
      for (size_t i = 0; i < 300; ++i) {
        const Problem p = *d->Get(i);
        ASSERT_EQ(p.prompt.size(), 1u);
        EXPECT_EQ(p.prompt[0].role, "user");
        CheckSolution(p);
        EXPECT_EQ(d->verifier().Verify(*p.reference_solution, p.answer).reward, 1.0) << *p.reference_solution;
        const size_t steps = static_cast<size_t>(std::count(p.reference_solution->begin(), p.reference_solution->end(), '='));
        max_steps = std::max(max_steps, steps);
        if (level == 1) {
          // Level 1: one step on digits.
          EXPECT_EQ(steps, 1u);
          EXPECT_LE(std::stoll(p.answer), 18);
        }
      }
      EXPECT_EQ(max_steps, std::vector<size_t>({1, 1, 2, 3, 4})[static_cast<size_t>(level - 1)]) << level;
    }
  }
  auto plain = Open("synthetic-arith", {{"style", "plain"}, {"system", "Be brief."}});
  const Problem p = *plain->Get(0);
  ASSERT_EQ(p.prompt.size(), 2u);
  EXPECT_EQ(p.prompt[0].role, "system");
  EXPECT_EQ(p.prompt[1].content.rfind("What is ", 0), 0u) << p.prompt[1].content;
}

TEST(SyntheticArith, OpsRestrictTheSkill) {
  const uint64_t seed = std::random_device{}();
  auto ops_of = [](const Problem& p) {
    std::string ops;
    std::istringstream in(*p.reference_solution);
    for (std::string line; std::getline(in, line) && line.rfind("Answer", 0) != 0;) {
      int64_t x = 0;
      char op = 0;
      std::istringstream(line) >> x >> op;
      ops += op;
    }
    return ops;
  };
  struct Case {
    nlohmann::json level;
    std::vector<std::string> ops;
    std::string allowed;
  };
  for (const Case& c : {Case{2, {"*"}, "*"}, Case{2, {"+"}, "+"}, Case{1, {"-"}, "-"}, Case{{3, 4, 5}, {"-", "/"}, "-/"},
                        Case{{3, 4}, {"*"}, "*"}}) {
    auto d = Open("synthetic-arith", {{"seed", seed}, {"level", c.level}, {"ops", c.ops}, {"style", "plain"}});
    ASSERT_TRUE(d) << c.level << " " << nlohmann::json(c.ops);
    for (size_t i = 0; i < 200; ++i) {
      auto p = d->Get(i);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      CheckSolution(*p);
      for (const char op : ops_of(*p)) EXPECT_NE(c.allowed.find(op), std::string::npos) << *p->reference_solution;
    }
  }
  // Every op allowed: the problems are those without the option.
  auto all = Open("synthetic-arith", {{"seed", seed}, {"level", {1, 2, 3, 4, 5}}, {"ops", {"+", "-", "*", "/"}}});
  auto plain = Open("synthetic-arith", {{"seed", seed}, {"level", {1, 2, 3, 4, 5}}});
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(all->Get(i)->reference_solution, plain->Get(i)->reference_solution);
  EXPECT_NE(OpenError("synthetic-arith", {{"ops", {"^"}}}).find("key 'ops': expected a non-empty list"), std::string::npos);
  EXPECT_NE(OpenError("synthetic-arith", {{"ops", nlohmann::json::array()}}).find("key 'ops'"), std::string::npos);
  EXPECT_NE(OpenError("synthetic-arith", {{"level", 1}, {"ops", {"*"}}}).find("key 'ops': level 1 uses none of them"),
            std::string::npos);
}

TEST(SyntheticArith, ToolCallReferencesCallTheCalculatorWithTheWholeExpression) {
  const uint64_t seed = std::random_device{}();
  auto with = Open("synthetic-arith", {{"seed", seed}, {"level", {1, 2, 3, 4}}, {"style", "plain"}, {"tool_calls", 0.5}});
  auto without = Open("synthetic-arith", {{"seed", seed}, {"level", {1, 2, 3, 4}}, {"style", "plain"}});
  ASSERT_TRUE(with && without);
  size_t calls = 0;
  for (size_t i = 0; i < 400; ++i) {
    auto p = with->Get(i);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    const auto q = without->Get(i);
    EXPECT_EQ(p->prompt[0].content, q->prompt[0].content) << "the problems are those without the option";
    EXPECT_EQ(p->reference_solution, q->reference_solution);
    EXPECT_EQ(p->tools, std::vector<std::string>{"calculator"});
    if (p->reference_turns.empty()) continue;
    ++calls;
    ASSERT_EQ(p->reference_turns.size(), 3u);
    const std::string& call = p->reference_turns[0].content;
    ASSERT_EQ(call.rfind("<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"", 0), 0u) << call;
    const size_t b = call.find("\"expression\": \"") + 15, e = call.find("\"}}");
    const std::string expression = call.substr(b, e - b);
    EXPECT_EQ(p->reference_turns[1].role, "tool");
    EXPECT_EQ(p->reference_turns[1].content, p->answer);
    EXPECT_EQ(p->reference_turns[2].content, "Answer: " + p->answer);
    EXPECT_EQ(with->verifier().Verify(p->reference_turns[2].content, p->answer).reward, 1.0);
    EXPECT_EQ(expression.find_first_of("\"\\\n"), std::string::npos) << "plain JSON text: " << expression;
  }
  EXPECT_GT(calls, 150u);
  EXPECT_LT(calls, 250u);
  auto none = Open("synthetic-arith", {{"tool_calls", 0}});
  EXPECT_TRUE(none->Get(0)->tools.empty());
  EXPECT_NE(OpenError("synthetic-arith", {{"tool_calls", 2}}).find("key 'tool_calls': expected a number in [0, 1]"),
            std::string::npos);
}

TEST(SyntheticArith, OptionErrors) {
  EXPECT_NE(OpenError("synthetic-arith", {{"level", 6}}).find("key 'level': expected an integer 1..5"), std::string::npos);
  EXPECT_NE(OpenError("synthetic-arith", {{"level", nlohmann::json::array()}}).find("key 'level'"), std::string::npos);
  EXPECT_NE(OpenError("synthetic-arith", {{"seed", -1}}).find("key 'seed': expected a non-negative integer"),
            std::string::npos);
  EXPECT_NE(OpenError("synthetic-arith", {{"style", "poem"}}).find("key 'style': expected \"word\" or \"plain\""),
            std::string::npos);
  EXPECT_NE(OpenError("synthetic-arith", {{"levle", 1}}).find("unknown key 'levle'"), std::string::npos);
  EXPECT_NE(OpenError("synthetic-arith", "text").find("expected a JSON object"), std::string::npos);
}

TEST(Gsm8k, LoadsRowsWithGroundTruthAndReference) {
  TempDir dir;
  const std::string path = dir.Write("mini.jsonl",
                                     R"({"question": "Q one?", "answer": "1+1 = <<1+1=2>>2\n#### 2"})" "\n"
                                     "\n"  // blank lines are not rows
                                     R"({"question": "Q two?", "answer": "big\n#### 1,000,000"})" "\r\n"
                                     R"({"question": "Q three?", "answer": "owed\n#### -12", "extra": 1})");  // no final newline
  auto d = Open("gsm8k", {{"path", path}, {"system", "Solve."}});
  ASSERT_TRUE(d);
  ASSERT_EQ(d->size(), 3u);
  const Problem p1 = *d->Get(1);
  EXPECT_EQ(p1.id, "mini.jsonl:3");
  ASSERT_EQ(p1.prompt.size(), 2u);
  EXPECT_EQ(p1.prompt[0].content, "Solve.");
  EXPECT_EQ(p1.prompt[1].role, "user");
  EXPECT_EQ(p1.prompt[1].content, "Q two?");
  EXPECT_EQ(p1.answer, "1000000");
  EXPECT_EQ(p1.reference_solution, "big\n#### 1,000,000");
  EXPECT_EQ(d->Get(2)->answer, "-12");
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(d->verifier().Verify(*d->Get(i)->reference_solution, d->Get(i)->answer).reward, 1.0);
  EXPECT_FALSE(d->Get(3).ok());
  EXPECT_EQ(d->load_report().rows, 3u);
  auto limited = Open("gsm8k", {{"path", path}, {"limit", 2}});
  EXPECT_EQ(limited->size(), 2u);
}

TEST(Gsm8k, GroundTruth) {
  EXPECT_EQ(*Gsm8kGroundTruth("a\n#### 1,234"), "1234");
  EXPECT_EQ(*Gsm8kGroundTruth("#### 3\n#### 4 "), "4");
  EXPECT_FALSE(Gsm8kGroundTruth("no marker 5").ok());
  EXPECT_FALSE(Gsm8kGroundTruth("#### five").ok());
  EXPECT_FALSE(Gsm8kGroundTruth("#### ").ok());
}

// Each hostile row, alone in a file at line 2: the error names the file,
// the line and the key path.
TEST(Gsm8k, HostileRowsAreErrorsWithFileLineAndKey) {
  TempDir dir;
  const std::string good = R"({"question": "q", "answer": "#### 1"})";
  struct Row { std::string line; std::string want; };
  std::string deep(100, '[');
  deep += std::string(100, ']');
  const Row rows[] = {
      {"not json", "bad.jsonl:2: not valid JSON"},
      {"[1, 2]", "bad.jsonl:2: expected a JSON object, got array"},
      {R"({"answer": "#### 1"})", "bad.jsonl:2: key 'question': missing"},
      {R"({"question": 5, "answer": "#### 1"})", "bad.jsonl:2: key 'question': expected a string, got number"},
      {R"({"question": "q", "answer": ["#### 1"]})", "bad.jsonl:2: key 'answer': expected a string, got array"},
      {R"({"question": "q", "answer": "no marker"})", "bad.jsonl:2: key 'answer': no '####' line"},
      {R"({"question": "q", "answer": "#### lots"})", "key 'answer': '####' is followed by 'lots', not a number"},
      {deep, "bad.jsonl:2: JSON nested deeper than 64 levels"},
      {"{\"question\": \"\xff\xfe\", \"answer\": \"#### 1\"}", "bad.jsonl:2: not valid JSON"},
      {std::string("{\"question\": \"a") + '\0' + "b\", \"answer\": \"#### 1\"}", "bad.jsonl:2: not valid JSON"},
  };
  for (const Row& r : rows) {
    const std::string path = dir.Write("bad.jsonl", good + "\n" + r.line + "\n" + good + "\n");
    const std::string err = OpenError("gsm8k", {{"path", path}});
    EXPECT_NE(err.find(r.want), std::string::npos) << "row: " << r.line.substr(0, 60) << "\nerror: " << err;
    EXPECT_EQ(err.rfind("gsm8k: ", 0), 0u) << err;
    // Under "skip" the same file loads the two good rows and counts the bad one.
    StatusOr<std::unique_ptr<Dataset>> d = OpenDataset("gsm8k", {{"path", path}, {"on_bad_row", "skip"}});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ((*d)->size(), 2u);
    const LoadReport rep = (*d)->load_report();
    EXPECT_EQ(rep.rows, 3u);
    EXPECT_EQ(rep.skipped, 1u);
    ASSERT_EQ(rep.first_skip_reasons.size(), 1u);
    EXPECT_EQ(rep.first_skip_reasons[0].rfind("bad.jsonl:2: ", 0), 0u) << rep.first_skip_reasons[0];
  }
}

TEST(Gsm8k, OverlongRowAndMissingFile) {
  TempDir dir;
  std::string big = R"({"question": ")" + std::string(kMaxJsonlLineBytes, 'x') + R"(", "answer": "#### 1"})";
  const std::string path = dir.Write("long.jsonl", big + "\n" + R"({"question": "q", "answer": "#### 1"})");
  EXPECT_NE(OpenError("gsm8k", {{"path", path}}).find("long.jsonl:1: row longer than"), std::string::npos);
  StatusOr<std::unique_ptr<Dataset>> d = OpenDataset("gsm8k", {{"path", path}, {"on_bad_row", "skip"}});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->size(), 1u);
  EXPECT_NE(OpenError("gsm8k", {{"path", dir.Write("x", "") + ".missing"}}).find("No such file"), std::string::npos);
  EXPECT_NE(OpenError("gsm8k", nullptr).find("key 'path': missing"), std::string::npos);
  EXPECT_NE(OpenError("gsm8k", {{"path", path}, {"on_bad_row", "ignore"}}).find("key 'on_bad_row'"), std::string::npos);
  EXPECT_NE(OpenError("gsm8k", {{"path", path}, {"verifier", {{"x", 1}}}}).find("key 'verifier': verifier options"),
            std::string::npos);
}

TEST(DapoMath, LoadsFixture) {
  TempDir dir;
  const std::string prompt =
      "Solve the following math problem step by step. The last line of your response should be of the form "
      "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\nWhat is 6 times 7?";
  nlohmann::json r1 = {{"data_source", "math_dapo"},
                       {"prompt", {{{"content", prompt}, {"role", "user"}}}},
                       {"ability", "MATH"},
                       {"reward_model", {{"ground_truth", "42"}, {"style", "rule-lighteval/MATH_v2"}}},
                       {"extra_info", {{"index", "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"}}}};
  nlohmann::json r2 = {{"prompt", {{{"role", "system"}, {"content", "Be exact."}}, {{"role", "user"}, {"content", "1/2?"}}}},
                       {"reward_model", {{"ground_truth", 17}}}};
  const std::string path = dir.Write("dapo.jsonl", r1.dump() + "\n" + r2.dump() + "\n");
  auto d = Open("dapo-math", {{"path", path}});
  ASSERT_TRUE(d);
  ASSERT_EQ(d->size(), 2u);
  const Problem p0 = *d->Get(0), p1 = *d->Get(1);
  EXPECT_EQ(p0.id, "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079");
  EXPECT_EQ(p0.prompt.size(), 1u);
  EXPECT_EQ(p0.prompt[0].content, prompt);
  EXPECT_EQ(p0.answer, "42");
  EXPECT_FALSE(p0.reference_solution.has_value());
  EXPECT_EQ(p1.id, "dapo.jsonl:2");
  ASSERT_EQ(p1.prompt.size(), 2u);
  EXPECT_EQ(p1.prompt[0].role, "system");
  EXPECT_EQ(p1.answer, "17");
  EXPECT_EQ(d->verifier().Verify("6*7 is 42.\nAnswer: 42", "42").reward, 1.0);
  EXPECT_EQ(d->verifier().Verify("6*7 is 42.", "42").reward, 0.0);
}

TEST(DapoMath, HostileRows) {
  TempDir dir;
  struct Row { std::string line; std::string want; };
  const Row rows[] = {
      {R"({"reward_model": {"ground_truth": "1"}})", "d.jsonl:1: key 'prompt': missing"},
      {R"({"prompt": "hi", "reward_model": {"ground_truth": "1"}})", "key 'prompt': expected a non-empty array of messages, got string"},
      {R"({"prompt": [], "reward_model": {"ground_truth": "1"}})", "key 'prompt': expected a non-empty array of messages, got an empty array"},
      {R"({"prompt": [{"role": "user"}], "reward_model": {"ground_truth": "1"}})", "key 'prompt[0].content': missing"},
      {R"({"prompt": [{"role": "user", "content": "a"}, 3], "reward_model": {"ground_truth": "1"}})", "key 'prompt[1]': expected a message object, got number"},
      {R"({"prompt": [{"role": 1, "content": "a"}], "reward_model": {"ground_truth": "1"}})", "key 'prompt[0].role': expected a string, got number"},
      {R"({"prompt": [{"role": "user", "content": "a"}]})", "key 'reward_model.ground_truth': missing"},
      {R"({"prompt": [{"role": "user", "content": "a"}], "reward_model": "x"})", "key 'reward_model.ground_truth': missing"},
      {R"({"prompt": [{"role": "user", "content": "a"}], "reward_model": {"ground_truth": [1]}})", "key 'reward_model.ground_truth': expected a string or an integer, got array"},
      {R"({"prompt": [{"role": "user", "content": "a"}], "reward_model": {"ground_truth": ""}})", "key 'reward_model.ground_truth': empty"},
  };
  for (const Row& r : rows) {
    const std::string err = OpenError("dapo-math", {{"path", dir.Write("d.jsonl", r.line + "\n")}});
    EXPECT_NE(err.find(r.want), std::string::npos) << "row: " << r.line << "\nerror: " << err;
  }
}

}  // namespace
}  // namespace tandem::data
