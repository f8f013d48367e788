// Where a response states its final answer (docs/model.md, "Data sets and
// rewards", "Final answer"). Three markers are recognised:
//   - `\boxed{...}` (or `\fbox{...}`), braces nested to any depth; a box whose
//     braces never close is malformed and ignored; a box holding another box
//     counts as the innermost last one ("\boxed{\boxed{5}}" -> "5");
//   - `####` followed by text on the same line (GSM8K's format);
//   - an answer line: the word "answer" (any case, "**Answer**" too) then ':'
//     or " is", followed by text on the same line ("Answer: 42",
//     "The final answer is 42").
// The marker that starts last in the response wins, so "Answer: \boxed{5}"
// gives "5" and a model that corrects itself ("#### 4 ... #### 5") is judged
// on its last statement. A marker with nothing after it on its line is
// ignored. Scanning is linear and iterative (no recursion on nesting).
#pragma once

#include <optional>
#include <string_view>

namespace tandem::data {

enum class AnswerMarker { kBoxed, kHashes, kAnswerLine };

std::string_view AnswerMarkerName(AnswerMarker m);  // "boxed", "####", "answer-line"

struct FinalAnswer {
  AnswerMarker marker;
  size_t position;        // byte offset of the marker in the response
  std::string_view text;  // what the marker states, trimmed; a view into the response
};

// The winning marker of `response`, or nullopt when it has none.
std::optional<FinalAnswer> FindFinalAnswer(std::string_view response);

}  // namespace tandem::data
