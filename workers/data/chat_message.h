// One message of a chat conversation, as data sets give prompts and as chat
// templates format them (docs/model.md, "Tokenizer" and "Data sets and
// rewards"). role is free text ("system", "user", "assistant", "tool"); the
// chat template decides what a role means.
#pragma once

#include <string>

namespace tandem::data {

struct ChatMessage {
  std::string role;
  std::string content;
};

}  // namespace tandem::data
