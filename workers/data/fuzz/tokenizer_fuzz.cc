// libFuzzer target: a tokenizer from a model directory's files (issue #13
// point 4), tokenizer.json and tokenizer_config.json as they come, and text
// through it. The input is tokenizer.json, a NUL byte, tokenizer_config.json,
// a NUL byte, then the text (missing parts are empty). Nothing may crash,
// throw, leak, hang or trip a sanitizer; once a tokenizer is accepted,
// every id Encode returns is in its vocabulary, Decode takes them back,
// and the same text encodes again to the same ids (the BPE cache changes
// nothing). Seeds:
// tests/fuzz/tokenizer/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "workers/data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  auto next = [&rest] {
    const size_t nul = rest.find('\0');
    const std::string_view part = rest.substr(0, nul);
    rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
    return part;
  };
  const std::string_view tokenizer_json = next(), config_json = next(), text = rest;
  auto tok = tandem::data::Tokenizer::FromJson(tokenizer_json, config_json);
  if (!tok.ok()) return 0;
  for (const bool split : {false, true}) {
    tandem::data::EncodeOptions options;
    options.split_special_tokens = split;
    options.invalid_utf8 = tandem::data::EncodeOptions::InvalidUtf8::kReplace;
    auto ids = tok->Encode(text, options);
    if (!ids.ok()) continue;  // e.g. a byte the vocabulary lacks
    for (const tandem::data::TokenId id : *ids)
      if (id < 0 || id >= tok->vocab_size()) std::abort();
    if (!tok->Decode(*ids).ok()) std::abort();
    auto again = tok->Encode(text, options);
    if (!again.ok() || *again != *ids) std::abort();  // the BPE cache changes nothing
  }
  return 0;
}
