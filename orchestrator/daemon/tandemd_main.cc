// tandemd: the daemon. Flags: orchestrator/daemon/settings.h; API: docs/api.md.
#include <csignal>

#include <boost/asio/signal_set.hpp>

#include "common/log.h"
#include "common/version.h"
#include "orchestrator/daemon/daemon.h"

int main(int argc, char** argv) {
  tandem::daemon::DaemonSettings settings;
  CLI::App app{"tandemd: the tandem daemon"};
  tandem::daemon::AddDaemonFlags(app, settings);
  app.set_version_flag("--version", tandem::VersionLine("tandemd"));
  CLI11_PARSE(app, argc, argv);
  tandem::log::Init(settings.log_level);
  std::signal(SIGPIPE, SIG_IGN);

  boost::asio::io_context io;
  tandem::daemon::Daemon daemon(io, settings);
  if (tandem::Status st = daemon.Start(); !st.ok()) {
    tandem::log::Error("daemon", "cannot start: {}", st.ToString());
    return 1;
  }
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code&, int sig) {
    tandem::log::Info("daemon", "signal {} received, shutting down (tasks keep running)", sig);
    daemon.Stop();
    io.stop();
  });
  io.run();
  return 0;
}
