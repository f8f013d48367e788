// multi-turn-feedback (workflow.h): the model answers; a wrong answer is
// told so and the model tries again, up to max_turns answers.
//   options: max_turns (default 3), discount in (0, 1] (default 0.5; a right
//   answer at turn k earns discount^(k-1)), feedback (the environment's
//   words, "{question}" standing for the problem's question; default
//   below: it restates the question, as a tutor would).

#include "common/replace_all.h"
#include "workers/agents/builtin_workflows.h"
#include "workers/data/dataset_options.h"

namespace tandem::agents {
namespace {

using nlohmann::json;

constexpr const char* kFeedback = "That is not right. Try again: {question}";



class Feedback final : public Workflow {
 public:
  Feedback(int64_t max_turns, double discount, std::string feedback)
      : max_turns_(max_turns), discount_(discount), feedback_(std::move(feedback)) {}
  std::string_view name() const override { return "multi-turn-feedback"; }

  StatusOr<Episode> Run(const EpisodeContext& ctx) const override {
    json messages = PromptMessages(*ctx.problem);
    Episode e;
    for (int64_t turn = 1; turn <= max_turns_; ++turn) {
      TANDEM_ASSIGN_OR_RETURN(const ChatReply reply, ctx.model->Complete(messages, nullptr, ctx.params, ctx.session),
                              "turn " + std::to_string(turn));
      if (ScoreAnswer(ctx, reply.content, turn, discount_, e)) return e;
      messages.push_back(reply.message);
      messages.push_back({{"role", "user"}, {"content", ReplaceAll(feedback_, "{question}", Question(*ctx.problem))}});
    }
    return e;
  }

 private:
  int64_t max_turns_;
  double discount_;
  std::string feedback_;
};

}  // namespace

StatusOr<std::unique_ptr<Workflow>> MakeFeedback(const json& options) {
  TANDEM_ASSIGN_OR_RETURN(const data::DatasetOptions opts,
                          data::DatasetOptions::Make("workflow multi-turn-feedback", options,
                                                     {"max_turns", "discount", "feedback"}));
  TANDEM_ASSIGN_OR_RETURN(const int64_t turns, TurnsOption(options, "multi-turn-feedback", "max_turns", 3));
  TANDEM_ASSIGN_OR_RETURN(const double discount, DiscountOption(options, "multi-turn-feedback", "discount", 0.5));
  TANDEM_ASSIGN_OR_RETURN(const std::optional<std::string> feedback, opts.String("feedback"));
  if (feedback && (feedback->empty() || feedback->size() > 4096))
    return InvalidArgument("workflow multi-turn-feedback options: key 'feedback': expected 1 to 4096 bytes");
  return std::unique_ptr<Workflow>(std::make_unique<Feedback>(turns, discount, feedback.value_or(kFeedback)));
}

}  // namespace tandem::agents
