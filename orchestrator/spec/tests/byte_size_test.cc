// Tests of byte sizes in a job spec (byte_size.h): the units a user writes
// in handoff.gpu_memory and what they come to, exactly.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "orchestrator/spec/byte_size.h"

namespace tandem::spec {
namespace {

constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024, kTiB = kGiB * 1024;

struct SizeCase {
  const char* text;
  uint64_t bytes;
};

TEST(ByteSize, EveryUnitComesToItsBytes) {
  const SizeCase cases[] = {
      {"1000000B", 1000000},   {"1B", 1},
      {"1KiB", kKiB},          {"512MiB", 512 * kMiB},
      {"80GiB", 80 * kGiB},    {"2TiB", 2 * kTiB},
      {"1.5TiB", 3 * kTiB / 2}, {"0.5GiB", kGiB / 2},
      {"1KB", 1000},           {"2.5MB", 2500000},
      {"141GB", 141000000000}, {"1TB", 1000000000000},
      {"0.1KB", 100},          {"0.001KB", 1},
      {"007MiB", 7 * kMiB},    {"1.0000001KiB", 1024},  // fractions round down to whole bytes
      {"8192TiB", uint64_t{1} << 53},                    // the largest allowed
  };
  for (const SizeCase& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_TRUE(IsByteSizeText(c.text));
    StatusOr<uint64_t> bytes = ParseByteSize(c.text);
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    EXPECT_EQ(*bytes, c.bytes);
  }
}

TEST(ByteSize, TextOutsideThePatternIsRefusedWithTheUnits) {
  for (const char* text : {"", "80", "GiB", "80G", "80gib", "80 GiB", " 80GiB", "80GiB ", "1.GiB", ".5GiB",
                           "1e3B", "-1B", "+1B", "1,5GiB", "1KiBB", "1iB", "1PiB", "0x10B", "１GiB"}) {
    SCOPED_TRACE(text);
    EXPECT_FALSE(IsByteSizeText(text));
    StatusOr<uint64_t> bytes = ParseByteSize(text);
    ASSERT_FALSE(bytes.ok());
    EXPECT_EQ(bytes.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bytes.status().message().find("units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB"), std::string::npos)
        << bytes.status().message();
  }
}

TEST(ByteSize, ZeroAndTooBigMatchThePatternButAreRefused) {
  for (const char* text : {"0B", "0GiB", "0.5B", "0.0000000001GB"}) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(IsByteSizeText(text)) << "the schema accepts it; the parser refuses it";
    StatusOr<uint64_t> bytes = ParseByteSize(text);
    ASSERT_FALSE(bytes.ok());
    EXPECT_EQ(bytes.status().message(), std::string("expected at least 1 byte, got \"") + text + "\"");
  }
  for (const char* text : {"8192.0000001TiB", "10000TiB", "99999999999999999999999999B"}) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(IsByteSizeText(text));
    StatusOr<uint64_t> bytes = ParseByteSize(text);
    ASSERT_FALSE(bytes.ok());
    EXPECT_EQ(bytes.status().message().rfind("expected at most 9007199254740992 bytes (8 PiB), got \"", 0), 0u)
        << bytes.status().message();
  }
}

}  // namespace
}  // namespace tandem::spec
