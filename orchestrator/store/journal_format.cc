// Encoding and strict/lenient parsing of journal.log and snapshot.json; the
// formats and the recovery rules are in journal_format.h.
#include "orchestrator/store/journal_format.h"

#include <fmt/format.h>

#include <charconv>

#include "orchestrator/store/durable_log.h"

namespace tandem::store {
namespace {

using nlohmann::json;

constexpr size_t kCrcHexLen = 8;

std::string CrcHex(std::string_view text) { return fmt::format("{:08x}", Crc32c(text)); }

bool ParseHex32(std::string_view hex, uint32_t* out) {
  if (hex.size() != kCrcHexLen) return false;
  uint32_t v = 0;
  for (char c : hex) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
    else return false;
  }
  *out = v;
  return true;
}

// Parses JSON without exceptions; nullopt on any syntax error.
std::optional<json> ParseJsonText(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

std::string Preview(std::string_view line) {
  std::string out;
  for (char c : line.substr(0, 40)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (line.size() > 40) out += "...";
  return out;
}

StatusOr<uint64_t> HeaderGeneration(const json& h) {
  auto v = h.find("tandem_journal");
  auto g = h.find("generation");
  if (v == h.end() || g == h.end() || !g->is_number_unsigned() || h.size() != 2) {
    return DataLoss("not a journal header (want {\"tandem_journal\":1,\"generation\":N})");
  }
  if (*v != 1) return DataLoss("unsupported journal version " + v->dump());
  return g->get<uint64_t>();
}

}  // namespace

std::string EncodeLine(std::string_view json_text) {
  std::string line;
  line.reserve(json_text.size() + kCrcHexLen + 2);
  line += CrcHex(json_text);
  line += ' ';
  line += json_text;
  line += '\n';
  return line;
}

StatusOr<json> DecodeLine(std::string_view line) {
  if (line.size() < kCrcHexLen + 2 || line[kCrcHexLen] != ' ') {
    return DataLoss("malformed line \"" + Preview(line) + "\"");
  }
  uint32_t want = 0;
  if (!ParseHex32(line.substr(0, kCrcHexLen), &want)) {
    return DataLoss("malformed checksum \"" + Preview(line) + "\"");
  }
  std::string_view text = line.substr(kCrcHexLen + 1);
  uint32_t got = Crc32c(text);
  if (got != want) return DataLoss(fmt::format("checksum mismatch (stored {:08x}, computed {:08x})", want, got));
  std::optional<json> j = ParseJsonText(text);
  if (!j) return DataLoss("checksum matches but the text is not JSON");
  if (!j->is_object()) return DataLoss("record is not a JSON object");
  return std::move(*j);
}

std::string EncodeJournalHeader(uint64_t generation) {
  return EncodeLine(fmt::format("{{\"tandem_journal\":1,\"generation\":{}}}", generation));
}

StatusOr<ParsedJournal> ParseJournal(std::string_view data, std::string_view file_name) {
  ParsedJournal out;
  if (data.empty()) return out;
  size_t pos = 0;
  uint64_t line_no = 0;
  while (pos < data.size()) {
    ++line_no;
    size_t nl = data.find('\n', pos);
    bool has_newline = nl != std::string_view::npos;
    size_t end = has_newline ? nl : data.size();
    size_t next = has_newline ? nl + 1 : data.size();
    bool is_last = next >= data.size();
    std::string_view line = data.substr(pos, end - pos);
    std::string where = fmt::format("{}:{}", file_name, line_no);

    StatusOr<json> rec = has_newline ? DecodeLine(line) : StatusOr<json>(DataLoss("no newline"));
    if (line_no == 1) {
      // The header is written by rename after an fsync: it is never torn.
      if (!rec.ok()) return rec.status().WithContext(where + ": bad journal header");
      StatusOr<uint64_t> gen = HeaderGeneration(*rec);
      if (!gen.ok()) return gen.status().WithContext(where);
      out.generation = *gen;
    } else if (rec.ok()) {
      out.records.push_back(std::move(rec).value());
    } else if (is_last) {
      out.warning = has_newline
          ? fmt::format("{}: corrupt last record skipped ({})", where, rec.status().message())
          : fmt::format("{}: torn last record skipped (no newline, {} bytes)", where, line.size());
      return out;
    } else {
      return DataLoss(fmt::format("{}: corrupt record ({}) followed by {} more bytes; refusing to "
                                  "recover past it",
                                  where, rec.status().message(), data.size() - next));
    }
    pos = next;
    out.good_bytes = pos;
  }
  return out;
}

std::string EncodeSnapshot(uint64_t generation, std::string_view state_text) {
  return fmt::format("{{\"tandem_snapshot\":1,\"generation\":{},\"crc32c\":\"{}\",\"state\":{}}}\n",
                     generation, CrcHex(state_text), state_text);
}

StatusOr<ParsedSnapshot> ParseSnapshot(std::string_view data) {
  constexpr std::string_view kPrefix = "{\"tandem_snapshot\":1,\"generation\":";
  constexpr std::string_view kCrc = ",\"crc32c\":\"";
  constexpr std::string_view kState = "\",\"state\":";
  constexpr std::string_view kEnd = "}\n";
  auto bad = [](std::string_view why) { return DataLoss(std::string("snapshot.json: ") + std::string(why)); };
  if (data.substr(0, kPrefix.size()) != kPrefix) return bad("not a tandem snapshot");
  std::string_view rest = data.substr(kPrefix.size());
  ParsedSnapshot out;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), out.generation);
  if (ec != std::errc() || p == rest.data()) return bad("bad generation");
  rest.remove_prefix(static_cast<size_t>(p - rest.data()));
  if (rest.substr(0, kCrc.size()) != kCrc) return bad("missing checksum");
  rest.remove_prefix(kCrc.size());
  uint32_t want = 0;
  if (rest.size() < kCrcHexLen || !ParseHex32(rest.substr(0, kCrcHexLen), &want)) return bad("bad checksum");
  rest.remove_prefix(kCrcHexLen);
  if (rest.substr(0, kState.size()) != kState) return bad("missing state");
  rest.remove_prefix(kState.size());
  if (rest.size() < kEnd.size() || rest.substr(rest.size() - kEnd.size()) != kEnd) {
    return bad("truncated (no closing brace and newline)");
  }
  std::string_view state = rest.substr(0, rest.size() - kEnd.size());
  uint32_t got = Crc32c(state);
  if (got != want) return bad(fmt::format("checksum mismatch (stored {:08x}, computed {:08x})", want, got));
  std::optional<json> j = ParseJsonText(state);
  if (!j) return bad("state is not JSON");
  out.state = std::move(*j);
  return out;
}

}  // namespace tandem::store
