// PortLeaseRegistry: range clipping, bind verification, ownership, adoption.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "backends/port_lease.h"

namespace tandem::backends {
namespace {

std::filesystem::path RangeFile(const std::string& text) {
  static int n = 0;
  auto p = std::filesystem::temp_directory_path() /
           ("tandem-port-range-" + std::to_string(::getpid()) + "-" + std::to_string(++n));
  std::ofstream(p) << text;
  return p;
}

// Holds a listening socket on `port` (0.0.0.0) until destroyed.
struct Occupier {
  int fd = -1;
  explicit Occupier(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 1) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~Occupier() {
    if (fd >= 0) ::close(fd);
  }
};

TEST(PortLease, CandidatesAvoidTheEphemeralRange) {
  PortLeaseOptions o;
  o.range = {30000, 40000};
  o.ephemeral_range_file = RangeFile("32768\t60999\n");
  auto reg = PortLeaseRegistry::Create(o);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  ASSERT_EQ(reg->candidate_ranges().size(), 1u);
  EXPECT_EQ(reg->candidate_ranges()[0].first, 30000);
  EXPECT_EQ(reg->candidate_ranges()[0].last, 32767);

  o.range = {20000, 30000};
  o.ephemeral_range_file = RangeFile("25000 26000\n");
  auto split = PortLeaseRegistry::Create(o);
  ASSERT_TRUE(split.ok());
  ASSERT_EQ(split->candidate_ranges().size(), 2u);
  EXPECT_EQ(split->candidate_ranges()[0].last, 24999);
  EXPECT_EQ(split->candidate_ranges()[1].first, 26001);
}

TEST(PortLease, RangeInsideTheEphemeralRangeIsRefused) {
  PortLeaseOptions o;
  o.range = {40000, 41000};
  o.ephemeral_range_file = RangeFile("32768 60999");
  auto reg = PortLeaseRegistry::Create(o);
  ASSERT_FALSE(reg.ok());
  EXPECT_NE(reg.status().message().find("ephemeral"), std::string::npos);
  o.range = {5, 1};
  EXPECT_FALSE(PortLeaseRegistry::Create(o).ok());
}

TEST(PortLease, DefaultRangeIsOutsideTheKernelsEphemeralRange) {
  auto reg = PortLeaseRegistry::Create();
  ASSERT_TRUE(reg.ok());
  auto eph = ReadEphemeralRange("/proc/sys/net/ipv4/ip_local_port_range");
  ASSERT_TRUE(eph.ok());
  auto ports = reg->Lease("t", 50);
  ASSERT_TRUE(ports.ok());
  for (int p : *ports) EXPECT_FALSE(eph->contains(p)) << p;
}

TEST(PortLease, NeverLeasesOnePortTwiceAndReleaseFreesIt) {
  PortLeaseOptions o;
  o.range = {21000, 21009};
  auto reg = PortLeaseRegistry::Create(o);
  ASSERT_TRUE(reg.ok());
  std::set<int> all;
  for (int i = 0; i < 5; ++i) {
    auto ports = reg->Lease("task" + std::to_string(i), 2);
    ASSERT_TRUE(ports.ok()) << ports.status().ToString();
    for (int p : *ports) EXPECT_TRUE(all.insert(p).second) << p;
  }
  EXPECT_EQ(reg->leased_count(), 10u);
  auto none = reg->Lease("late", 1);
  EXPECT_FALSE(none.ok());
  EXPECT_EQ(reg->leased_count(), 10u) << "a failed lease holds nothing";
  std::vector<int> freed = reg->PortsOf("task2");
  reg->Release("task2");
  reg->Release("unknown");
  auto again = reg->Lease("late", 2);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(std::set<int>(again->begin(), again->end()), std::set<int>(freed.begin(), freed.end()));
}

TEST(PortLease, APortInUseIsSkipped) {
  PortLeaseOptions o;
  o.range = {21100, 21102};
  Occupier busy(21100);
  ASSERT_GE(busy.fd, 0) << "could not occupy 21100 for the test";
  EXPECT_FALSE(PortIsFree(21100));
  auto reg = PortLeaseRegistry::Create(o);
  ASSERT_TRUE(reg.ok());
  auto ports = reg->Lease("t", 2);
  ASSERT_TRUE(ports.ok());
  EXPECT_EQ(std::set<int>(ports->begin(), ports->end()), (std::set<int>{21101, 21102}));
  EXPECT_FALSE(reg->Lease("u", 1).ok());
}

TEST(PortLease, AdoptRestoresLeasesAfterARestart) {
  PortLeaseOptions o;
  o.range = {21200, 21203};
  auto reg = PortLeaseRegistry::Create(o);
  ASSERT_TRUE(reg.ok());
  ASSERT_TRUE(reg->Adopt("old.task", {21200, 21201}).ok());
  ASSERT_TRUE(reg->Adopt("old.task", {21201}).ok()) << "idempotent";
  EXPECT_EQ(reg->Adopt("other", {21201}).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(reg->Adopt("other", {70000}).code(), StatusCode::kInvalidArgument);
  auto ports = reg->Lease("new.task", 2);
  ASSERT_TRUE(ports.ok());
  EXPECT_EQ(std::set<int>(ports->begin(), ports->end()), (std::set<int>{21202, 21203}));
  reg->Release("old.task");
  EXPECT_EQ(reg->leased_count(), 2u);
}

}  // namespace
}  // namespace tandem::backends
