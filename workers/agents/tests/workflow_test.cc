// The workflows (workflow.h) through a real proxy (proxy_server.h) over a
// scripted replica (fake_rollout.h) that answers by what it is asked: a
// wrong answer then a right one after the environment's feedback; tool
// calls (one good, one to a tool that does not exist) answered before the
// final answer; the episode's session cut into sequences; options refused
// with the key that is wrong.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workers/agents/episode_tokens.h"
#include "workers/agents/proxy_server.h"
#include "workers/agents/tests/fake_rollout.h"
#include "workers/agents/tool_chat_template.h"
#include "workers/agents/workflow.h"
#include "workers/data/byte_tokenizer.h"

namespace tandem::agents {
namespace {

using json = nlohmann::json;
using testing::FakeRollout;

data::Tokenizer ByteTokenizer() {
  auto files = data::ByteTokenizerFiles();
  return *data::Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
}

class WorkflowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tandem-workflow-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    tok_.emplace(ByteTokenizer());
    auto v = data::MakeVerifier("synthetic-arith", nullptr);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    verifier_ = std::move(*v);
    problem_.id = "p0";
    problem_.prompt = {{"user", "What is 2 + 3?"}};
    problem_.answer = "5";
  }
  void TearDown() override {
    proxy_.reset();
    rollout_.reset();
    std::filesystem::remove_all(dir_);
  }
  // The replica answers `reply(prompt text)` (the model's text; its turn end is added).
  void Start(std::function<std::string(const std::string&)> reply) {
    rollout_ = std::make_unique<FakeRollout>(std::vector<int32_t>{});
    rollout_->set_replier([this, reply](const json& body) {
      std::vector<int32_t> ids = body["input_ids"].get<std::vector<int32_t>>();
      const std::string prompt = *tok_->Decode(ids, {});
      std::vector<int32_t> out = *tok_->Encode(reply(prompt));
      out.push_back(*tok_->TokenToId(kTurnEnd));
      return out;
    });
    ProxyOptions o;
    o.replicas.port_files.push_back(dir_ + "/rollout.0.port");
    rollout_->WritePortFile(o.replicas.port_files[0]);
    proxy_ = std::make_unique<Proxy>(*tok_, o);
    const Status s = proxy_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ChatEndpointOptions c;
    c.port = proxy_->port();
    c.timeout = std::chrono::seconds(20);
    client_.emplace(c);
  }
  EpisodeContext Context(const std::string& session) const {
    return {&problem_, verifier_.get(), &*client_, nullptr, session, {.temperature = 1.0, .max_tokens = 32}};
  }
  std::string Text(const std::vector<int32_t>& ids) const { return *tok_->Decode(ids, {}); }

  std::string dir_;
  std::optional<data::Tokenizer> tok_;
  std::unique_ptr<data::Verifier> verifier_;
  data::Problem problem_;
  std::unique_ptr<FakeRollout> rollout_;
  std::unique_ptr<Proxy> proxy_;
  std::optional<ChatClient> client_;
};

TEST_F(WorkflowTest, FeedbackGivesASecondTryAndDiscountsItsReward) {
  Start([](const std::string& prompt) {
    return prompt.find("not right") == std::string::npos ? "2 + 3 = 6\nAnswer: 6" : "2 + 3 = 5\nAnswer: 5";
  });
  auto wf = MakeWorkflow({{"name", "multi-turn-feedback"}, {"options", {{"max_turns", 3}, {"discount", 0.5}}}});
  ASSERT_TRUE(wf.ok()) << wf.status().ToString();
  auto ep = (*wf)->Run(Context("ep-1"));
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_TRUE(ep->solved);
  EXPECT_EQ(ep->reward, 0.5);
  EXPECT_EQ(ep->turn_rewards, (std::vector<double>{0, 0.5}));
  EXPECT_EQ(rollout_->calls(), 2);

  // The session holds both turns as one chain: one sequence whose
  // feedback tokens are context only.
  auto session = proxy_->ExportSession("ep-1");
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto seqs = EpisodeSequences(*session, *ep, AdvantageUnit::kEpisode);
  ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
  ASSERT_EQ(seqs->size(), 1u);
  const EpisodeSequence& s = (*seqs)[0];
  EXPECT_NE(Text(s.prompt).find("What is 2 + 3?"), std::string::npos);
  std::vector<int32_t> generated, context;
  for (size_t i = 0; i < s.response.size(); ++i) (s.trained[i] ? generated : context).push_back(s.response[i]);
  EXPECT_EQ(Text(generated), "2 + 3 = 6\nAnswer: 6<|im_end|>2 + 3 = 5\nAnswer: 5<|im_end|>");
  EXPECT_NE(Text(context).find("That is not right."), std::string::npos) << Text(context);
  EXPECT_EQ(s.reward, 0.5);

  // Never right: max_turns answers, reward 0.
  auto stubborn = MakeWorkflow({{"name", "multi-turn-feedback"}, {"options", {{"max_turns", 2}}}});
  ASSERT_TRUE(stubborn.ok());
  problem_.answer = "7";
  auto none = (*stubborn)->Run(Context("ep-2"));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->solved);
  EXPECT_EQ(none->reward, 0);
  EXPECT_EQ(none->turn_rewards.size(), 2u);
}

TEST_F(WorkflowTest, ToolCallsAreAnsweredAndTheSessionGoesOn) {
  Start([](const std::string& prompt) -> std::string {
    if (prompt.find("<tool_response>") == std::string::npos)
      return "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"(2 + 3) * 1\"}}\n</tool_call>\n"
             "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"2+3\"}}\n</tool_call>";
    return "The calculator says 5.\nAnswer: 5";
  });
  auto wf = MakeWorkflow("tool-calls");
  ASSERT_TRUE(wf.ok()) << wf.status().ToString();
  auto ep = (*wf)->Run(Context("tools-1"));
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_TRUE(ep->solved);
  EXPECT_EQ(ep->reward, 1.0);
  EXPECT_EQ(ep->turn_rewards, (std::vector<double>{0, 1}));
  EXPECT_EQ(ep->tool_calls, 2);
  EXPECT_EQ(ep->tool_errors, 1);
  // What the model read on its second turn: the tools, then both answers.
  const std::vector<json> bodies = rollout_->bodies();
  ASSERT_EQ(bodies.size(), 2u);
  const std::string second = Text(bodies[1]["input_ids"].get<std::vector<int32_t>>());
  EXPECT_NE(second.find("\"name\": \"calculator\""), std::string::npos) << "the tool's definition";
  EXPECT_NE(second.find("<tool_response>\n5\n</tool_response>"), std::string::npos) << second;
  EXPECT_NE(second.find("error: no tool named \"search\""), std::string::npos) << second;
  auto session = proxy_->ExportSession("tools-1");
  ASSERT_TRUE(session.ok());
  auto per_turn = EpisodeSequences(*session, *ep, AdvantageUnit::kTurn);
  ASSERT_TRUE(per_turn.ok()) << per_turn.status().ToString();
  ASSERT_EQ(per_turn->size(), 2u);
  EXPECT_EQ((*per_turn)[0].reward, 1.0) << "the tool-calling turn earns the answer's reward to go";
  EXPECT_EQ((*per_turn)[1].prompt.size(), bodies[1]["input_ids"].size()) << "the second turn reads what was sent";
}

TEST_F(WorkflowTest, AModelThatNeverStopsCallingToolsEndsAtMaxTurns) {
  Start([](const std::string&) {
    return "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1/0\"}}\n</tool_call>";
  });
  auto wf = MakeWorkflow({{"name", "tool-calls"}, {"options", {{"max_turns", 3}}}});
  ASSERT_TRUE(wf.ok());
  auto ep = (*wf)->Run(Context("loop"));
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_FALSE(ep->solved);
  EXPECT_EQ(ep->reward, 0);
  EXPECT_EQ(ep->tool_calls, 3);
  EXPECT_EQ(ep->tool_errors, 3);
  EXPECT_EQ(rollout_->calls(), 3);
  const std::string last = Text(rollout_->bodies().back()["input_ids"].get<std::vector<int32_t>>());
  EXPECT_NE(last.find("error: calculator: division by zero"), std::string::npos) << last;
}

TEST_F(WorkflowTest, AnEndpointThatIsDownIsAnErrorNotAHang) {
  Start([](const std::string&) { return "Answer: 5"; });
  ChatEndpointOptions c;
  c.port = proxy_->port();
  c.timeout = std::chrono::milliseconds(500);
  rollout_->set_mode(FakeRollout::Mode::kHang);
  const ChatClient slow(c);
  EpisodeContext ctx = Context("hang");
  ctx.model = &slow;
  auto wf = MakeWorkflow("single-turn");
  ASSERT_TRUE(wf.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto ep = (*wf)->Run(ctx);
  EXPECT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kDeadlineExceeded) << ep.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST_F(WorkflowTest, ASimulatedUserRepliesUntilTheAnswerIsRight) {
  // The model is right once the user has said "try again"; the user's model
  // (another replica behind another proxy) always says so.
  Start([](const std::string& prompt) {
    return prompt.find("Please try again") == std::string::npos ? "Answer: 4" : "Answer: 5";
  });
  FakeRollout user_rollout({});
  user_rollout.set_replier([this](const json&) {
    std::vector<int32_t> out = *tok_->Encode("Hmm, that looks off. Please try again.");
    out.push_back(*tok_->TokenToId(kTurnEnd));
    return out;
  });
  ProxyOptions uo;
  uo.replicas.port_files.push_back(dir_ + "/user.0.port");
  user_rollout.WritePortFile(uo.replicas.port_files[0]);
  Proxy user_proxy(*tok_, uo);
  ASSERT_TRUE(user_proxy.Start().ok());
  ChatEndpointOptions c;
  c.port = user_proxy.port();
  const ChatClient user(c);
  auto wf = MakeWorkflow(json{{"name", "simulated-user"},
                              {"options", {{"user", {{"port_file", "user.{rank}.port"}, {"tokenizer", "dir"}}},
                                           {"max_turns", 3}}}});
  ASSERT_TRUE(wf.ok()) << wf.status().ToString();
  ASSERT_NE((*wf)->user_endpoint(), nullptr);
  EXPECT_EQ((*wf)->user_endpoint()->port_file, "user.{rank}.port");
  EpisodeContext ctx = Context("sim-1");
  EXPECT_FALSE((*wf)->Run(ctx).ok()) << "no user client";
  ctx.user = &user;
  auto ep = (*wf)->Run(ctx);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_TRUE(ep->solved);
  EXPECT_EQ(ep->solved_turn, 2);
  EXPECT_EQ(ep->reward, 0.5);
  // The user's model read its instructions (the question and the answer)
  // and the conversation from its side.
  const std::vector<json> asked = user_rollout.bodies();
  ASSERT_EQ(asked.size(), 1u);
  const std::string seen = Text(asked[0]["input_ids"].get<std::vector<int32_t>>());
  EXPECT_NE(seen.find("<|im_start|>system\nYou are a student who asked a tutor this question: What is 2 + 3?"),
            std::string::npos) << seen;
  EXPECT_NE(seen.find("The right answer is 5"), std::string::npos) << seen;
  EXPECT_NE(seen.find("<|im_start|>assistant\nWhat is 2 + 3?<|im_end|>\n<|im_start|>user\nAnswer: 4"), std::string::npos)
      << seen;
  // The model's session: its two answers trained, the user's words context.
  auto session = proxy_->ExportSession("sim-1");
  ASSERT_TRUE(session.ok());
  auto seqs = EpisodeSequences(*session, *ep, AdvantageUnit::kEpisode);
  ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
  std::vector<int32_t> context;
  for (size_t i = 0; i < (*seqs)[0].response.size(); ++i)
    if (!(*seqs)[0].trained[i]) context.push_back((*seqs)[0].response[i]);
  EXPECT_NE(Text(context).find("Please try again."), std::string::npos);
}

TEST_F(WorkflowTest, AnOutsideAgentProgramDrivesTheProxy) {
  // examples/agents/feedback_agent.sh: bash, curl and jq against the proxy.
  Start([](const std::string& prompt) {
    return prompt.find("not right") == std::string::npos ? "Answer: 4" : "Answer: 5";
  });
  const char* src = std::getenv("TANDEM_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "TANDEM_SOURCE_DIR (CMake sets it)";
  const std::string agent = std::string(src) + "/examples/agents/feedback_agent.sh";
  auto wf = MakeWorkflow(json{{"name", "command"}, {"options", {{"command", {"bash", agent}}, {"timeout_s", 60}}}});
  ASSERT_TRUE(wf.ok()) << wf.status().ToString();
  auto ep = (*wf)->Run(Context("agent-1"));
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_TRUE(ep->solved);
  EXPECT_EQ(ep->reward, 0.5);
  EXPECT_EQ(ep->turn_rewards, (std::vector<double>{0, 0.5}));
  EXPECT_EQ(ep->solved_turn, 2);
  // Its two calls are one session: the second continues the first's tokens.
  auto session = proxy_->ExportSession("agent-1");
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_EQ(session->turns.size(), 2u);
  EXPECT_EQ(session->turns[1].parent, session->turns[0].turn);
  auto per_turn = EpisodeSequences(*session, *ep, AdvantageUnit::kTurn);
  ASSERT_TRUE(per_turn.ok()) << per_turn.status().ToString();
  EXPECT_EQ((*per_turn)[0].reward, 0.5);

  // Programs that fail say how.
  const std::pair<json, const char*> table[] = {
      {json{"bash", "-c", "echo broken >&2; exit 4"}, "exited 4; its stderr ends: broken"},
      {json{"bash", "-c", "echo '{\"reward\": \"high\"}'"}, "expected {\"reward\": a finite number"},
      {json{"bash", "-c", "echo '{\"reward\": 1, \"turn_rewards\": [1, \"x\"]}'"}, "holds a non-number"},
      {json{"bash", "-c", "true"}, "expected {\"reward\""},
      {json{"bash", "-c", "sleep 30"}, "still running after"},
  };
  for (const auto& [argv, want] : table) {
    auto bad = MakeWorkflow(json{{"name", "command"}, {"options", {{"command", argv}, {"timeout_s", 0.5}}}});
    ASSERT_TRUE(bad.ok()) << bad.status().ToString();
    auto r = (*bad)->Run(Context("agent-bad"));
    ASSERT_FALSE(r.ok()) << argv.dump();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << argv.dump() << ": " << r.status().message();
  }
}

TEST(WorkflowOptions, ApiKeysAreReadFromAFileAndNeverShown) {
  char tmpl[] = "/tmp/tandem-key-XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  const std::string path = tmpl;
  auto write = [&](const std::string& text) {
    FILE* f = fopen(path.c_str(), "wb");
    fwrite(text.data(), 1, text.size(), f);
    fclose(f);
  };
  write("sk-secret-123\n");
  auto key = ReadApiKey(path);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(*key, "sk-secret-123");
  for (const std::string& bad : {std::string(""), std::string("two words"), std::string(5000, 'k'), std::string("a\nb")}) {
    write(bad);
    auto r = ReadApiKey(path);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message().find("words"), std::string::npos) << "the key is never in an error";
    EXPECT_NE(r.status().message().find(path), std::string::npos);
  }
  close(fd);
  std::remove(path.c_str());
  EXPECT_FALSE(ReadApiKey(path).ok());
  // The spec names the file; a key in the spec is an unknown key.
  auto in_spec = MakeWorkflow(json{{"name", "simulated-user"},
                                   {"options", {{"user", {{"url", "http://127.0.0.1:9"}, {"api_key", "sk-1"}}}}}});
  ASSERT_FALSE(in_spec.ok());
  EXPECT_NE(in_spec.status().message().find("unknown key 'api_key'"), std::string::npos) << in_spec.status().message();
  EXPECT_EQ(in_spec.status().message().find("sk-1"), std::string::npos);
}

TEST(WorkflowOptions, AreReadStrictly) {
  const std::pair<json, const char*> table[] = {
      {"nope", "unknown name \"nope\" (expected one of single-turn, multi-turn-feedback, tool-calls, simulated-user, command)"},
      {{{"name", "simulated-user"}}, "key 'user': required"},
      {{{"name", "command"}}, "key 'command': expected an array of 1 to 64 strings"},
      {{{"name", "command"}, {"options", {{"command", json::array()}}}}, "expected an array of 1 to 64 strings"},
      {{{"name", "command"}, {"options", {{"command", {"a", 1}}}}}, "expected strings (argv)"},
      {{{"name", "command"}, {"options", {{"command", {"a"}}, {"timeout_s", -1}}}}, "key 'timeout_s'"},
      {{{"name", "simulated-user"}, {"options", {{"user", {{"url", "https://api.x:443"}}}}}}, "no TLS"},
      {{{"name", "simulated-user"}, {"options", {{"user", {{"port_file", "u.port"}}}}}}, "tokenizer: required"},
      {{{"name", "simulated-user"}, {"options", {{"user", {{"port_file", "u"}, {"url", "http://h:1"}}}}}},
       "expected either port_file"},
      {{{"name", "simulated-user"}, {"options", {{"user", {{"url", "http://h:1"}}}, {"user_temperature", 3}}}},
       "user_temperature"},
      {42, "expected a name or"},
      {{{"name", "tool-calls"}, {"extra", 1}}, "unknown key 'extra'"},
      {{{"name", "tool-calls"}, {"options", 3}}, "workflow.options: expected an object"},
      {{{"name", "multi-turn-feedback"}, {"options", {{"max_turn", 2}}}}, "max_turn"},
      {{{"name", "multi-turn-feedback"}, {"options", {{"max_turns", 0}}}}, "key 'max_turns': expected an integer in [1, 64]"},
      {{{"name", "multi-turn-feedback"}, {"options", {{"discount", 1.5}}}}, "key 'discount': expected a number in (0, 1]"},
      {{{"name", "multi-turn-feedback"}, {"options", {{"feedback", ""}}}}, "key 'feedback': expected 1 to 4096 bytes"},
      {{{"name", "tool-calls"}, {"options", {{"max_turns", "4"}}}}, "key 'max_turns'"},
      {{{"name", "single-turn"}, {"options", {{"max_turns", 2}}}}, "max_turns"},
  };
  for (const auto& [spec, want] : table) {
    auto wf = MakeWorkflow(spec);
    ASSERT_FALSE(wf.ok()) << spec.dump();
    EXPECT_NE(wf.status().message().find(want), std::string::npos) << spec.dump() << ": " << wf.status().message();
  }
  EXPECT_TRUE(MakeWorkflow({{"name", "single-turn"}, {"options", nullptr}}).ok());
}

TEST(ChatUrl, ParsesHttpAndRefusesTheRest) {
  auto ok = ParseChatUrl("http://10.0.0.2:8000/v1/chat/completions");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->host, "10.0.0.2");
  EXPECT_EQ(ok->port, 8000);
  auto bare = ParseChatUrl("http://localhost:9");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->path, "/v1/chat/completions");
  for (const char* bad : {"https://api.example.com/v1", "ftp://x:1", "http://host", "http://host:99999", "http://:80",
                          "http://host:8a"})
    EXPECT_FALSE(ParseChatUrl(bad).ok()) << bad;
  EXPECT_NE(ParseChatUrl("https://x:443").status().message().find("no TLS"), std::string::npos);
}

TEST(ChatReplyParse, RefusesMalformedAnswers) {
  const std::pair<const char*, const char*> table[] = {
      {"[]", "not a JSON object"},
      {"{\"choices\": []}", "choices: expected a non-empty array"},
      {"{\"choices\": [{\"message\": 1}]}", "choices[0].message: expected an object"},
      {"{\"choices\": [{\"message\": {\"content\": 5}}]}", "content: expected a string or null"},
      {"{\"choices\": [{\"message\": {\"tool_calls\": {}}}]}", "tool_calls: expected an array"},
      {"{\"choices\": [{\"message\": {\"tool_calls\": [{\"function\": {\"name\": 1}}]}}]}", "expected string name"},
  };
  for (const auto& [body, want] : table) {
    auto r = ParseChatReply(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << body << ": " << r.status().message();
  }
  auto r = ParseChatReply(R"({"choices": [{"message": {"role": "assistant", "content": null,
      "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}]},
      "finish_reason": "tool_calls"}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->content, "");
  ASSERT_EQ(r->tool_calls.size(), 1u);
  EXPECT_EQ(r->tool_calls[0].name, "calculator");
  EXPECT_EQ(r->finish_reason, "tool_calls");
}

}  // namespace
}  // namespace tandem::agents
