// A SAX pass that sees only objects and their keys, everything else passed
// over: the base of the passes that check a hostile text's keys before its
// DOM parse (json_repeated_key.h: a key given twice; workers/agents/
// ordered_json.cc: too many keys in one object). Invalid JSON stops the
// pass (the DOM parse then reports it). Header-only: common/ does not link
// nlohmann.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace tandem {

class JsonKeySax : public nlohmann::json_sax<nlohmann::json> {
 public:
  // An object opens or closes (the innermost open one is the keys' object).
  virtual void OpenObject() = 0;
  virtual void CloseObject() = 0;
  // A key of the innermost open object, `depth` objects deep (1: the
  // top-level object's); false stops the pass.
  virtual bool Key(string_t& key, size_t depth) = 0;

  bool key(string_t& k) final { return depth_ == 0 || Key(k, depth_); }
  bool start_object(std::size_t) final {
    ++depth_;
    OpenObject();
    return true;
  }
  bool end_object() final {
    if (depth_ == 0) return true;
    --depth_;
    CloseObject();
    return true;
  }
  bool null() final { return true; }
  bool boolean(bool) final { return true; }
  bool number_integer(number_integer_t) final { return true; }
  bool number_unsigned(number_unsigned_t) final { return true; }
  bool number_float(number_float_t, const string_t&) final { return true; }
  bool string(string_t&) final { return true; }
  bool binary(binary_t&) final { return true; }
  bool start_array(std::size_t) final { return true; }
  bool end_array() final { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) final { return false; }

 private:
  size_t depth_ = 0;
};

}  // namespace tandem
