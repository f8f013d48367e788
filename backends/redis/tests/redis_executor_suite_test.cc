// The shared executor suite (backends/tests/executor_suite.h) run against the
// redis backend: a RedisExecutor in this process, two real `tandem-agent`
// processes and the test redis-server (scripts/services/redis.sh). Without
// Redis the suite is not instantiated, unless TANDEM_SERVICES_REQUIRED=1,
// where it runs and fails.
#include "backends/redis/tests/redis_test_util.h"
#include "backends/tests/executor_suite.h"

namespace tandem::backends::testing {
namespace {

std::vector<ExecutorHarness> Harnesses() {
  if (!RedisReachable() && !ServicesRequired()) return {};
  return {RedisHarness()};
}

}  // namespace

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ExecutorSuite);
INSTANTIATE_TEST_SUITE_P(Redis, ExecutorSuite, ::testing::ValuesIn(Harnesses()), ExecutorHarnessName);

}  // namespace tandem::backends::testing
