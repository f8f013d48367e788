// A group of `world` ranks whose collectives change nothing: one rank of a
// sharded optimizer on its own (its gathers see only its own elements).
// For tests of one rank's share of a sharded state without other processes.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>  // data_parallel.h holds a Store by intrusive_ptr

#include <string>
#include <vector>

#include "workers/collective/group.h"

namespace tandem::train::testing {

class LoneRank final : public collective::Group {
 public:
  LoneRank(int rank, int world) : collective::Group(rank, world) {}
  std::string backend() const override { return "lone"; }
  Status AllReduceSum(std::vector<at::Tensor>&) override { return Status::Ok(); }
  Status AllReduce(std::vector<double>&, collective::HostReduce) override { return Status::Ok(); }
  Status BroadcastTensors(std::vector<at::Tensor>&) override { return Status::Ok(); }
  Status Barrier() override { return Status::Ok(); }
};

}  // namespace tandem::train::testing
