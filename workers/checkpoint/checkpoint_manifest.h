// The manifest of one checkpoint (docs/weights.md "Checkpoints", issue #15
// item 2): `manifest.json` at the top of a checkpoint directory, written
// last by the writer, so its presence with every file it lists, at its size
// and digest, is what makes a checkpoint whole.
//
//   {"format": "tandem-checkpoint", "format_version": 1,
//    "step": 15, "weight_version": 15, "digest": "xxh64",
//    "files": [{"path": "model/model.safetensors", "bytes": 123, "xxh64": "0123456789abcdef"}, ...],
//    "metadata": {...}}
//
// `metadata` is the caller's: any JSON object (data cursor, RNG states as
// strings, the trainer's options); the store keeps it verbatim.
//
// Contract of ParseManifest: the text is hostile (it came off a disk that
// may have torn it, or from anyone who could write the run dir). It accepts
// exactly the documents ManifestJson writes and refuses, with an
// InvalidArgument naming the field ("files[3].path ..."): more than
// kMaxManifestBytes; invalid JSON, a NUL byte, nesting deeper than
// kMaxJsonDepth, a key twice in one object; a missing, unknown or mistyped
// field; another format or format_version; step, weight_version or bytes
// that are negative, fractional or above their limits; a digest that is not
// 16 lowercase hex digits; a path that ValidateRelativePath refuses; a path
// twice, or one file's path a directory of another's; more than kMaxFiles
// files. It never throws and never allocates more than a small multiple of
// the text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::checkpoint {

inline constexpr std::string_view kManifestFileName = "manifest.json";
inline constexpr std::string_view kManifestFormat = "tandem-checkpoint";
inline constexpr int64_t kManifestFormatVersion = 1;

// Limits on what a manifest may say (beyond them it is refused, not trusted).
inline constexpr uint64_t kMaxManifestBytes = 64ull << 20;  // 64 MiB of JSON
inline constexpr uint64_t kMaxFiles = 100'000;
inline constexpr uint64_t kMaxFileBytes = 1ull << 50;       // 1 PiB per file
inline constexpr uint64_t kMaxTotalBytes = 1ull << 56;      // the sum, far from overflow
inline constexpr uint64_t kMaxStep = (1ull << 53) - 1;      // exact in a JSON double too
inline constexpr size_t kMaxPathBytes = 1024;
inline constexpr size_t kMaxPathComponentBytes = 255;       // NAME_MAX

// One file of a checkpoint.
struct ManifestFile {
  std::string path;     // relative to the checkpoint directory, '/'-separated
  uint64_t bytes = 0;   // its size
  uint64_t digest = 0;  // XXH64 of its bytes (checkpoint_digest.h)
  bool operator==(const ManifestFile&) const = default;
};

struct Manifest {
  uint64_t step = 0;
  uint64_t weight_version = 0;
  std::vector<ManifestFile> files;  // sorted by path (ManifestJson sorts; ParseManifest keeps the order read)
  nlohmann::json metadata = nlohmann::json::object();
  bool operator==(const Manifest&) const = default;
};

// Parses and validates a manifest's text (contract above).
StatusOr<Manifest> ParseManifest(std::string_view text);

// The manifest's text: indented JSON ending in a newline, files sorted by
// path. InvalidArgument when the manifest would not parse back (a bad path,
// a duplicate, a value out of range, metadata not an object).
StatusOr<std::string> ManifestJson(const Manifest& manifest);

// A path a checkpoint may hold: relative, '/'-separated, 1..kMaxPathBytes
// bytes; each component 1..kMaxPathComponentBytes bytes, neither "." nor "..";
// no NUL, control character or backslash; not manifest.json itself.
// InvalidArgument saying what is wrong, without naming the field (callers add it).
Status ValidateRelativePath(std::string_view path);

}  // namespace tandem::checkpoint
