// BuildTaskEnvironment as a table: each row is an input and the variables the
// task must (or must not) see.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "backends/task_env.h"

namespace tandem::backends {
namespace {

std::map<std::string, std::string> AsMap(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const auto& kv : env) {
    auto eq = kv.find('=');
    EXPECT_NE(eq, std::string::npos) << kv;
    EXPECT_TRUE(m.emplace(kv.substr(0, eq), kv.substr(eq + 1)).second) << "duplicate " << kv;
  }
  return m;
}

struct Row {
  std::string name;
  TaskEnvInput in;
  std::map<std::string, std::string> want;   // exact values
  std::vector<std::string> absent;           // keys that must not appear
};

TaskEnvInput Base(EnvMap daemon_env) {
  TaskEnvInput in;
  in.base_source = std::move(daemon_env);
  in.job_id = "j1";
  in.task_id = "j1.actor.0";
  in.role = "actor";
  in.run_dir = "/runs/j1";
  return in;
}

std::vector<Row> Table() {
  std::vector<Row> rows;
  {
    Row r{"clean base keeps only the allow-list", Base({{"PATH", "/opt/bin"}, {"HOME", "/home/u"},
                                                         {"SECRET_TOKEN", "x"}, {"LANG", "C.UTF-8"},
                                                         {"LD_PRELOAD", "evil.so"}})};
    r.want = {{"PATH", "/opt/bin"}, {"HOME", "/home/u"}, {"LANG", "C.UTF-8"}};
    r.absent = {"SECRET_TOKEN", "LD_PRELOAD", "TANDEM_CONTROL"};
    rows.push_back(r);
  }
  {
    Row r{"PATH defaults when the daemon has none", Base({})};
    r.want = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}};
    r.absent = {"HOME"};
    rows.push_back(r);
  }
  {
    Row r{"later layers override earlier ones", Base({{"PATH", "/d"}, {"TZ", "UTC"}})};
    r.in.job_env = {{"A", "job"}, {"B", "job"}, {"C", "job"}, {"D", "job"}, {"TZ", "Europe/Paris"}};
    r.in.role_env = {{"B", "role"}, {"C", "role"}, {"D", "role"}};
    r.in.replica_env = {{"C", "replica"}, {"D", "replica"}};
    r.in.task_overrides = {{"D", "task"}, {"PATH", "/task/bin"}};
    r.want = {{"A", "job"}, {"B", "role"}, {"C", "replica"}, {"D", "task"},
              {"TZ", "Europe/Paris"}, {"PATH", "/task/bin"}};
    rows.push_back(r);
  }
  {
    Row r{"tandem's variables come last", Base({})};
    r.in.job_env = {{"TANDEM_RANK", "99"}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3"}};
    r.in.role_env = {{"TANDEM_PORTS", "1"}};
    r.in.rank = 1;
    r.in.world_size = 2;
    r.in.ports = {20001, 20002};
    r.in.logical_devices = {2, 3};
    r.in.physical_devices = {6, 7};
    r.in.control = "unix:/run/tandem/ctl.sock";
    r.want = {{"TANDEM_JOB_ID", "j1"}, {"TANDEM_TASK_ID", "j1.actor.0"}, {"TANDEM_ROLE", "actor"},
              {"TANDEM_RANK", "1"}, {"TANDEM_WORLD_SIZE", "2"}, {"TANDEM_PORTS", "20001,20002"},
              {"TANDEM_RUN_DIR", "/runs/j1"}, {"TANDEM_DEVICES", "2,3"},
              {"CUDA_VISIBLE_DEVICES", "6,7"}, {"TANDEM_CONTROL", "unix:/run/tandem/ctl.sock"}};
    rows.push_back(r);
  }
  {
    Row r{"a CPU-only task sees no GPU", Base({{"CUDA_VISIBLE_DEVICES", "0"}})};
    r.in.job_env = {{"CUDA_VISIBLE_DEVICES", "0"}};
    r.want = {{"CUDA_VISIBLE_DEVICES", ""}, {"TANDEM_DEVICES", ""}, {"TANDEM_PORTS", ""}};
    rows.push_back(r);
  }
  {
    Row r{"keys that cannot round-trip are dropped", Base({})};
    r.in.job_env = {{"", "x"}, {"A=B", "y"}, {"OK", "a=b=c"}};
    r.want = {{"OK", "a=b=c"}};
    r.absent = {"", "A"};
    rows.push_back(r);
  }
  return rows;
}

TEST(BuildTaskEnvironment, Table) {
  for (const Row& row : Table()) {
    SCOPED_TRACE(row.name);
    auto env = BuildTaskEnvironment(row.in);
    EXPECT_TRUE(std::is_sorted(env.begin(), env.end()));
    auto m = AsMap(env);
    for (const auto& [k, v] : row.want) {
      ASSERT_TRUE(m.count(k)) << k;
      EXPECT_EQ(m[k], v) << k;
    }
    for (const auto& k : row.absent) EXPECT_FALSE(m.count(k)) << k;
  }
}

TEST(BuildTaskEnvironment, SortedByKeyNotByString) {
  // "A=..." vs "A_B=...": sorting by key puts A before A_B even though '=' > '_'
  // would not matter here; check the keys themselves are ascending.
  TaskEnvInput in = Base({});
  in.job_env = {{"A_B", "1"}, {"A", "2"}, {"Z", "3"}};
  auto env = BuildTaskEnvironment(in);
  std::string prev;
  for (const auto& kv : env) {
    std::string key = kv.substr(0, kv.find('='));
    EXPECT_LT(prev, key);
    prev = key;
  }
}

TEST(BuildTaskEnvironment, DefaultBaseIsTheProcessEnvironment) {
  ::setenv("TANDEM_ENV_TEST_SECRET", "no", 1);
  ::setenv("TZ", "Asia/Tokyo", 1);
  TaskEnvInput in;
  auto m = AsMap(BuildTaskEnvironment(in));
  EXPECT_EQ(m["TZ"], "Asia/Tokyo");
  EXPECT_FALSE(m.count("TANDEM_ENV_TEST_SECRET"));
  ::unsetenv("TANDEM_ENV_TEST_SECRET");
  ::unsetenv("TZ");
}

TEST(EnvValue, ExactKeyOnly) {
  const std::vector<std::string> env = {"CUDA_VISIBLE_DEVICES_X=9", "CUDA_VISIBLE_DEVICES=2,3", "EMPTY="};
  EXPECT_EQ(EnvValue(env, "CUDA_VISIBLE_DEVICES"), "2,3");
  EXPECT_EQ(EnvValue(env, "CUDA_VISIBLE"), "");
  EXPECT_EQ(EnvValue(env, "EMPTY"), "");
  EXPECT_EQ(EnvValue(env, "MISSING"), "");
}

}  // namespace
}  // namespace tandem::backends
