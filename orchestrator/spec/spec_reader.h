// Reading a JSON document against schemas/jobspec.schema.json while keeping
// every violation (not only the first), each with its JSON path and what was
// expected: `roles.actor.replicas: expected an integer >= 1, got "two"`.
//
// The rules here mirror the schema's keywords one to one (type, minimum,
// maximum, pattern, enum, additionalProperties), so that the C++ parser and a
// JSON Schema validator agree on every document; the spec_corpus test checks
// that they do. Internal to orchestrator/spec/.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/spec/job_spec.h"

namespace tandem::spec::internal {

// Ordered, so that roles keep the document's order.
using Json = nlohmann::ordered_json;

// "roles" + "actor" -> "roles.actor"; a key with other characters than
// [A-Za-z0-9_$-] is quoted: roles["a b"]. An empty path yields the key alone.
std::string JoinKey(std::string_view path, std::string_view key);
// "roles.actor.command" + 2 -> "roles.actor.command[2]".
std::string JoinIndex(std::string_view path, size_t index);
// How a value is shown after "got": "two" (quoted, shortened), 2.5, true,
// null, an object, an array.
std::string Describe(const Json& v);

// Name rules, identical to the schema's patterns.
bool IsJobName(std::string_view s);   // ^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$
bool IsRoleName(std::string_view s);  // ^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$
bool IsEnvName(std::string_view s);   // ^[A-Za-z_][A-Za-z0-9_]*$
bool HasNul(std::string_view s);

// A rule for a string value: a predicate and the phrase that follows
// "expected " when it fails.
struct StringRule {
  bool (*valid)(std::string_view);
  const char* expected;
};
extern const StringRule kAnyString;     // any string (an argv entry, an env value: no NUL)
extern const StringRule kText;          // a non-empty string without NUL
extern const StringRule kJobNameRule;
extern const StringRule kRoleNameRule;

class Reader {
 public:
  explicit Reader(std::vector<SpecError>* errors) : errors_(errors) {}

  void Error(std::string path, std::string message);
  size_t error_count() const { return errors_->size(); }

  // Reports a type error unless `v` is an object.
  bool ExpectObject(const Json& v, std::string_view path);
  // Reports every key of `obj` (an object) that is not in `allowed`, with a
  // "did you mean" when one allowed key is close.
  void CheckKeys(const Json& obj, std::string_view path,
                 std::initializer_list<std::string_view> allowed);

  std::optional<std::string> String(const Json& v, std::string_view path, const StringRule& rule);
  // One of `choices`; the error lists them.
  std::optional<std::string> Enum(const Json& v, std::string_view path,
                                  std::initializer_list<std::string_view> choices);
  // An integer (a JSON number with no fractional part, as in JSON Schema)
  // in [min, max].
  std::optional<int64_t> Integer(const Json& v, std::string_view path, int64_t min, int64_t max);
  // Any finite JSON number in [min, max].
  std::optional<double> Number(const Json& v, std::string_view path, double min, double max);
  // Any finite JSON number in (above, max] (the schema's exclusiveMinimum).
  std::optional<double> NumberAbove(const Json& v, std::string_view path, double above, double max);
  std::optional<bool> Bool(const Json& v, std::string_view path);
  // An array of strings, each checked by `rule`.
  std::optional<std::vector<std::string>> StringArray(const Json& v, std::string_view path,
                                                      const StringRule& rule);
  // An environment object: valid names that tandem does not own, string values.
  std::optional<std::map<std::string, std::string>> Env(const Json& v, std::string_view path);

 private:
  std::vector<SpecError>* errors_;
};

}  // namespace tandem::spec::internal
