// PortLeaseRegistry: range clipping, bind verification, ownership, adoption,
// and the machine-wide claims between registries (two daemons on one machine),
// a claim dying with its process.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

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

// A lock directory of this test's own (claims in the machine-wide one may
// be held by daemons of tests running beside this one).
std::filesystem::path PrivateLockDir() {
  // Removed when the test binary exits (an exiting child of a fork test does not).
  static const pid_t owner = ::getpid();
  static struct Dirs {
    std::vector<std::filesystem::path> made;
    ~Dirs() {
      if (::getpid() != owner) return;
      std::error_code ec;
      for (const auto& d : made) std::filesystem::remove_all(d, ec);
    }
  } dirs;
  auto p = std::filesystem::temp_directory_path() /
           ("tandem-port-locks-" + std::to_string(owner) + "-" + std::to_string(dirs.made.size()));
  std::filesystem::remove_all(p);
  dirs.made.push_back(p);
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
  o.lock_dir = PrivateLockDir();
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
  o.lock_dir = PrivateLockDir();
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
  o.lock_dir = PrivateLockDir();
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

// Two daemons on one machine: two registries over one lock directory never
// lease one port, and a released port is the other's to take.
TEST(PortLease, TwoRegistriesOnOneLockDirNeverLeaseOnePort) {
  PortLeaseOptions o;
  o.range = {21300, 21307};
  o.verify_by_binding = false;
  o.lock_dir = PrivateLockDir();
  auto a = PortLeaseRegistry::Create(o);
  auto b = PortLeaseRegistry::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  auto mine = a->Lease("a.task", 5);
  ASSERT_TRUE(mine.ok());
  auto too_many = b->Lease("b.task", 4);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), StatusCode::kResourceExhausted);
  auto theirs = b->Lease("b.task", 3);
  ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();
  std::set<int> all(mine->begin(), mine->end());
  for (int p : *theirs) EXPECT_TRUE(all.insert(p).second) << "port " << p << " leased by both";
  EXPECT_EQ(all.size(), 8u);
  a->Release("a.task");
  auto after = b->Lease("b.later", 5);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(std::set<int>(after->begin(), after->end()), std::set<int>(mine->begin(), mine->end()));
  // A port adopted after a restart is claimed again.
  auto c = PortLeaseRegistry::Create(o);
  ASSERT_TRUE(c.ok());
  b->Release("b.later");
  ASSERT_TRUE(c->Adopt("old.task", {(*mine)[0]}).ok());
  auto rest = b->Lease("b.rest", 4);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(std::count(rest->begin(), rest->end(), (*mine)[0]), 0) << "an adopted port was leased again";
}

// A daemon killed with -9 leaves no claim behind: its ports are free again
// as soon as its process is gone.
TEST(PortLease, AClaimDiesWithItsProcess) {
  PortLeaseOptions o;
  o.range = {21400, 21403};
  o.verify_by_binding = false;
  o.lock_dir = PrivateLockDir();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto reg = PortLeaseRegistry::Create(o);
    const bool ok = reg.ok() && reg->Lease("doomed", 4).ok();
    const char c = ok ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  EXPECT_EQ(c, 'y');
  auto reg = PortLeaseRegistry::Create(o);
  ASSERT_TRUE(reg.ok());
  EXPECT_FALSE(reg->Lease("t", 1).ok()) << "every port is claimed by the live child";
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  auto ports = reg->Lease("t", 4);
  ASSERT_TRUE(ports.ok()) << ports.status().ToString();
}

// A lock directory that cannot be used turns the claims off; leasing works as
// before.
TEST(PortLease, WithoutAUsableLockDirItLeasesWithoutClaims) {
  const auto file = RangeFile("not a directory");
  PortLeaseOptions o;
  o.range = {21500, 21501};
  o.verify_by_binding = false;
  o.lock_dir = file;
  auto a = PortLeaseRegistry::Create(o);
  auto b = PortLeaseRegistry::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->Lease("a", 2).ok());
  EXPECT_TRUE(b->Lease("b", 2).ok()) << "no claims: each registry sees only its own leases";
  o.lock_dir = "";
  EXPECT_TRUE(PortLeaseRegistry::Create(o).ok());
}

}  // namespace
}  // namespace tandem::backends
