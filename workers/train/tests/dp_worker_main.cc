// train_dp_worker: one data-parallel replica for data_parallel_test.cc, a
// real process.
//   train_dp_worker train RANK WORLD PORT OUT ALGORITHM MICRO_BATCH_TOKENS STEPS RANK0_GROUPS BAD_RANK OPTIMIZER
//     joins the group on 127.0.0.1:PORT, trains (dp_test_util.h Run) and
//     writes OUT and OUT.stats; exit 0, or 1 with the error on stderr.
//   train_dp_worker muon RANK WORLD PORT OUT RESIDENCY STEPS
//     joins, runs dp_test_util.h RunMuonBf16 and writes its floats to OUT.
//   train_dp_worker hang RANK WORLD PORT
//     joins, passes one barrier, then sleeps 60 s without another
//     collective (its peer's next all-reduce waits on it; the test kills it).
//   train_dp_worker echo RANK WORLD PORT COUNT
//     receives COUNT broadcasts from rank 0 and answers each with an
//     all-reduce (sum) of {its size, the sum of its bytes}.
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "workers/train/tests/dp_test_util.h"

int main(int argc, char** argv) {
  using namespace tandem::train;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!((mode == "train" && argc == 12) || (mode == "muon" && argc == 8) || (mode == "hang" && argc == 5) || (mode == "echo" && argc == 6))) {
    std::fprintf(stderr, "usage: train_dp_worker train RANK WORLD PORT OUT ALGORITHM MBT STEPS RANK0_GROUPS BAD_RANK OPTIMIZER\n"
                         "       train_dp_worker muon RANK WORLD PORT OUT RESIDENCY STEPS\n"
                         "       train_dp_worker hang RANK WORLD PORT\n"
                         "       train_dp_worker echo RANK WORLD PORT COUNT\n");
    return 2;
  }
  at::set_num_threads(1);
  tandem::collective::GroupOptions o;
  o.rank = std::stoi(argv[2]);
  o.world_size = std::stoi(argv[3]);
  o.port = std::stoi(argv[4]);
  o.timeout = std::chrono::seconds(30);
  o.connect_timeout = std::chrono::seconds(60);
  auto dp = tandem::collective::Group::Connect(o);
  if (!dp.ok()) {
    std::fprintf(stderr, "train_dp_worker rank %d: %s\n", o.rank, dp.status().ToString().c_str());
    return 1;
  }
  if (mode == "hang") {
    if (tandem::Status s = (*dp)->Barrier(); !s.ok()) {
      std::fprintf(stderr, "train_dp_worker rank %d: %s\n", o.rank, s.ToString().c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  if (mode == "echo") {
    for (int i = 0, n = std::stoi(argv[5]); i < n; ++i) {
      std::string message;
      tandem::Status s = (*dp)->Broadcast(message, std::chrono::seconds(30));
      double sum = 0;
      for (const char c : message) sum += static_cast<unsigned char>(c);
      std::vector<double> digest = {static_cast<double>(message.size()), sum};
      if (s.ok()) s = (*dp)->AllReduce(digest, tandem::collective::HostReduce::kSum);
      if (!s.ok()) {
        std::fprintf(stderr, "train_dp_worker rank %d: %s\n", o.rank, s.ToString().c_str());
        return 1;
      }
    }
    return 0;
  }
  if (mode == "muon") {
    auto r = dptest::RunMuonBf16(argv[6], std::stoi(argv[7]), **dp);
    tandem::Status s = r.status();
    if (r.ok()) {
      std::ofstream out(argv[5], std::ios::binary);
      out.write(reinterpret_cast<const char*>(r->data()), static_cast<std::streamsize>(r->size() * 4));
      if (!out) s = tandem::Internal(std::string("cannot write ") + argv[5]);
    }
    if (!s.ok()) {
      std::fprintf(stderr, "train_dp_worker rank %d: %s\n", o.rank, s.ToString().c_str());
      return 1;
    }
    return 0;
  }
  dptest::RunConfig config;
  config.algorithm = argv[6];
  config.micro_batch_tokens = std::stoll(argv[7]);
  config.steps = std::stoi(argv[8]);
  config.rank0_groups = std::stoi(argv[9]);
  config.bad_rank = std::stoi(argv[10]);
  config.optimizer = argv[11];
  auto r = dptest::Run(config, **dp);
  tandem::Status s = r.ok() ? dptest::WriteResult(argv[5], *r) : r.status();
  if (!s.ok()) {
    std::fprintf(stderr, "train_dp_worker rank %d: %s\n", o.rank, s.ToString().c_str());
    return 1;
  }
  return 0;
}
