// The redis agent's half of control tokens (backends/redis/redis_protocol.h
// AddControlToken; docs/control-protocol.md "Authentication"): the agent
// derives a launch's token under the cluster key from the variables the
// daemon's start command carries, so the token itself never crosses Redis;
// a token smuggled into the command is never passed on.
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/redis/redis_protocol.h"
#include "common/control/control_token.h"

namespace tandem::control {
namespace {

std::string Get(const backends::LaunchRequest& r, const std::string& key) {
  std::string out = "<unset>";
  for (const auto& kv : r.env)
    if (kv.rfind(key + "=", 0) == 0) out = kv.substr(key.size() + 1);
  return out;
}

backends::LaunchRequest Start(std::vector<std::string> extra) {
  backends::LaunchRequest r;
  r.job_id = "j7";
  r.task_id = "j7.rollout.0";
  r.env = {"PATH=/usr/bin", "TANDEM_CONTROL=tcp:10.0.0.1:4000", "TANDEM_JOB_ID=j7", "TANDEM_TASK_ID=j7.rollout.0"};
  r.env.insert(r.env.end(), extra.begin(), extra.end());
  std::sort(r.env.begin(), r.env.end());
  return r;
}

TEST(AgentControlToken, DerivedUnderTheClusterKeyForTheLaunch) {
  const std::string key = "cluster-key-0123456789abcdef";
  auto r = Start({"TANDEM_CONTROL_LAUNCH=3"});
  backends::redis::AddControlToken(r, key);
  EXPECT_EQ(Get(r, "TANDEM_CONTROL_TOKEN"), ControlToken(key, "j7", "j7.rollout.0", 3));
  EXPECT_TRUE(std::is_sorted(r.env.begin(), r.env.end()));
  // What the daemon verifies for a redis job: the same token.
  ControlKeys keys("daemon-secret-0123456789abcdef");
  keys.SetBackendKey("redis", key);
  EXPECT_TRUE(keys.Verify("redis", "j7", "j7.rollout.0", 3, Get(r, "TANDEM_CONTROL_TOKEN")));
  EXPECT_FALSE(keys.Verify("redis", "j7", "j7.rollout.0", 2, Get(r, "TANDEM_CONTROL_TOKEN")));
}

TEST(AgentControlToken, SmuggledTokensAreDropped) {
  auto r = Start({"TANDEM_CONTROL_LAUNCH=1", "TANDEM_CONTROL_TOKEN=forged"});
  backends::redis::AddControlToken(r, "k-0123456789abcdef");
  EXPECT_EQ(Get(r, "TANDEM_CONTROL_TOKEN"), ControlToken("k-0123456789abcdef", "j7", "j7.rollout.0", 1));
  // Without a launch number there is no token, and the smuggled one is gone.
  auto plain = Start({"TANDEM_CONTROL_TOKEN=forged"});
  backends::redis::AddControlToken(plain, "k-0123456789abcdef");
  EXPECT_EQ(Get(plain, "TANDEM_CONTROL_TOKEN"), "<unset>");
  auto bad = Start({"TANDEM_CONTROL_LAUNCH=x"});
  backends::redis::AddControlToken(bad, "k-0123456789abcdef");
  EXPECT_EQ(Get(bad, "TANDEM_CONTROL_TOKEN"), "<unset>");
}

}  // namespace
}  // namespace tandem::control
