// A bounded sft run on a tiny model from scratch (docs/model.md, "sft"):
// the loss falls clearly, the saved directory is an HF model directory that
// loads back (model and tokenizer) and gives the same greedy eval on the
// same held-out problems, and trainer_state.json holds a cursor the sampler
// restores from. Label `learning`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "workers/data/chat_template.h"
#include "workers/data/prompt_sampler.h"
#include "workers/data/tokenizer.h"
#include "workers/model/checkpoint.h"
#include "workers/roles/problem_tokens.h"
#include "workers/roles/sft_eval.h"
#include "workers/roles/sft_role.h"
#include "workers/train/sft_example.h"

namespace tandem::roles {
namespace {

namespace fs = std::filesystem;

TEST(SftLearning, LossFallsAndTheSavedModelEvaluatesTheSame) {
  const uint64_t seed = std::random_device{}() % 1000;
  const fs::path dir = fs::temp_directory_path() / ("tandem_sft_test_" + std::to_string(std::random_device{}()));
  SftOptions o;
  o.dataset = "synthetic-arith";
  o.dataset_options = {{"seed", seed}, {"level", 1}, {"style", "plain"}};
  o.preset = "tiny";
  o.out_dir = (dir / "model").string();
  o.log_path = (dir / "log.jsonl").string();
  o.max_steps = 60;
  o.batch_size = 16;
  o.lr = 1e-2;
  o.warmup_steps = 5;
  o.log_every = 5;
  o.eval_problems = 12;
  o.eval_max_new_tokens = 24;
  o.seed = seed;
  fs::create_directories(dir);
  StatusOr<SftResult> r = RunSft(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->steps, 60);
  EXPECT_GT(r->parameters, 10'000);
  EXPECT_LT(r->last_loss, 0.5 * r->first_loss) << "first " << r->first_loss << " last " << r->last_loss;
  EXPECT_GT(r->tokens_per_s, 0);

  // The log: a start line, step lines with falling loss, evals, saved.
  std::ifstream log(o.log_path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(log, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines.front()["event"], "start");
  EXPECT_EQ(lines.back()["event"], "saved");
  size_t steps = 0, evals = 0;
  for (const auto& j : lines) {
    steps += j["event"] == "step";
    evals += j["event"] == "eval";
  }
  EXPECT_EQ(steps, 12u);
  EXPECT_EQ(evals, 2u);

  // The directory loads back and evaluates the same.
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "trainer_state.json"})
    EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / f)) << f;
  StatusOr<std::unique_ptr<model::Transformer>> m = model::LoadPretrained(o.out_dir, at::kCPU, at::kFloat);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  StatusOr<data::Tokenizer> tok = data::Tokenizer::FromDirectory(o.out_dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  StatusOr<data::ChatFormat> format = data::ChatFormatFor(*tok);
  ASSERT_TRUE(format.ok());
  ASSERT_TRUE(tok->special_tokens().eos.has_value());
  StatusOr<std::unique_ptr<data::Dataset>> train = data::OpenDataset(o.dataset, o.dataset_options);
  ASSERT_TRUE(train.ok());
  const data::PromptLengthLimit limit{
      [&](const data::Problem& p) { return PromptTokensOffering(*tok, *format, p, p.tools); },
      static_cast<size_t>(o.max_prompt_tokens)};
  StatusOr<SftHeldOut> held = SftHeldOutProblems(o, **train, limit);
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->problems.size(), 12u);
  inference::GreedyOptions g;
  g.max_new_tokens = o.eval_max_new_tokens;
  g.stop_tokens = {*tok->special_tokens().eos};
  StatusOr<EvalResult> again = EvaluateGreedy(**m, *tok, *format, held->problems, (*train)->verifier(), g);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->accuracy(), r->accuracy_after);
  EXPECT_EQ(again->responses, r->final_responses);

  std::ifstream state_file(fs::path(o.out_dir) / "trainer_state.json");
  const nlohmann::json state = nlohmann::json::parse(state_file);
  EXPECT_EQ(state["step"], 60);
  StatusOr<data::SamplerCursor> cursor = data::SamplerCursorFromJson(state["sampler_cursor"]);
  ASSERT_TRUE(cursor.ok()) << cursor.status().ToString();
  EXPECT_EQ(cursor->position, 60u * 16u);  // unbounded: one draw per example
  fs::remove_all(dir);
}

TEST(SftLearning, RefusesBadOptions) {
  SftOptions o;
  EXPECT_FALSE(RunSft(o).ok());  // no --out
  o.out_dir = "/nonexistent/x";
  EXPECT_FALSE(RunSft(o).ok());  // no limit
  o.max_steps = 1;
  o.preset = "huge";
  StatusOr<SftResult> r = RunSft(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown model preset 'huge'"), std::string::npos) << r.status().message();
  o.preset = "tiny";
  o.dataset = "nope";
  EXPECT_FALSE(RunSft(o).ok());
}

}  // namespace
}  // namespace tandem::roles
