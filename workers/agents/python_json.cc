// Python-style JSON text (python_json.h).
#include "workers/agents/python_json.h"

#include "common/bounded_json.h"

namespace tandem::agents {
namespace {

void Dump(const nlohmann::ordered_json& v, std::string* out) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::object: {
      *out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) *out += ", ";
        first = false;
        *out += DumpJson(nlohmann::ordered_json(key));
        *out += ": ";
        Dump(item, out);
      }
      *out += '}';
      return;
    }
    case nlohmann::ordered_json::value_t::array: {
      *out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) *out += ", ";
        Dump(v[i], out);
      }
      *out += ']';
      return;
    }
    default:
      // Scalars: nlohmann escapes strings as Python does with
      // ensure_ascii=False (", \, \b \f \n \r \t, other controls \u00xx).
      *out += DumpJson(v);
      return;
  }
}

}  // namespace

std::string PythonJsonDumps(const nlohmann::ordered_json& value) {
  std::string out;
  Dump(value, &out);
  return out;
}

}  // namespace tandem::agents
