// Building sft examples from problems (sft_example.h).
#include "workers/train/sft_example.h"

#include <cstdint>

namespace tandem::train {

StatusOr<SftExample> MakeSftExample(const data::Tokenizer& tokenizer, const data::ChatFormat& format,
                                    const data::Problem& problem, data::TokenId end_token) {
  if (!problem.reference_solution)
    return FailedPrecondition("problem " + problem.id + " has no reference solution to train on");
  TANDEM_ASSIGN_OR_RETURN(data::EncodedChat chat,
                          data::EncodeChat(tokenizer, format, problem.prompt, /*add_generation_prompt=*/true),
                          "problem " + problem.id);
  SftExample ex;
  ex.ids.assign(chat.ids.begin(), chat.ids.end());
  ex.prompt_tokens = static_cast<int32_t>(ex.ids.size());
  TANDEM_RETURN_IF_ERROR(tokenizer.EncodeAppend(*problem.reference_solution, {}, &ex.ids),
                         "problem " + problem.id + ": reference solution");
  ex.ids.push_back(end_token);
  return ex;
}

}  // namespace tandem::train
