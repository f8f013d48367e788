// The dapo-math data set (docs/model.md, "Data sets and rewards",
// "dapo-math"): DAPO-Math-17k rows as JSONL, one a line:
//   {"prompt": [{"role": "user", "content": "..."}, ...],
//    "reward_model": {"ground_truth": "34", ...},
//    "extra_info": {"index": "..."}, ...}
// `prompt` is the chat as given (a non-empty array of {role, content}
// strings); the ground truth is `reward_model.ground_truth` (a string, or a
// JSON number written as its decimal text); the id is `extra_info.index`
// when it is a string, else "FILE:LINE". Other keys are ignored. There is
// no reference solution. DAPO's prompts ask for a last line "Answer: N",
// which the dapo-math verifier requires (fallback "none").
//
// Options: {"path" (required), "limit", "on_bad_row": "error" | "skip",
// "verifier"} as for gsm8k.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/data/dataset.h"

namespace tandem::data {

StatusOr<std::unique_ptr<Dataset>> OpenDapoMath(const nlohmann::json& options);

}  // namespace tandem::data
