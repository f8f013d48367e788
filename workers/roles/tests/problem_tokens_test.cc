// A problem's sft tokens against the tokens an RL session holds
// (problem_tokens.h): a tool-call reference conversation, laid out for sft,
// must be exactly the ids the actor's proxy records when the model says the
// same things in the tool-calls workflow (agents/), with the same tokens
// trained; and its prompt the one the workflow's first call sends.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "workers/agents/calculator.h"
#include "workers/agents/episode_tokens.h"
#include "workers/agents/proxy_server.h"
#include "workers/agents/tests/fake_rollout.h"
#include "workers/agents/tool_chat_template.h"
#include "workers/agents/workflow.h"
#include "workers/data/byte_tokenizer.h"
#include "workers/data/dataset.h"
#include "workers/roles/problem_tokens.h"

namespace tandem::roles {
namespace {

using nlohmann::json;

data::Tokenizer ByteTokenizer() {
  auto files = data::ByteTokenizerFiles();
  return *data::Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
}

// The trained model as a workflow meets it: a proxy in front of a fake
// rollout that answers with `replier`'s ids, and a chat client of the proxy.
struct ProxiedRollout {
  ProxiedRollout(const data::Tokenizer& tok, const std::string& port_file,
                 std::function<std::vector<int32_t>(const json&)> replier)
      : rollout(std::make_unique<agents::testing::FakeRollout>(std::vector<int32_t>{})) {
    rollout->set_replier(std::move(replier));
    agents::ProxyOptions po;
    po.replicas.port_files = {port_file};
    rollout->WritePortFile(port_file);
    proxy = std::make_unique<agents::Proxy>(tok, po);
    started = proxy->Start().ok();
    agents::ChatEndpointOptions c;
    c.port = proxy->port();
    client = std::make_unique<agents::ChatClient>(c);
  }
  std::unique_ptr<agents::testing::FakeRollout> rollout;
  std::unique_ptr<agents::Proxy> proxy;
  std::unique_ptr<agents::ChatClient> client;
  bool started = false;
};

TEST(ProblemTokens, AToolCallReferenceIsTheSessionTheWorkflowRecords) {
  char tmpl[] = "/tmp/tandem-problem-tokens-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const data::Tokenizer tok = ByteTokenizer();
  const data::TokenId end = *tok.TokenToId("<|im_end|>");
  const data::ChatFormat format = data::ChatFormat::ChatMl();
  auto set = data::OpenDataset("synthetic-arith", {{"level", {2, 3, 4}}, {"style", "plain"}, {"tool_calls", 1.0}});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  int checked = 0;
  for (size_t i = 0; i < 6; ++i) {
    auto p = (*set)->Get(i);
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(p->reference_turns.size(), 3u);
    auto ex = ProblemSftExample(tok, format, *p, end);
    ASSERT_TRUE(ex.ok()) << ex.status().ToString();
    ASSERT_EQ(ex->trained.size(), static_cast<size_t>(ex->response_tokens()));

    // The model says what the reference says, turn by turn.
    size_t said = 0;
    ProxiedRollout model(tok, dir + "/rollout.0.port", [&](const json&) {
      std::vector<int32_t> out = *tok.Encode(p->reference_turns[said == 0 ? 0 : 2].content);
      out.push_back(end);
      ++said;
      return out;
    });
    ASSERT_TRUE(model.started);
    auto wf = agents::MakeWorkflow("tool-calls");
    ASSERT_TRUE(wf.ok());
    agents::EpisodeContext ctx{&*p, &(*set)->verifier(), model.client.get(), nullptr, "s",
                               {.temperature = 1.0, .max_tokens = 64}};
    auto ep = (*wf)->Run(ctx);
    ASSERT_TRUE(ep.ok()) << ep.status().ToString();
    EXPECT_TRUE(ep->solved) << "the calculator gave the problem's answer";
    EXPECT_EQ(ep->tool_errors, 0);
    // The workflow's first prompt is the sft prompt.
    const std::vector<json> bodies = model.rollout->bodies();
    ASSERT_EQ(bodies.size(), 2u);
    auto prompt = ProblemPromptIds(tok, format, *p);
    ASSERT_TRUE(prompt.ok());
    EXPECT_EQ(bodies[0]["input_ids"].get<std::vector<int32_t>>(), *prompt);
    EXPECT_EQ(static_cast<size_t>(ex->prompt_tokens), prompt->size());
    // The session's tokens are the sft example's, trained alike.
    auto session = model.proxy->ExportSession("s");
    ASSERT_TRUE(session.ok());
    auto seqs = agents::EpisodeSequences(*session, *ep, agents::AdvantageUnit::kEpisode);
    ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
    ASSERT_EQ(seqs->size(), 1u);
    std::vector<int32_t> ids = (*seqs)[0].prompt;
    ids.insert(ids.end(), (*seqs)[0].response.begin(), (*seqs)[0].response.end());
    EXPECT_EQ(ids, ex->ids) << *tok.Decode(ids, {}) << "\n---\n" << *tok.Decode(ex->ids, {});
    EXPECT_EQ((*seqs)[0].trained, ex->trained);
    ++checked;
  }
  EXPECT_EQ(checked, 6);
  std::filesystem::remove_all(dir);
}

TEST(ProblemTokens, WithoutToolsItIsTheChatFormat) {
  const data::Tokenizer tok = ByteTokenizer();
  const data::TokenId end = *tok.TokenToId("<|im_end|>");
  auto set = data::OpenDataset("synthetic-arith", {{"style", "plain"}});
  ASSERT_TRUE(set.ok());
  auto p = (*set)->Get(0);
  auto ex = ProblemSftExample(tok, data::ChatFormat::ChatMl(), *p, end);
  auto plain = train::MakeSftExample(tok, data::ChatFormat::ChatMl(), *p, end);
  ASSERT_TRUE(ex.ok() && plain.ok());
  EXPECT_EQ(ex->ids, plain->ids);
  EXPECT_TRUE(ex->trained.empty());
  // A tool the agents do not have is refused, naming it.
  data::Problem odd = *p;
  odd.tools = {"search"};
  auto refused = ProblemSftExample(tok, data::ChatFormat::ChatMl(), odd, end);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tool \"search\": unknown"), std::string::npos) << refused.status().ToString();
}

// The actor's --max-prompt-tokens counts what a workflow's first call sends:
// with the tool-calls workflow the calculator's tool template (much longer
// than the chat format's prompt), with single-turn the chat format's.
TEST(ProblemTokens, TheLimitCountsTheWorkflowsFirstPrompt) {
  char tmpl[] = "/tmp/tandem-problem-tokens-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const data::Tokenizer tok = ByteTokenizer();
  const data::TokenId end = *tok.TokenToId("<|im_end|>");
  const data::ChatFormat format = data::ChatFormat::ChatMl();
  auto set = data::OpenDataset("synthetic-arith", {{"style", "plain"}});
  ASSERT_TRUE(set.ok());
  auto p = (*set)->Get(3);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->tools.empty());
  const size_t plain = PromptTokensOffering(tok, format, *p, {});
  EXPECT_EQ(plain, data::EncodeChat(tok, format, p->prompt, true)->ids.size());
  for (const std::string name : {"tool-calls", "single-turn"}) {
    auto wf = agents::MakeWorkflow(name);
    ASSERT_TRUE(wf.ok());
    ProxiedRollout model(tok, dir + "/rollout." + name + ".port", [&](const json&) {
      std::vector<int32_t> out = *tok.Encode("Answer: 1");
      out.push_back(end);
      return out;
    });
    ASSERT_TRUE(model.started);
    agents::EpisodeContext ctx{&*p, &(*set)->verifier(), model.client.get(), nullptr, "s",
                               {.temperature = 1.0, .max_tokens = 8}};
    ASSERT_TRUE((*wf)->Run(ctx).ok());
    const std::vector<int32_t> sent = model.rollout->bodies().at(0)["input_ids"].get<std::vector<int32_t>>();
    const std::vector<std::string> offered = (*wf)->tool_names();
    EXPECT_EQ(sent, *PromptIdsOffering(tok, format, *p, offered)) << name;
    EXPECT_EQ(sent.size(), PromptTokensOffering(tok, format, *p, offered)) << name;
    if (name == "tool-calls") {
      EXPECT_EQ(offered, std::vector<std::string>{"calculator"});
      EXPECT_GT(sent.size(), plain + 100) << "the tool template is counted";
    } else {
      EXPECT_EQ(sent.size(), plain);
    }
  }
  // A prompt that cannot be rendered is never admitted.
  EXPECT_EQ(PromptTokensOffering(tok, format, *p, {"search"}), std::numeric_limits<size_t>::max());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::roles
