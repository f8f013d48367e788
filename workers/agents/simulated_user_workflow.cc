// simulated-user (workflow.h): another model plays the user. The trained
// model answers the problem; while its answer is wrong and turns are left,
// the user's model, told the question and its answer (and not to reveal
// it), writes the user's next message from its side of the conversation;
// it may end the episode with ###STOP###. A right answer at model turn k
// earns discount^(k-1).
//   options: user (required: {"port_file", "replicas", "tokenizer"} of a
//   model served by tandem, or {"url", "api_key_file", "model"} of an
//   external endpoint), max_turns (3), discount (0.5), instructions (the
//   user's system prompt; "{question}" and "{answer}" are replaced),
//   user_temperature (0.7), user_max_tokens (128).
#include <fstream>

#include "common/replace_all.h"
#include "workers/agents/builtin_workflows.h"
#include "workers/data/dataset_options.h"

namespace tandem::agents {
namespace {

using nlohmann::json;

constexpr const char* kInstructions =
    "You are a student who asked a tutor this question: {question}\n"
    "The right answer is {answer}; never say it. When the tutor's answer is wrong, tell the tutor briefly what "
    "looks wrong and ask for another try. When it is right, reply only ###STOP###.";
constexpr const char* kStop = "###STOP###";
constexpr size_t kMaxUserReply = 4096;

class SimulatedUser final : public Workflow {
 public:
  SimulatedUser(UserEndpoint user, int64_t max_turns, double discount, std::string instructions, ChatParams user_params)
      : user_(std::move(user)), max_turns_(max_turns), discount_(discount), instructions_(std::move(instructions)),
        user_params_(user_params) {}
  std::string_view name() const override { return "simulated-user"; }
  const UserEndpoint* user_endpoint() const override { return &user_; }

  StatusOr<Episode> Run(const EpisodeContext& ctx) const override {
    if (ctx.user == nullptr) return FailedPrecondition("simulated-user: no user endpoint was started");
    json messages = PromptMessages(*ctx.problem);
    const std::string system =
        ReplaceAll(ReplaceAll(instructions_, "{question}", Question(*ctx.problem)), "{answer}", ctx.problem->answer);
    Episode e;
    for (int64_t turn = 1; turn <= max_turns_; ++turn) {
      TANDEM_ASSIGN_OR_RETURN(const ChatReply reply, ctx.model->Complete(messages, nullptr, ctx.params, ctx.session),
                              "turn " + std::to_string(turn));
      if (ScoreAnswer(ctx, reply.content, turn, discount_, e)) return e;
      if (turn == max_turns_) break;
      messages.push_back(reply.message);
      // The user's side: its instructions, then the conversation with the roles swapped.
      json seen = json::array({{{"role", "system"}, {"content", system}}});
      for (const json& m : messages) {
        const std::string role = m.value("role", "");
        if (role != "user" && role != "assistant") continue;
        const json& content = m.contains("content") ? m["content"] : json();
        seen.push_back({{"role", role == "user" ? "assistant" : "user"},
                        {"content", content.is_string() ? content.get<std::string>() : ""}});
      }
      ChatParams params = user_params_;
      params.seed = ctx.params.seed;
      TANDEM_ASSIGN_OR_RETURN(const ChatReply said, ctx.user->Complete(seen, nullptr, params, ""),
                              "the simulated user, after turn " + std::to_string(turn));
      if (said.content.find(kStop) != std::string::npos) break;
      messages.push_back({{"role", "user"}, {"content", said.content.substr(0, kMaxUserReply)}});
    }
    return e;
  }

 private:
  UserEndpoint user_;
  int64_t max_turns_;
  double discount_;
  std::string instructions_;
  ChatParams user_params_;
};

StatusOr<UserEndpoint> ParseUser(const json& v) {
  const std::string where = "workflow simulated-user options: key 'user'";
  if (!v.is_object()) return InvalidArgument(where + ": expected an object");
  UserEndpoint u;
  auto text = [&](const char* key, std::string* out) -> Status {
    if (!v.contains(key)) return Status::Ok();
    if (!v[key].is_string() || v[key].get<std::string>().empty() || v[key].get<std::string>().size() > 4096)
      return InvalidArgument(where + "." + key + ": expected a non-empty string");
    *out = v[key].get<std::string>();
    return Status::Ok();
  };
  for (const auto& [k, x] : v.items())
    if (k != "port_file" && k != "replicas" && k != "tokenizer" && k != "url" && k != "api_key_file" && k != "model")
      return InvalidArgument(where + ": unknown key '" + k +
                             "' (expected port_file, replicas, tokenizer, or url, api_key_file, model)");
  for (const auto& [key, out] : {std::pair{"port_file", &u.port_file}, {"tokenizer", &u.tokenizer}, {"url", &u.url},
                                 {"api_key_file", &u.api_key_file}, {"model", &u.model}})
    TANDEM_RETURN_IF_ERROR(text(key, out));
  if (v.contains("replicas")) {
    if (!v["replicas"].is_number_integer() || v["replicas"].get<int64_t>() < 1 || v["replicas"].get<int64_t>() > 1024)
      return InvalidArgument(where + ".replicas: expected an integer in [1, 1024]");
    u.replicas = v["replicas"].get<int64_t>();
  }
  if (u.url.empty() == u.port_file.empty())
    return InvalidArgument(where + ": expected either port_file (a model served by tandem) or url (an external endpoint)");
  if (!u.port_file.empty() && u.tokenizer.empty())
    return InvalidArgument(where + ".tokenizer: required with port_file (the user model's directory)");
  if (!u.url.empty()) TANDEM_RETURN_IF_ERROR(ParseChatUrl(u.url).status(), where + ".url");
  return u;
}

}  // namespace

StatusOr<std::string> ReadApiKey(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument("api_key_file " + path + ": cannot be read");
  std::string key(4097, '\0');
  in.read(key.data(), static_cast<std::streamsize>(key.size()));
  key.resize(static_cast<size_t>(in.gcount()));
  if (key.size() > 4096) return InvalidArgument("api_key_file " + path + ": over 4096 bytes");
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' ')) key.pop_back();
  if (key.empty()) return InvalidArgument("api_key_file " + path + ": empty");
  for (const char c : key)
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e)
      return InvalidArgument("api_key_file " + path + ": not one line of printable ASCII");
  return key;
}

StatusOr<std::unique_ptr<Workflow>> MakeSimulatedUser(const json& options) {
  TANDEM_ASSIGN_OR_RETURN(const data::DatasetOptions opts,
                          data::DatasetOptions::Make("workflow simulated-user", options,
                                                     {"user", "max_turns", "discount", "instructions",
                                                      "user_temperature", "user_max_tokens"}));
  if (!options.is_object() || !options.contains("user"))
    return InvalidArgument("workflow simulated-user options: key 'user': required");
  TANDEM_ASSIGN_OR_RETURN(UserEndpoint user, ParseUser(options["user"]));
  TANDEM_ASSIGN_OR_RETURN(const int64_t turns, TurnsOption(options, "simulated-user", "max_turns", 3));
  TANDEM_ASSIGN_OR_RETURN(const double discount, DiscountOption(options, "simulated-user", "discount", 0.5));
  TANDEM_ASSIGN_OR_RETURN(const std::optional<std::string> instructions, opts.String("instructions"));
  if (instructions && (instructions->empty() || instructions->size() > 16384))
    return InvalidArgument("workflow simulated-user options: key 'instructions': expected 1 to 16384 bytes");
  ChatParams user_params;
  user_params.temperature = 0.7;
  user_params.max_tokens = 128;
  if (const json t = opts.Raw("user_temperature"); !t.is_null()) {
    if (!t.is_number() || !(t.get<double>() >= 0) || !(t.get<double>() <= 2))
      return InvalidArgument("workflow simulated-user options: key 'user_temperature': expected a number in [0, 2]");
    user_params.temperature = t.get<double>();
  }
  if (const json t = opts.Raw("user_max_tokens"); !t.is_null()) {
    if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > 4096)
      return InvalidArgument("workflow simulated-user options: key 'user_max_tokens': expected an integer in [1, 4096]");
    user_params.max_tokens = t.get<int64_t>();
  }
  return std::unique_ptr<Workflow>(std::make_unique<SimulatedUser>(std::move(user), turns, discount,
                                                                   instructions.value_or(kInstructions), user_params));
}

}  // namespace tandem::agents
