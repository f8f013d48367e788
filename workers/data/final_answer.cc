// Final-answer markers (final_answer.h).
#include "workers/data/final_answer.h"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tandem::data {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool IsAlnum(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Trims spaces and markdown emphasis ('*') from both ends.
std::string_view Trim(std::string_view s) {
  while (!s.empty() && (IsSpace(s.front()) || s.front() == '*')) s.remove_prefix(1);
  while (!s.empty() && (IsSpace(s.back()) || s.back() == '*')) s.remove_suffix(1);
  return s;
}

// The rest of the line starting at `i`, trimmed.
std::string_view RestOfLine(std::string_view t, size_t i) {
  const size_t nl = t.find('\n', i);
  return Trim(t.substr(i, (nl == std::string_view::npos ? t.size() : nl) - i));
}

struct Box {
  size_t position;  // of the backslash
  size_t open;      // of '{'
  size_t close;     // of the matching '}'
};

// Every well-formed `\boxed{...}` / `\fbox{...}` of `t`, by position, nested
// ones included. Braces are matched once with a stack, so this is linear.
std::vector<Box> AllBoxes(std::string_view t) {
  std::vector<Box> out;
  if (t.find("\\boxed") == std::string_view::npos && t.find("\\fbox") == std::string_view::npos) return out;
  std::vector<size_t> close_of(t.size(), std::string_view::npos);
  std::vector<size_t> open;
  for (size_t j = 0; j < t.size(); ++j) {
    if (t[j] == '{') {
      open.push_back(j);
    } else if (t[j] == '}' && !open.empty()) {
      close_of[open.back()] = j;
      open.pop_back();
    }
  }
  for (size_t at = 0; at < t.size(); ++at) {
    if (t[at] != '\\') continue;
    size_t i = at + 1;
    if (t.substr(i, 5) == "boxed") i += 5;
    else if (t.substr(i, 4) == "fbox") i += 4;
    else continue;
    while (i < t.size() && IsSpace(t[i])) ++i;
    if (i < t.size() && t[i] == '{' && close_of[i] != std::string_view::npos)  // else malformed: ignored
      out.push_back(Box{at, i, close_of[i]});
  }
  return out;
}

// The box that states the answer: the last top-level box, then, while it
// holds boxes, the last of its direct children. Children are walked by
// jumping past each one (a binary search), so deep nesting stays cheap.
std::optional<Box> AnswerBox(const std::vector<Box>& boxes) {
  if (boxes.empty()) return std::nullopt;
  auto first_at_or_after = [&boxes](size_t from, size_t position) {
    return static_cast<size_t>(std::lower_bound(boxes.begin() + static_cast<std::ptrdiff_t>(from), boxes.end(), position,
                                                [](const Box& b, size_t p) { return b.position < p; }) -
                               boxes.begin());
  };
  // The last top-level box.
  size_t cur = 0;
  for (size_t next = first_at_or_after(1, boxes[0].close); next < boxes.size();
       next = first_at_or_after(next + 1, boxes[next].close))
    cur = next;
  while (cur + 1 < boxes.size() && boxes[cur + 1].position < boxes[cur].close) {
    size_t last = cur + 1;
    for (size_t next = first_at_or_after(last + 1, boxes[last].close);
         next < boxes.size() && boxes[next].position < boxes[cur].close;
         next = first_at_or_after(next + 1, boxes[next].close))
      last = next;
    cur = last;
  }
  return boxes[cur];
}

// "answer" at `i` as a word, followed by ':' or " is": the offset of the
// text after it, or npos.
size_t AnswerLineTextAt(std::string_view t, size_t i) {
  static constexpr std::string_view kWord = "answer";
  if (i + kWord.size() > t.size()) return std::string_view::npos;
  for (size_t k = 0; k < kWord.size(); ++k)
    if (Lower(t[i + k]) != kWord[k]) return std::string_view::npos;
  if (i > 0 && IsAlnum(t[i - 1])) return std::string_view::npos;
  size_t j = i + kWord.size();
  while (j < t.size() && (t[j] == '*' || t[j] == ' ' || t[j] == '\t')) ++j;
  if (j < t.size() && t[j] == ':') return j + 1;
  if (j > i + kWord.size() && j + 2 <= t.size() && Lower(t[j]) == 'i' && Lower(t[j + 1]) == 's' &&
      (j + 2 == t.size() || !IsAlnum(t[j + 2])))
    return j + 2;
  return std::string_view::npos;
}

}  // namespace

std::string_view AnswerMarkerName(AnswerMarker m) {
  switch (m) {
    case AnswerMarker::kBoxed: return "boxed";
    case AnswerMarker::kHashes: return "####";
    case AnswerMarker::kAnswerLine: return "answer-line";
  }
  return "?";
}

std::optional<FinalAnswer> FindFinalAnswer(std::string_view t) {
  std::optional<FinalAnswer> best;
  auto offer = [&best](AnswerMarker m, size_t position, std::string_view text) {
    if (text.empty()) return;
    if (!best || position >= best->position) best = FinalAnswer{m, position, text};
  };
  for (size_t at = t.find("####"); at != std::string_view::npos; at = t.find("####", at)) {
    size_t i = at;
    while (i < t.size() && t[i] == '#') ++i;
    offer(AnswerMarker::kHashes, at, RestOfLine(t, i));
    at = i;
  }
  for (size_t i = 0; i < t.size(); ++i) {
    if (Lower(t[i]) != 'a') continue;
    const size_t text_at = AnswerLineTextAt(t, i);
    if (text_at != std::string_view::npos) offer(AnswerMarker::kAnswerLine, i, RestOfLine(t, text_at));
  }
  if (const std::optional<Box> box = AnswerBox(AllBoxes(t))) {
    if (!best || box->position >= best->position) {
      const std::string_view content = Trim(t.substr(box->open + 1, box->close - box->open - 1));
      if (!content.empty()) best = FinalAnswer{AnswerMarker::kBoxed, box->position, content};
    }
  }
  return best;
}

}  // namespace tandem::data
