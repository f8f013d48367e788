// Chat formatting (docs/model.md "Tokenizer", "Chat formats"): turning a
// conversation (std::vector<ChatMessage>) into text and token ids.
//
// Two formats are built in; no Jinja is run.
//   ChatML: each message is "<|im_start|>{role}\n{content}<|im_end|>\n"; the
//     generation prompt is "<|im_start|>assistant\n". A tokenizer_config.json
//     whose chat_template holds both "<|im_start|>" and "<|im_end|>" selects it.
//   Plain: for base tokenizers without a chat template: each message is
//     role_prefix[role] + content + message_suffix, the generation prompt is
//     generation_prompt; all strings configurable.
//
// Encoding: the template's own strings may hold special tokens; message
// contents never do (a "<|im_end|>" written in a content is encoded as text,
// so data cannot forge turn boundaries). Otherwise the ids equal those of
// encoding the formatted text as one string.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/data/chat_message.h"
#include "workers/data/tokenizer.h"

namespace tandem::data {

struct PlainChatFormat {
  // Text before a message's content, by role; a role absent here is an error.
  std::map<std::string, std::string, std::less<>> role_prefix = {
      {"system", "System: "}, {"user", "User: "}, {"assistant", "Assistant: "}};
  std::string message_suffix = "\n\n";
  std::string generation_prompt = "Assistant:";
};

struct ChatFormat {
  enum class Kind { kChatMl, kPlain };
  Kind kind = Kind::kChatMl;
  PlainChatFormat plain;  // for kPlain

  static ChatFormat ChatMl() { return {}; }
  static ChatFormat Plain(PlainChatFormat plain = {}) { return {Kind::kPlain, std::move(plain)}; }
};

// True when a Jinja chat_template's text is ChatML-like (holds both
// "<|im_start|>" and "<|im_end|>").
bool LooksLikeChatMl(std::string_view chat_template);

// The format a tokenizer's tokenizer_config.json selects: ChatML for a
// ChatML-like chat_template, `fallback` when there is no chat_template;
// FailedPrecondition for any other chat_template (we do not run Jinja: pass
// a ChatFormat yourself). ChatML also needs <|im_start|> and <|im_end|> to
// be tokens.
StatusOr<ChatFormat> ChatFormatFor(const Tokenizer& tokenizer, const ChatFormat& fallback = ChatFormat::Plain());

// The conversation as text. InvalidArgument for a role the Plain format has
// no prefix for.
StatusOr<std::string> FormatChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt);

// Where one message lies in the ids: [begin, end) is all of it (template text
// included), [content_begin, content_end) the tokens that overlap its content
// (a token spanning template and content text counts as content).
struct MessageSpan {
  size_t begin = 0, end = 0;
  size_t content_begin = 0, content_end = 0;
};

struct EncodedChat {
  std::vector<TokenId> ids;
  std::vector<MessageSpan> messages;  // one per message, in order
};

// Formats and encodes the conversation (see the contract above).
StatusOr<EncodedChat> EncodeChat(const Tokenizer& tokenizer, const ChatFormat& format,
                                 const std::vector<ChatMessage>& messages, bool add_generation_prompt);

}  // namespace tandem::data
