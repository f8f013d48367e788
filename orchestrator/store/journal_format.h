// The on-disk formats of the durable job store (durable_log.h), as pure
// functions over bytes so that recovery can be tested and fuzzed without I/O.
//
// journal.log — one record per line, "<crc32c of JSON, 8 lowercase hex> <compact JSON>\n".
//   Line 1 is the header {"tandem_journal":1,"generation":G}; records follow.
//   The generation ties the journal to the snapshot it continues (see the
//   compaction protocol in durable_log.cc).
// snapshot.json — one JSON document (readable with jq):
//   {"tandem_snapshot":1,"generation":G,"crc32c":"<8 hex>","state":<compact JSON>}\n
//   the checksum taken over the exact text of "state".
//
// Recovery rules (ParseJournal): the header must be intact (it is written by
// rename, so it cannot be torn); a last line without its newline, or a last
// line that fails its checksum or is not a JSON object, is a torn write and is
// skipped with a warning; any bad line followed by more data is kDataLoss.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::store {

inline constexpr std::string_view kJournalFileName = "journal.log";
inline constexpr std::string_view kSnapshotFileName = "snapshot.json";
inline constexpr std::string_view kTmpSuffix = ".tmp";

// "<crc> <json_text>\n" for already-serialized compact JSON.
std::string EncodeLine(std::string_view json_text);

// Decodes one line given without its '\n'. Errors (kDataLoss) say what is wrong.
StatusOr<nlohmann::json> DecodeLine(std::string_view line);

// The encoded header line of a journal of `generation`.
std::string EncodeJournalHeader(uint64_t generation);

struct ParsedJournal {
  // nullopt when the file is empty (no header at all).
  std::optional<uint64_t> generation;
  std::vector<nlohmann::json> records;
  // Bytes of the valid prefix (header and good records). New records go here.
  uint64_t good_bytes = 0;
  // Set when a torn or corrupt last line was skipped, e.g.
  // "journal.log:118: torn last record skipped (no newline, 37 bytes)".
  std::optional<std::string> warning;
};

// Parses a whole journal file. `file_name` only names it in messages.
StatusOr<ParsedJournal> ParseJournal(std::string_view data, std::string_view file_name);

// The whole snapshot.json for `state_text` (compact JSON).
std::string EncodeSnapshot(uint64_t generation, std::string_view state_text);

struct ParsedSnapshot {
  uint64_t generation = 0;
  nlohmann::json state;
};

// Parses a whole snapshot.json. Anything but an intact file is kDataLoss.
StatusOr<ParsedSnapshot> ParseSnapshot(std::string_view data);

}  // namespace tandem::store
