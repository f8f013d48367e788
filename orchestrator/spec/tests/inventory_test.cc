// Tests of CheckFitsInventory (job_spec.h): a job's logical devices against
// the physical GPUs a daemon may hand out.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "orchestrator/spec/job_spec.h"

namespace tandem::spec {
namespace {

using ::testing::HasSubstr;

struct InventoryCase {
  const char* what;
  std::vector<int> devices;
  std::vector<int> gpus;
  StatusCode code;
  const char* message;  // substring; "" when ok
};
void PrintTo(const InventoryCase& c, std::ostream* os) { *os << c.what; }


class Inventories : public ::testing::TestWithParam<InventoryCase> {};

TEST_P(Inventories, FitOrSayWhyNot) {
  const InventoryCase& c = GetParam();
  JobSpec spec;
  spec.name = "job";
  spec.devices = c.devices;
  Status st = CheckFitsInventory(spec, Inventory{c.gpus});
  EXPECT_EQ(st.code(), c.code) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr(c.message));
}

INSTANTIATE_TEST_SUITE_P(
    Table, Inventories,
    ::testing::Values(
        InventoryCase{"cpu-only job, no gpus", {}, {}, StatusCode::kOk, ""},
        InventoryCase{"exact fit", {0, 1, 2, 3}, {4, 5, 6, 7}, StatusCode::kOk, ""},
        InventoryCase{"smaller", {0, 1}, {4, 5, 6, 7}, StatusCode::kOk, ""},
        InventoryCase{"explicit ids inside", {3, 1}, {4, 5, 6, 7}, StatusCode::kOk, ""},
        InventoryCase{"too many", {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3}, StatusCode::kResourceExhausted,
                      R"(job "job" needs 6 devices, the inventory has 4 GPUs (physical ids 0,1,2,3))"},
        InventoryCase{"none declared", {0}, {}, StatusCode::kResourceExhausted,
                      "the inventory has no GPUs (declare some with tandemd --gpus)"},
        InventoryCase{"explicit ids outside", {1, 7, 5}, {0, 1, 2, 3}, StatusCode::kInvalidArgument,
                      R"(job "job" asks for logical devices 5,7, outside the inventory's logical ids 0..3)"}));

}  // namespace
}  // namespace tandem::spec
