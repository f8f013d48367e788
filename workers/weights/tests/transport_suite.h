// The one test suite every weight transport runs (transport.h; STYLE.md's
// "one shared suite every transport runs"). A transport joins by giving a
// TransportHarness (how to make its publisher, whether it is durable, how
// to damage a published version) and instantiating the suite:
//   INSTANTIATE_TEST_SUITE_P(Shm, TransportSuite, ::testing::Values(TransportCase{"shm", MakeShmHarness}),
//                            TransportCaseName);
// Everything else — publish from a small random model, load into a second
// one, versions, acks, corrupt and mismatched inputs — is shared. The
// parameters live on the case's `device` (CPU for shm and file, cuda:0 for
// cuda-ipc); a harness that cannot run here (no GPU) says why in
// Unavailable() and every case skips with that reason.
#pragma once

#include <gtest/gtest.h>

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "workers/model/config.h"
#include "workers/model/parameter_set.h"
#include "workers/model/tests/model_test_util.h"
#include "workers/weights/transport.h"
#include "workers/weights/weight_source.h"

namespace tandem::weights::testing {

class TransportHarness {
 public:
  virtual ~TransportHarness() = default;
  virtual std::unique_ptr<WeightPublisher> MakePublisher(const model::ModelConfig& config,
                                                         uint32_t expected_readers) = 0;
  // True when a version outlives acks and the publisher (file).
  virtual bool durable() const = 0;
  // Damages the published version behind `source` like a hostile or torn
  // write; returns a substring the reader's refusal must contain.
  virtual std::string CorruptManifest(const std::string& source) = 0;
  virtual std::string Truncate(const std::string& source) = 0;
  // "" when the transport can run on this machine, else why not (the tests skip).
  virtual std::string Unavailable() const { return ""; }
};

struct TransportCase {
  std::string name;
  std::function<std::unique_ptr<TransportHarness>()> make;
  at::Device device = at::Device(at::kCPU);  // where publisher and readers keep their parameters
};
inline void PrintTo(const TransportCase& c, std::ostream* os) { *os << c.name; }
inline std::string TransportCaseName(const ::testing::TestParamInfo<TransportCase>& info) { return info.param.name; }

class TransportSuite : public ::testing::TestWithParam<TransportCase> {
 protected:
  void SetUp() override {
    harness_ = GetParam().make();
    if (const std::string why = harness_->Unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
  TransportHarness& harness() { return *harness_; }
  at::Device device() const { return GetParam().device; }

 private:
  std::unique_ptr<TransportHarness> harness_;
};

// --- helpers shared by the suite and the transports' own tests

// Three layers, MoE except layer 1: HF tensors, stacked experts, a dense MLP.
inline model::ModelConfig SuiteConfig() { return model::testing::TinyConfig(/*moe=*/true, /*layers=*/3); }

// An fp32 parameter set of `config` on `device` with random values (drawn
// on the CPU, so a seed gives the same values in every process).
inline model::ParameterSet RandomParameters(const model::ModelConfig& config, uint64_t seed,
                                            at::Device device = at::Device(at::kCPU)) {
  model::ParameterSet p = model::ParameterSet::Create(config, at::Device(at::kCPU), at::kFloat);
  at::manual_seed(seed);
  for (const model::ParameterSet::Slot& s : p.slots()) s.leaf.detach().normal_(0.0, 0.5);
  if (device.is_cpu()) return p;
  model::ParameterSet d = model::ParameterSet::Create(config, device, at::kFloat);
  for (size_t b = 0; b < p.buffers().size(); ++b) d.buffers()[b].copy_(p.buffers()[b]);
  return d;
}

// Every byte of every buffer NaN-ish (0xff), so a parameter left unwritten shows.
inline model::ParameterSet PoisonedParameters(const model::ModelConfig& config, at::ScalarType dtype,
                                              at::Device device = at::Device(at::kCPU)) {
  model::ParameterSet p = model::ParameterSet::Create(config, device, dtype);
  for (const at::Tensor& b : p.buffers()) b.view(at::kByte).fill_(0xff);
  return p;
}

// "" when every named parameter of `a` and `b` has the same bytes, else the first that differs.
inline std::string FirstDifference(const model::ParameterSet& a, const model::ParameterSet& b) {
  if (a.size() != b.size()) return "different parameter counts";
  for (size_t i = 0; i < a.size(); ++i) {
    const at::Tensor x = a.named()[i].view.to(at::kCPU).contiguous(), y = b.named()[i].view.to(at::kCPU).contiguous();
    if (a.named()[i].name != b.named()[i].name || x.nbytes() != y.nbytes() ||
        std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0)
      return a.named()[i].name;
  }
  return "";
}

// Opens `source` and loads it into `params`: the first error, or ok.
inline Status OpenAndLoad(const std::string& source, const model::ParameterSet& params,
                          std::unique_ptr<WeightSource>* keep = nullptr) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<WeightSource> from, OpenWeightSource(source));
  TANDEM_RETURN_IF_ERROR(from->LoadParameters(params));
  if (keep) *keep = std::move(from);
  return Status::Ok();
}

}  // namespace tandem::weights::testing
