// ChatML and Plain chat formats, as text and as ids with message spans
// (chat_template.h).
//
// EncodeChat builds the conversation as segments of text cut at the
// template's special tokens; each segment is encoded as one string (so BPE
// sees the same text as when the whole conversation is encoded at once) with
// special tokens off, and the byte positions where messages and contents
// begin and end are carried into the stream of token end offsets.
#include "workers/data/chat_template.h"

#include <algorithm>

#include "workers/data/unicode_text.h"

namespace tandem::data {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";

// A part of the formatted conversation: template text (may hold special
// tokens) or a message's content (never does).
struct Part {
  std::string_view text;
  bool content;
};

// The parts of message `m`, in order.
StatusOr<std::vector<Part>> MessageParts(const ChatFormat& f, const ChatMessage& m, std::string* scratch) {
  if (f.kind == ChatFormat::Kind::kChatMl) {
    *scratch = std::string(kImStart) + m.role + "\n";
    return std::vector<Part>{{*scratch, false}, {m.content, true}, {"<|im_end|>\n", false}};
  }
  const auto it = f.plain.role_prefix.find(m.role);
  if (it == f.plain.role_prefix.end())
    return InvalidArgument("chat: role \"" + m.role + "\" has no prefix in the plain chat format");
  return std::vector<Part>{{it->second, false}, {m.content, true}, {f.plain.message_suffix, false}};
}

std::string_view GenerationPrompt(const ChatFormat& f) {
  return f.kind == ChatFormat::Kind::kChatMl ? std::string_view("<|im_start|>assistant\n")
                                             : std::string_view(f.plain.generation_prompt);
}

// Positions in the stream of encoded text (normalized segments and special
// tokens' contents, in order), where token ends are measured.
struct StreamRange {
  size_t begin = 0, end = 0;
};

class ChatEncoder {
 public:
  explicit ChatEncoder(const Tokenizer& tok) : tok_(tok) {
    for (const auto& t : tok.added_tokens())
      if (t.special) specials_.push_back(&t);
    std::stable_sort(specials_.begin(), specials_.end(),
                     [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
  }

  // Records the current position into *where once the segment is encoded.
  void Mark(size_t* where) { marks_.push_back({seg_.size(), where}); }

  void AddContent(std::string_view text) { seg_ += text; }

  Status AddTemplate(std::string_view text) {
    size_t pos = 0;
    while (pos < text.size()) {
      const AddedToken* hit = nullptr;
      size_t at = text.size();
      for (const AddedToken* t : specials_) {  // leftmost, then longest
        const size_t p = text.find(t->content, pos);
        if (p < at) {
          at = p;
          hit = t;
        }
      }
      seg_ += text.substr(pos, at - pos);
      if (hit == nullptr) break;
      TANDEM_RETURN_IF_ERROR(Flush());
      out_.ids.push_back(hit->id);
      stream_ += hit->content.size();
      ends_.push_back(stream_);
      pos = at + hit->content.size();
    }
    return Status::Ok();
  }

  Status Flush() {
    EncodeOptions opts;
    opts.split_special_tokens = true;
    std::vector<size_t> seg_ends;
    TANDEM_RETURN_IF_ERROR(tok_.EncodeAppend(seg_, opts, &out_.ids, &seg_ends), "chat");
    for (const size_t e : seg_ends) ends_.push_back(stream_ + e);
    for (const auto& [offset, where] : marks_) {
      TANDEM_ASSIGN_OR_RETURN(*where, NormalizedLength(std::string_view(seg_).substr(0, offset)));
      *where += stream_;
    }
    TANDEM_ASSIGN_OR_RETURN(const size_t len, NormalizedLength(seg_));
    stream_ += len;
    seg_.clear();
    marks_.clear();
    return Status::Ok();
  }

  // The tokens overlapping [r.begin, r.end): first and one past the last;
  // for an empty range, the empty span at the first token starting at or after it.
  std::pair<size_t, size_t> TokensOf(const StreamRange& r) const {
    size_t first = ends_.size(), last = 0;
    for (size_t k = 0; k < ends_.size(); ++k) {
      const size_t start = k == 0 ? 0 : ends_[k - 1];
      if (start < r.end && ends_[k] > r.begin) {
        first = std::min(first, k);
        last = k + 1;
      }
    }
    if (first < ends_.size()) return {first, last};
    for (size_t k = 0; k < ends_.size(); ++k)
      if ((k == 0 ? 0 : ends_[k - 1]) >= r.begin) return {k, k};
    return {ends_.size(), ends_.size()};
  }

  EncodedChat& out() { return out_; }

 private:
  StatusOr<size_t> NormalizedLength(std::string_view text) const {
    if (!tok_.normalizes_nfc() || FindInvalidUtf8(text) != std::string_view::npos) return text.size();
    TANDEM_ASSIGN_OR_RETURN(const std::string n, NormalizeNfc(text));
    return n.size();
  }

  const Tokenizer& tok_;
  std::vector<const AddedToken*> specials_;
  EncodedChat out_;
  std::vector<size_t> ends_;  // stream offset where each id ends
  size_t stream_ = 0;
  std::string seg_;
  std::vector<std::pair<size_t, size_t*>> marks_;
};

}  // namespace

bool LooksLikeChatMl(std::string_view chat_template) {
  return chat_template.find(kImStart) != std::string_view::npos && chat_template.find(kImEnd) != std::string_view::npos;
}

StatusOr<ChatFormat> ChatFormatFor(const Tokenizer& tokenizer, const ChatFormat& fallback) {
  const auto& tmpl = tokenizer.config().chat_template;
  if (!tmpl) return fallback;
  if (!LooksLikeChatMl(*tmpl))
    return FailedPrecondition(
        "tokenizer_config.json: chat_template is not ChatML-like and Jinja templates are not run; pass a ChatFormat "
        "(ChatML or Plain) yourself");
  for (const auto tok : {kImStart, kImEnd})
    if (!tokenizer.TokenToId(tok))
      return FailedPrecondition("tokenizer_config.json: chat_template is ChatML-like but \"" + std::string(tok) +
                                "\" is not a token");
  return ChatFormat::ChatMl();
}

StatusOr<std::string> FormatChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) {
  std::string out, scratch;
  for (const auto& m : messages) {
    TANDEM_ASSIGN_OR_RETURN(const auto parts, MessageParts(format, m, &scratch));
    for (const auto& p : parts) out += p.text;
  }
  if (add_generation_prompt) out += GenerationPrompt(format);
  return out;
}

StatusOr<EncodedChat> EncodeChat(const Tokenizer& tokenizer, const ChatFormat& format,
                                 const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  if (format.kind == ChatFormat::Kind::kChatMl) {
    for (const auto tok : {kImStart, kImEnd}) {
      const auto id = tokenizer.TokenToId(tok);
      if (!id || !tokenizer.IsSpecial(*id))
        return FailedPrecondition("chat: the ChatML format needs \"" + std::string(tok) +
                                  "\" as a special token of the tokenizer");
    }
  }
  ChatEncoder enc(tokenizer);
  std::vector<StreamRange> whole(messages.size()), content(messages.size());
  std::string scratch;
  for (size_t i = 0; i < messages.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(const auto parts, MessageParts(format, messages[i], &scratch),
                            "message " + std::to_string(i));
    enc.Mark(&whole[i].begin);
    for (const auto& p : parts) {
      if (p.content) {
        enc.Mark(&content[i].begin);
        enc.AddContent(p.text);
        enc.Mark(&content[i].end);
      } else {
        TANDEM_RETURN_IF_ERROR(enc.AddTemplate(p.text));
      }
    }
    enc.Mark(&whole[i].end);
  }
  if (add_generation_prompt) TANDEM_RETURN_IF_ERROR(enc.AddTemplate(GenerationPrompt(format)));
  TANDEM_RETURN_IF_ERROR(enc.Flush());
  EncodedChat& out = enc.out();
  for (size_t i = 0; i < messages.size(); ++i) {
    MessageSpan s;
    std::tie(s.begin, s.end) = enc.TokensOf(whole[i]);
    std::tie(s.content_begin, s.content_end) = enc.TokensOf(content[i]);
    out.messages.push_back(s);
  }
  return std::move(out);
}

}  // namespace tandem::data
