// The spec's Slurm scheduling options as libslurm's job_desc_msg_t
// (job_desc.h): every option that sbatch_args.h maps onto an sbatch argument
// lands in its job_desc field, the same GRES default, and sbatch_args forces
// sbatch. With libslurm, the filled job_desc_msg_t is checked field by field
// (time strings through Slurm's own parser).
#include "backends/slurm/job_desc.h"

#include <gtest/gtest.h>

#ifdef TANDEM_HAVE_LIBSLURM
#include <slurm/slurm.h>
#include <unistd.h>
#endif

namespace tandem::backends::slurm {
namespace {

const char* kAll = R"({
  "kind": "slurm", "partition": "gpu", "account": "rl", "qos": "high", "time": "1-02:00:00",
  "nodes": 2, "gpus_per_node": 8, "constraint": "h200", "reservation": "maint",
  "exclusive": true, "nodelist": "gpu[01-02]", "exclude": "gpu07"
})";

TEST(JobDesc, EveryOptionHasItsField) {
  auto d = JobDescFor(nlohmann::json::parse(kAll), {"job-1", 16, 5, "/runs/job-1/slurm-batch.out"});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->name, "job-1");
  EXPECT_EQ(d->partition, "gpu");
  EXPECT_EQ(d->account, "rl");
  EXPECT_EQ(d->qos, "high");
  EXPECT_EQ(d->time, "1-02:00:00");
  EXPECT_EQ(d->features, "h200");
  EXPECT_EQ(d->reservation, "maint");
  EXPECT_EQ(d->req_nodes, "gpu[01-02]");
  EXPECT_EQ(d->exc_nodes, "gpu07");
  EXPECT_EQ(d->nodes, 2);
  EXPECT_EQ(d->tres_per_node, "gres:gpu:8");
  EXPECT_TRUE(d->exclusive);
  EXPECT_EQ(d->num_tasks, 5);
  EXPECT_EQ(d->std_out, "/runs/job-1/slurm-batch.out");
  EXPECT_NE(d->script.find("exec sleep"), std::string::npos);
}

TEST(JobDesc, GresLikeSbatch) {
  auto typed = JobDescFor(nlohmann::json::parse(R"({"gres": "gpu:h200:8", "gpus_per_node": 2})"), {"j", 4, 1, ""});
  ASSERT_TRUE(typed.ok());
  EXPECT_EQ(typed->tres_per_node, "gres:gpu:h200:8");  // gres wins over gpus_per_node
  auto dflt = JobDescFor(nlohmann::json::object(), {"j", 3, 0, ""});
  ASSERT_TRUE(dflt.ok());
  EXPECT_EQ(dflt->tres_per_node, "gres:gpu:3");  // the job's device count
  EXPECT_EQ(dflt->num_tasks, 1);
  EXPECT_EQ(dflt->std_out, "/dev/null");
  EXPECT_EQ(dflt->nodes, 0);
  auto cpu = JobDescFor(nlohmann::json::object(), {"j", 0, 1, ""});
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->tres_per_node, "");
}

TEST(JobDesc, SbatchArgsNeedSbatch) {
  auto j = nlohmann::json::parse(R"({"partition": "gpu", "sbatch_args": ["--begin=now+60"]})");
  EXPECT_TRUE(NeedsSbatch(j));
  auto d = JobDescFor(j, {"j", 1, 1, ""});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(NeedsSbatch(nlohmann::json::parse(R"({"sbatch_args": []})")));
}

TEST(JobDesc, WrongTypesAreRefused) {
  for (const char* bad : {R"({"time": 30})", R"({"nodes": "2"})", R"({"exclusive": "yes"})", R"({"gres": 8})"}) {
    auto d = JobDescFor(nlohmann::json::parse(bad), {"j", 1, 1, ""});
    EXPECT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

#ifdef TANDEM_HAVE_LIBSLURM
TEST(JobDescMsg, FilledFieldByField) {
  auto d = JobDescFor(nlohmann::json::parse(kAll), {"job-1", 16, 5, "/runs/out"});
  ASSERT_TRUE(d.ok());
  job_desc_msg_t m;
  slurm_init_job_desc_msg(&m);
  ASSERT_TRUE(FillJobDescMsg(*d, &m).ok());
  EXPECT_STREQ(m.name, "job-1");
  EXPECT_STREQ(m.partition, "gpu");
  EXPECT_STREQ(m.account, "rl");
  EXPECT_STREQ(m.qos, "high");
  EXPECT_STREQ(m.reservation, "maint");
  EXPECT_STREQ(m.features, "h200");
  EXPECT_STREQ(m.req_nodes, "gpu[01-02]");
  EXPECT_STREQ(m.exc_nodes, "gpu07");
  EXPECT_STREQ(m.tres_per_node, "gres:gpu:8");
  EXPECT_STREQ(m.std_out, "/runs/out");
  EXPECT_EQ(m.time_limit, 26u * 60u);  // 1-02:00:00
  EXPECT_EQ(m.min_nodes, 2u);
  EXPECT_EQ(m.max_nodes, 2u);
  EXPECT_EQ(m.num_tasks, 5u);
  EXPECT_EQ(m.min_cpus, 5u);
  EXPECT_EQ(m.shared, JOB_SHARED_NONE);
  EXPECT_EQ(m.user_id, ::getuid());
  EXPECT_GT(m.env_size, 0u);
  ASSERT_NE(m.script, nullptr);
  EXPECT_EQ(std::string(m.script).rfind("#!/bin/sh", 0), 0u);
}

TEST(JobDescMsg, TimeFormatsAndUnset) {
  for (auto [t, mins] : std::vector<std::pair<std::string, uint32_t>>{{"30", 30}, {"1:00:00", 60}, {"2-00", 2880}}) {
    auto d = JobDescFor({{"time", t}}, {"j", 0, 1, ""});
    job_desc_msg_t m;
    slurm_init_job_desc_msg(&m);
    ASSERT_TRUE(FillJobDescMsg(*d, &m).ok()) << t;
    EXPECT_EQ(m.time_limit, mins) << t;
  }
  auto bad = JobDescFor({{"time", "soon"}}, {"j", 0, 1, ""});
  job_desc_msg_t m;
  slurm_init_job_desc_msg(&m);
  EXPECT_FALSE(FillJobDescMsg(*bad, &m).ok());
  auto none = JobDescFor(nlohmann::json::object(), {"j", 0, 1, ""});
  slurm_init_job_desc_msg(&m);
  ASSERT_TRUE(FillJobDescMsg(*none, &m).ok());
  EXPECT_EQ(m.time_limit, NO_VAL);  // the partition's default
  EXPECT_EQ(m.min_nodes, NO_VAL);
  EXPECT_EQ(m.partition, nullptr);
  EXPECT_NE(m.shared, JOB_SHARED_NONE);
}
#endif

}  // namespace
}  // namespace tandem::backends::slurm
