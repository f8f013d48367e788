// SafetensorsCheckpoint (see safetensors_checkpoint.h).
#include "workers/model/safetensors_checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "workers/model/safetensors_index.h"

namespace tandem::model {
namespace {

// A tensor name as JSON text: quoted, control bytes escaped.
std::string Quoted(std::string_view s) { return DumpJson(nlohmann::json(std::string(s))); }

std::string Join(const std::string& dir, std::string_view name) {
  std::string out = dir;
  if (!out.empty() && out.back() != '/') out += '/';
  out += name;
  return out;
}

bool Exists(const std::string& path) {
  struct stat sb {};
  return ::stat(path.c_str(), &sb) == 0;
}

StatusOr<std::string> ReadIndexText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus("open " + path);
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxSafetensorsIndexBytes)
      return InvalidArgument(path + ": larger than the limit of " + std::to_string(kMaxSafetensorsIndexBytes) +
                             " bytes");
  }
  if (in.bad()) return ErrnoStatus("read " + path);
  return text;
}

}  // namespace

StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::Open(const std::string& dir) {
  struct stat sb {};
  if (::stat(dir.c_str(), &sb) != 0) return NotFound("checkpoint directory " + dir + " does not exist");
  if (!S_ISDIR(sb.st_mode)) return InvalidArgument("checkpoint " + dir + " is not a directory");
  SafetensorsCheckpoint ck;
  ck.dir_ = dir;

  const std::string single = Join(dir, kSafetensorsSingleFileName);
  const std::string index_path = Join(dir, kSafetensorsIndexFileName);
  if (Exists(single)) {
    TANDEM_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(single));
    for (const std::string& name : f.names()) {
      ck.names_.push_back(name);
      ck.where_.emplace(name, 0);
    }
    ck.files_.push_back(std::move(f));
    return ck;
  }
  if (!Exists(index_path))
    return NotFound("checkpoint directory " + dir + " holds neither " + std::string(kSafetensorsSingleFileName) +
                    " nor " + std::string(kSafetensorsIndexFileName));

  ck.sharded_ = true;
  TANDEM_ASSIGN_OR_RETURN(const std::string text, ReadIndexText(index_path));
  TANDEM_ASSIGN_OR_RETURN(const SafetensorsIndex idx, ParseSafetensorsIndex(text, index_path));
  // Shard file name -> the first tensor mapped to it (for the error when it is missing).
  std::map<std::string, std::string> shards;
  for (const auto& [name, file] : idx.weight_map) shards.emplace(file, name);
  std::map<std::string, size_t> shard_index;
  for (const auto& [file, first_tensor] : shards) {
    const std::string path = Join(dir, file);
    auto f = SafetensorsFile::Open(path);
    if (!f.ok()) {
      if (f.status().code() == StatusCode::kNotFound)
        return NotFound(index_path + ": maps tensor " + Quoted(first_tensor) + " to shard " + file +
                        ", which does not exist");
      return f.status().WithContext(index_path + ": shard " + file);
    }
    shard_index.emplace(file, ck.files_.size());
    ck.files_.push_back(std::move(f).value());
  }
  for (const auto& [name, file] : idx.weight_map) {
    const size_t i = shard_index.at(file);
    if (!ck.files_[i].Contains(name))
      return InvalidArgument(index_path + ": maps tensor " + Quoted(name) + " to shard " + file +
                             ", which does not hold it");
  }
  for (size_t i = 0; i < ck.files_.size(); ++i) {
    for (const std::string& name : ck.files_[i].names()) {
      const auto it = idx.weight_map.find(name);
      if (it == idx.weight_map.end())
        return InvalidArgument(ck.files_[i].path() + ": holds tensor " + Quoted(name) + ", which " + index_path +
                               " does not list");
      if (shard_index.at(it->second) != i)
        return InvalidArgument(ck.files_[i].path() + ": holds tensor " + Quoted(name) + ", which " + index_path +
                               " maps to shard " + it->second);
      ck.names_.push_back(name);
      ck.where_.emplace(name, i);
    }
  }
  return ck;
}

StatusOr<TensorView> SafetensorsCheckpoint::Get(std::string_view name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) return NotFound(dir_ + ": no tensor " + Quoted(name));
  return files_[it->second].Get(name);
}

}  // namespace tandem::model
