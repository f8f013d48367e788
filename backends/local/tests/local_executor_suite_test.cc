// The shared executor suite (backends/tests/executor_suite.h) run against the
// local backend; the harness is the only local part.
#include "backends/local/local_executor.h"
#include "backends/local/tests/local_test_util.h"
#include "backends/tests/executor_suite.h"

namespace tandem::backends::testing {

INSTANTIATE_TEST_SUITE_P(Local, ExecutorSuite, ::testing::Values(LocalHarness()),
                         ExecutorHarnessName);

}  // namespace tandem::backends::testing
