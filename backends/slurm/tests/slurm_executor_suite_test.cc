// The shared executor suite (backends/tests/executor_suite.h) against the
// Slurm backend: every task is a job step of one allocation on the real test
// cluster. All the suite's contracts apply to steps.
#include "backends/tests/executor_suite.h"
#include "backends/slurm/tests/slurm_test_cluster.h"

namespace tandem::backends::testing {
INSTANTIATE_TEST_SUITE_P(Slurm, ExecutorSuite, ::testing::Values(SlurmHarness()), ExecutorHarnessName);

}  // namespace tandem::backends::testing
