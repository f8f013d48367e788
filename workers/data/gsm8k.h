// The gsm8k data set (docs/model.md, "Data sets and rewards", "gsm8k"):
// GSM8K's JSONL, one {"question": str, "answer": str} a line, the answer's
// last "#### N" giving the ground truth (commas removed: "#### 1,000" ->
// "1000"). Prompt: an optional system message, then the question as the user
// turn; reference solution: the answer text as is (calculator annotations
// "<<48/2=24>>" included, and the "#### N" line). A row whose answer has no
// "####" or whose ground truth is not a number is a bad row.
//
// Options: {"path": JSONL file (required), "limit": keep the first N rows,
// "on_bad_row": "error" (default) | "skip", "system": a system prompt,
// "verifier": options of the gsm8k verifier (verifier.h)}.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/data/dataset.h"

namespace tandem::data {

StatusOr<std::unique_ptr<Dataset>> OpenGsm8k(const nlohmann::json& options);

// The ground truth of a GSM8K answer text: what follows its last "####",
// trimmed, commas removed; InvalidArgument when there is none or it is not
// a number.
StatusOr<std::string> Gsm8kGroundTruth(std::string_view answer);

}  // namespace tandem::data
