// The fixture of the multi-host tests: a NetnsCluster under a fresh temp dir
// (hosts are brought up by each test), and the tandemd a test starts. Skips
// without root and `ip netns` (fails with TANDEM_SERVICES_REQUIRED=1); on a
// failure prints the agents' and the daemon's logs and keeps the dir.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "tests/daemon/daemon_process.h"
#include "tests/multihost/netns_cluster.h"

namespace tandem::multihost {

class NetnsTest : public ::testing::Test {
 protected:
  explicit NetnsTest(std::string dir_prefix) : dir_prefix_(std::move(dir_prefix)) {}
  void SetUp() override {
    if (!CanUseNetns()) {
      const char* required = std::getenv("TANDEM_SERVICES_REQUIRED");
      if (required && std::string(required) == "1")
        FAIL() << "multi-host tests need root and `ip netns` (TANDEM_SERVICES_REQUIRED=1)";
      GTEST_SKIP() << "needs root, ip netns and redis-server";
    }
    dir_ = testing::MakeTempDir(dir_prefix_);
    cluster_ = std::make_unique<NetnsCluster>(dir_);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) std::cerr << cluster_->AllAgentLogs() << (daemon_ ? daemon_->log() : "");
    daemon_.reset();
    cluster_.reset();
    if (!HasFailure() && !dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::string dir_prefix_;
  std::filesystem::path dir_;
  std::unique_ptr<NetnsCluster> cluster_;
  std::unique_ptr<testing::DaemonProcess> daemon_;
};

}  // namespace tandem::multihost
