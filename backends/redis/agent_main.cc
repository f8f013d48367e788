// `tandem-agent`: the node agent's command line (agent.h; docs/redis.md
// "Running a cluster"). Every flag has a TANDEM_* variable; the Redis
// password is read from a file, never taken on the command line.
#include <signal.h>

#include <iostream>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "backends/redis/agent.h"
#include "common/log.h"

int main(int argc, char** argv) {
  using namespace tandem;
  namespace redis = tandem::backends::redis;
  CLI::App app{"tandem-agent: runs the tasks a tandem daemon assigns to this node through Redis"};
  std::string url, password_file, name, address, gpus, prefix = "tandem", exec_shim, level = "info";
  std::string key_file, state_dir = redis::DefaultAgentStateDir(), run_root;
  double lease_s = 3, max_age_s = 60;
  app.add_option("--redis", url, "redis://[user@]host:port")->envname("TANDEM_REDIS_URL")->required();
  app.add_option("--redis-password-file", password_file, "file holding the Redis password")
      ->envname("TANDEM_REDIS_PASSWORD_FILE");
  app.add_option("--cluster-key-file", key_file, "file holding the cluster key (chmod 600); commands must be signed with it")
      ->envname("TANDEM_CLUSTER_KEY_FILE")->required();
  app.add_option("--max-message-age", max_age_s, "seconds after which a signed command is refused as stale")
      ->envname("TANDEM_MAX_MESSAGE_AGE_S");
  app.add_option("--state-dir", state_dir, "directory for the agent's replay (nonce) memory")
      ->envname("TANDEM_AGENT_STATE_DIR");
  app.add_option("--run-root", run_root,
                 "run tasks under DIR/<job id> instead of the daemon's run directory (no shared file system)")
      ->envname("TANDEM_AGENT_RUN_ROOT");
  app.add_option("--name", name, "node name (default: hostname)")->envname("TANDEM_NODE_NAME");
  app.add_option("--address", address, "address other nodes reach this one at (default: hostname)")
      ->envname("TANDEM_NODE_ADDRESS");
  app.add_option("--gpus", gpus, "physical GPU ids, e.g. 0,1,2,3")->envname("TANDEM_GPUS");
  app.add_option("--lease", lease_s, "lease in seconds; tasks are killed when it lapses")->envname("TANDEM_LEASE_S");
  app.add_option("--prefix", prefix, "key prefix in Redis")->envname("TANDEM_REDIS_PREFIX");
  app.add_option("--exec-shim", exec_shim, "tandem-exec (default: beside this binary)")->envname("TANDEM_EXEC_SHIM");
  app.add_option("--log-level", level, "debug|info|warn|error")->envname("TANDEM_LOG_LEVEL");
  CLI11_PARSE(app, argc, argv);
  log::Init(level);

  redis::AgentOptions o;
  auto cfg = redis::RedisConfig::FromUrl(url, password_file);
  if (!cfg.ok()) {
    std::cerr << "tandem-agent: " << cfg.status().ToString() << "\n";
    return 2;
  }
  o.redis = *cfg;
  auto key = redis::ClusterKey::FromFile(key_file);
  if (!key.ok()) {
    std::cerr << "tandem-agent: " << key.status().ToString() << "\n";
    return 2;
  }
  o.cluster_key = *key;
  o.max_message_age = std::chrono::milliseconds(static_cast<long long>(max_age_s * 1000));
  o.name = name;
  o.state_dir = state_dir;
  o.run_root = run_root;
  o.address = address;
  o.keys.prefix = prefix;
  o.lease = std::chrono::milliseconds(static_cast<long long>(lease_s * 1000));
  o.local.exec_shim = exec_shim;
  o.local.reap_orphans = true;
  for (size_t pos = 0; pos < gpus.size();) {
    size_t comma = gpus.find(',', pos);
    std::string item = gpus.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    try {
      o.gpus.push_back(std::stoi(item));
    } catch (...) {
      std::cerr << "tandem-agent: --gpus: bad id '" << item << "'\n";
      return 2;
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  // Before any thread exists: the watchdog process kills our tasks if we die.
  ::signal(SIGPIPE, SIG_IGN);
  auto watchdog = redis::AgentWatchdog::Spawn(o.name.empty() ? "(hostname)" : o.name, o.local);
  if (!watchdog.ok()) log::Warn("redis", "no watchdog: {}", watchdog.status().ToString());
  boost::asio::io_context io;
  if (auto st = backends::EnableChildSubreaper(); !st.ok()) log::Warn("redis", "subreaper: {}", st.ToString());
  auto agent = redis::Agent::Create(io, o);
  if (!agent.ok()) {
    std::cerr << "tandem-agent: " << agent.status().ToString() << "\n";
    return 1;
  }
  if (watchdog.ok()) (*agent)->SetWatchdog(std::move(watchdog).value());
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  bool stopping = false;
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec) return;
    stopping = true;
  });
  (*agent)->Start();
  while (!stopping) {
    io.restart();
    io.run_one_for(std::chrono::milliseconds(100));
  }
  (*agent)->Shutdown();
  return 0;
}
