// command (workflow.h): the episode is an outside agent program, in any
// language, talking to the proxy with any OpenAI client (agent_process.h
// runs it). Per episode it is started with
//   OPENAI_BASE_URL  http://HOST:PORT/v1 (the proxy in front of the rollouts)
//   OPENAI_API_KEY   "tandem" (not checked; clients want one)
//   TANDEM_SESSION_ID  the episode's session: send it as the X-Session-Id
//                    header (or the body's session_id) on every call
// and on stdin one JSON object: {"session_id", "base_url", "messages" (the
// problem's prompt), "answer" (its ground truth, for the agent's reward),
// "temperature", "max_tokens", "seed"}. It must exit 0 and print, as the
// last line of its stdout, {"reward": R} (a finite number), optionally
// "solved" (a boolean; default R >= 1) and "turn_rewards" (one number per
// model call, for per-turn advantages). Anything else fails the episode with
// what was wrong and the end of its stderr.
//   options: command (required: argv, 1 to 64 strings; argv[0] found on
//   PATH), timeout_s (per episode, default 600).
#include <cmath>

#include "workers/agents/agent_process.h"
#include "workers/agents/builtin_workflows.h"
#include "workers/data/dataset_options.h"

namespace tandem::agents {
namespace {

using nlohmann::json;

// The agent's verdict: the last non-empty line of its stdout.
StatusOr<Episode> ParseVerdict(const std::string& out) {
  size_t end = out.size();
  while (end > 0 && (out[end - 1] == '\n' || out[end - 1] == '\r' || out[end - 1] == ' ')) --end;
  const size_t begin = out.rfind('\n', end == 0 ? 0 : end - 1);
  const std::string line = out.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1));
  const json v = json::parse(line, nullptr, /*allow_exceptions=*/false);
  const std::string where = "the agent's last line " + line.substr(0, 200);
  if (!v.is_object() || !v.contains("reward") || !v["reward"].is_number() || !std::isfinite(v["reward"].get<double>()))
    return InvalidArgument(where + ": expected {\"reward\": a finite number, ...}");
  Episode e;
  e.reward = v["reward"].get<double>();
  e.solved = e.reward >= 1.0;
  if (v.contains("solved")) {
    if (!v["solved"].is_boolean()) return InvalidArgument(where + ": \"solved\" is not a boolean");
    e.solved = v["solved"].get<bool>();
  }
  if (v.contains("turn_rewards")) {
    if (!v["turn_rewards"].is_array() || v["turn_rewards"].empty() || v["turn_rewards"].size() > 4096)
      return InvalidArgument(where + ": \"turn_rewards\" is not an array of 1 to 4096 numbers");
    for (const json& x : v["turn_rewards"]) {
      if (!x.is_number() || !std::isfinite(x.get<double>()))
        return InvalidArgument(where + ": \"turn_rewards\" holds a non-number");
      e.turn_rewards.push_back(x.get<double>());
    }
  } else {
    e.turn_rewards = {e.reward};
  }
  e.solved_turn = e.solved ? static_cast<int64_t>(e.turn_rewards.size()) : 0;
  return e;
}

class Command final : public Workflow {
 public:
  Command(std::vector<std::string> argv, std::chrono::milliseconds timeout) : argv_(std::move(argv)), timeout_(timeout) {}
  std::string_view name() const override { return "command"; }

  StatusOr<Episode> Run(const EpisodeContext& ctx) const override {
    const ChatEndpointOptions& m = ctx.model->options();
    const std::string base = "http://" + m.host + ":" + std::to_string(m.port) + "/v1";
    json input = {{"session_id", ctx.session},
                  {"base_url", base},
                  {"messages", PromptMessages(*ctx.problem)},
                  {"answer", ctx.problem->answer},
                  {"temperature", ctx.params.temperature},
                  {"max_tokens", ctx.params.max_tokens}};
    if (ctx.params.seed) input["seed"] = *ctx.params.seed;
    TANDEM_ASSIGN_OR_RETURN(const AgentRun run,
                            RunAgentProcess(argv_,
                                            {{"OPENAI_BASE_URL", base},
                                             {"OPENAI_API_KEY", "tandem"},
                                             {"TANDEM_SESSION_ID", ctx.session}},
                                            input.dump() + "\n", timeout_));
    const std::string tail = run.err_tail.empty() ? "" : "; its stderr ends: " + run.err_tail.substr(run.err_tail.size() > 400 ? run.err_tail.size() - 400 : 0);
    if (run.exit_code != 0)
      return Unavailable("agent " + argv_[0] + " " +
                         (run.signal ? "killed by signal " + std::to_string(run.signal)
                                     : "exited " + std::to_string(run.exit_code)) +
                         tail);
    StatusOr<Episode> e = ParseVerdict(run.out);
    if (!e.ok()) return InvalidArgument(e.status().message() + tail);
    return e;
  }

 private:
  std::vector<std::string> argv_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

StatusOr<std::unique_ptr<Workflow>> MakeCommand(const json& options) {
  TANDEM_ASSIGN_OR_RETURN(const data::DatasetOptions opts,
                          data::DatasetOptions::Make("workflow command", options, {"command", "timeout_s"}));
  const json c = opts.Raw("command");
  if (!c.is_array() || c.empty() || c.size() > 64)
    return InvalidArgument("workflow command options: key 'command': expected an array of 1 to 64 strings (argv)");
  std::vector<std::string> argv;
  for (const json& a : c) {
    if (!a.is_string() || a.get<std::string>().size() > 4096 || a.get<std::string>().find('\0') != std::string::npos)
      return InvalidArgument("workflow command options: key 'command': expected strings (argv)");
    argv.push_back(a.get<std::string>());
  }
  if (argv[0].empty()) return InvalidArgument("workflow command options: key 'command': argv[0] is empty");
  double timeout_s = 600;
  if (const json t = opts.Raw("timeout_s"); !t.is_null()) {
    if (!t.is_number() || !(t.get<double>() > 0) || !(t.get<double>() <= 86400))
      return InvalidArgument("workflow command options: key 'timeout_s': expected a number in (0, 86400]");
    timeout_s = t.get<double>();
  }
  return std::unique_ptr<Workflow>(
      std::make_unique<Command>(std::move(argv), std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000))));
}

}  // namespace tandem::agents
