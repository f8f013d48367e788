// model.safetensors.index.json (see safetensors_index.h).
#include "workers/model/safetensors_index.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

namespace tandem::model {
namespace {

using nlohmann::json;

std::string Quoted(std::string_view s) { return DumpJson(json(std::string(s))); }

StatusOr<SafetensorsIndex> Parse(std::string_view text) {
  // nlohmann takes a NUL byte for the end of the input; valid JSON holds none.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    return InvalidArgument("NUL byte at offset " + std::to_string(nul) + " (not valid JSON)");
  TANDEM_ASSIGN_OR_RETURN(json j, ParseJsonBounded(text));
  if (!j.is_object()) return InvalidArgument(std::string("index is JSON ") + j.type_name() + ", expected an object");
  SafetensorsIndex idx;
  if (j.contains("metadata")) {
    const json& m = j["metadata"];
    if (!m.is_object()) return InvalidArgument(std::string("metadata is ") + m.type_name() + ", expected an object");
    if (m.contains("total_size")) {
      const json& t = m["total_size"];
      if (t.is_number_unsigned()) idx.total_size = t.get<uint64_t>();
      else if (t.is_number_integer() && t.get<int64_t>() >= 0) idx.total_size = static_cast<uint64_t>(t.get<int64_t>());
      else return InvalidArgument("metadata.total_size is " + DumpJson(t) + ", expected a non-negative integer");
    }
  }
  if (!j.contains("weight_map")) return InvalidArgument("missing weight_map");
  const json& w = j["weight_map"];
  if (!w.is_object()) return InvalidArgument(std::string("weight_map is ") + w.type_name() + ", expected an object");
  for (const auto& [name, file] : w.items()) {
    const std::string where = "weight_map[" + Quoted(name) + "]";
    if (name.empty()) return InvalidArgument("weight_map names the empty tensor name");
    if (!file.is_string()) return InvalidArgument(where + " is " + file.type_name() + ", expected a file name");
    const std::string& f = file.get_ref<const std::string&>();
    TANDEM_RETURN_IF_ERROR(CheckPlainFileName(f), where);
    idx.weight_map.emplace(name, f);
  }
  return idx;
}

}  // namespace

Status CheckPlainFileName(std::string_view name) {
  if (name.empty()) return InvalidArgument("empty file name");
  if (name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos)
    return InvalidArgument("file name " + Quoted(name) +
                           " is not a plain file name in the checkpoint directory (refused: it could escape it)");
  return Status::Ok();
}

StatusOr<SafetensorsIndex> ParseSafetensorsIndex(std::string_view text, std::string_view file) {
  auto idx = Parse(text);
  if (!idx.ok()) return idx.status().WithContext(file);
  return idx;
}

std::string SafetensorsIndexJson(const std::map<std::string, std::string>& weight_map, uint64_t total_size) {
  json j = json::object();  // std::map keys: sorted, as sort_keys=True
  j["metadata"] = json::object();
  j["metadata"]["total_size"] = total_size;
  j["weight_map"] = json::object();
  for (const auto& [name, file] : weight_map) j["weight_map"][name] = file;
  // Python's json.dumps(indent=2) separates items with "," + newline and
  // keys with ": ", and (ensure_ascii) escapes non-ASCII as \uXXXX.
  return j.dump(2, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace) + "\n";
}

std::string SafetensorsShardFileName(size_t shard, size_t shard_count) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", shard + 1, shard_count);
  return buf;
}

}  // namespace tandem::model
