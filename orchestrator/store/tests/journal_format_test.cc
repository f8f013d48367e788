// The on-disk formats of the job store (journal_format.h) and CRC-32C: known
// check values, line round trips, and the lenient-tail / strict-middle rules.
#include "orchestrator/store/journal_format.h"

#include <gtest/gtest.h>

#include <string>

#include "orchestrator/store/durable_log.h"

namespace tandem::store {
namespace {

using nlohmann::json;

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  // RFC 3720 (iSCSI) B.4 test vectors.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string inc;
  for (int i = 0; i < 32; ++i) inc += static_cast<char>(i);
  EXPECT_EQ(Crc32c(inc), 0x46DD794Eu);
}

TEST(Crc32c, SlicedPathMatchesBytewiseAtEveryLength) {
  // Bitwise reference, the definition of the polynomial.
  auto ref = [](std::string_view d) {
    uint32_t c = 0xFFFFFFFFu;
    for (unsigned char b : d) {
      c ^= b;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
  };
  std::string s;
  for (int n = 0; n < 100; ++n) {
    EXPECT_EQ(Crc32c(s), ref(s)) << "length " << n;
    s += static_cast<char>(n * 37 + 11);
  }
}

std::string Journal(uint64_t gen, const std::vector<json>& records) {
  std::string out = EncodeJournalHeader(gen);
  for (const json& r : records) out += EncodeLine(r.dump());
  return out;
}

TEST(JournalFormat, LineRoundTrip) {
  json rec = {{"job", "démo"}, {"n", 3}, {"nested", {{"a", {1, 2.5, nullptr}}}}};
  std::string line = EncodeLine(rec.dump());
  ASSERT_EQ(line.back(), '\n');
  ASSERT_EQ(line[8], ' ');
  StatusOr<json> back = DecodeLine(std::string_view(line).substr(0, line.size() - 1));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, rec);
}

TEST(JournalFormat, DecodeRejectsDamage) {
  std::string line = EncodeLine(R"({"a":1})");
  line.pop_back();
  std::string flipped = line;
  flipped[12] = '2';
  EXPECT_EQ(DecodeLine(flipped).status().code(), StatusCode::kDataLoss);
  EXPECT_NE(DecodeLine(flipped).status().message().find("checksum mismatch"), std::string::npos);
  EXPECT_FALSE(DecodeLine("").ok());
  EXPECT_FALSE(DecodeLine("zzzzzzzz {}").ok());
  EXPECT_FALSE(DecodeLine(EncodeLine("[1,2]").substr(0, 14)).ok());  // valid crc, not an object
}

TEST(JournalFormat, ParsesHeaderAndRecords) {
  std::string data = Journal(7, {{{"i", 0}}, {{"i", 1}}});
  StatusOr<ParsedJournal> pj = ParseJournal(data, "journal.log");
  ASSERT_TRUE(pj.ok()) << pj.status().ToString();
  EXPECT_EQ(pj->generation, 7u);
  ASSERT_EQ(pj->records.size(), 2u);
  EXPECT_EQ(pj->records[1]["i"], 1);
  EXPECT_EQ(pj->good_bytes, data.size());
  EXPECT_FALSE(pj->warning);
}

TEST(JournalFormat, EmptyFileHasNoGeneration) {
  StatusOr<ParsedJournal> pj = ParseJournal("", "journal.log");
  ASSERT_TRUE(pj.ok());
  EXPECT_FALSE(pj->generation);
}

TEST(JournalFormat, TornTailWithoutNewlineIsSkipped) {
  std::string good = Journal(0, {{{"i", 0}}, {{"i", 1}}});
  std::string data = good + EncodeLine(R"({"i":2})").substr(0, 10);
  StatusOr<ParsedJournal> pj = ParseJournal(data, "journal.log");
  ASSERT_TRUE(pj.ok()) << pj.status().ToString();
  EXPECT_EQ(pj->records.size(), 2u);
  EXPECT_EQ(pj->good_bytes, good.size());
  ASSERT_TRUE(pj->warning);
  EXPECT_EQ(*pj->warning, "journal.log:4: torn last record skipped (no newline, 10 bytes)");
}

TEST(JournalFormat, CorruptLastLineIsSkipped) {
  std::string good = Journal(0, {{{"i", 0}}});
  std::string data = good + "0badc0de {\"i\":1}\n";
  StatusOr<ParsedJournal> pj = ParseJournal(data, "journal.log");
  ASSERT_TRUE(pj.ok());
  EXPECT_EQ(pj->records.size(), 1u);
  EXPECT_EQ(pj->good_bytes, good.size());
  ASSERT_TRUE(pj->warning);
  EXPECT_NE(pj->warning->find("journal.log:3: corrupt last record skipped"), std::string::npos);
}

TEST(JournalFormat, CorruptMiddleLineIsDataLoss) {
  std::string data = Journal(0, {{{"i", 0}}});
  data += "garbage\n";
  data += EncodeLine(R"({"i":2})");
  StatusOr<ParsedJournal> pj = ParseJournal(data, "journal.log");
  ASSERT_FALSE(pj.ok());
  EXPECT_EQ(pj.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(pj.status().message().find("journal.log:3: corrupt record"), std::string::npos)
      << pj.status().message();
}

TEST(JournalFormat, TwoBadTrailingLinesAreDataLoss) {
  std::string data = Journal(0, {{{"i", 0}}}) + "bad\nworse";
  EXPECT_EQ(ParseJournal(data, "journal.log").status().code(), StatusCode::kDataLoss);
}

TEST(JournalFormat, BadHeaderIsDataLoss) {
  std::string data = EncodeLine(R"({"i":0})") + EncodeLine(R"({"i":1})");
  StatusOr<ParsedJournal> pj = ParseJournal(data, "journal.log");
  ASSERT_FALSE(pj.ok());
  EXPECT_NE(pj.status().message().find("journal.log:1"), std::string::npos) << pj.status().message();
}

TEST(SnapshotFormat, RoundTripAndIsPlainJson) {
  json state = {{"jobs", {{{"id", "j1"}, {"state", "running"}}}}};
  std::string file = EncodeSnapshot(4, state.dump());
  json whole = json::parse(file);  // readable by any JSON tool
  EXPECT_EQ(whole["state"], state);
  EXPECT_EQ(whole["generation"], 4);
  StatusOr<ParsedSnapshot> back = ParseSnapshot(file);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->generation, 4u);
  EXPECT_EQ(back->state, state);
}

TEST(SnapshotFormat, DamageIsDataLoss) {
  std::string file = EncodeSnapshot(1, R"({"a":"b"})");
  std::string flipped = file;
  flipped[flipped.size() - 4] = 'c';
  EXPECT_EQ(ParseSnapshot(flipped).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ParseSnapshot(file.substr(0, file.size() - 1)).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ParseSnapshot("{}").status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tandem::store
