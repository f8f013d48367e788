// weights_peer: the other process of the transports' fault tests
// (peer_process.h) — a real publisher or reader, started fresh (CUDA does
// not survive fork), reporting each step on stdout. cuda-ipc
// (ipc_fault_test.cc), on the same GPU:
//   weights_peer publish JOB TASK VERSION VOCAB SEED
//       publishes RandomParameters(seed) of FaultConfig(vocab) on cuda:0,
//       prints "published <source>", then waits until killed;
//   weights_peer read SOURCE VOCAB SEED HOLD_MS
//       opens and loads SOURCE into cuda:0, prints "loaded match" (or
//       "loaded differ <tensor>"), sleeps HOLD_MS, acknowledges, prints "acked".
// nccl (nccl_transport_test.cc), on the CPU (gloo):
//   weights_peer nccl-read SOURCE SEED
//       loads SOURCE into SuiteConfig()'s fp32 parameters, prints "loaded
//       match" (against RandomParameters(seed)) or "loaded differ <tensor>",
//       then stays (a member of the publisher's group) until killed.
// Errors print "error <status>" and exit 1.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "workers/weights/ipc_transport.h"
#include "workers/weights/tests/ipc_fault_config.h"
#include "workers/weights/tests/transport_suite.h"

using namespace tandem;
using namespace tandem::weights;
namespace wt = tandem::weights::testing;

namespace {

int Fail(const Status& st) {
  std::printf("error %s\n", st.ToString().c_str());
  std::fflush(stdout);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const at::Device cuda(at::kCUDA, 0);
  if (mode == "publish" && argc == 7) {
    const model::ModelConfig c = wt::FaultConfig(std::atoll(argv[5]));
    const model::ParameterSet p = wt::RandomParameters(c, std::strtoull(argv[6], nullptr, 10), cuda);
    IpcPublisher pub({argv[2], argv[3], 1});
    auto source = pub.Publish(std::atoll(argv[4]), p);
    if (!source.ok()) return Fail(source.status());
    std::printf("published %s\n", source->c_str());
    std::fflush(stdout);
    for (;;) ::pause();
  }
  if (mode == "read" && argc == 6) {
    const model::ModelConfig c = wt::FaultConfig(std::atoll(argv[3]));
    const model::ParameterSet want = wt::RandomParameters(c, std::strtoull(argv[4], nullptr, 10), cuda);
    const model::ParameterSet reader = wt::PoisonedParameters(c, at::kFloat, cuda);
    auto from = OpenWeightSource(argv[2]);
    if (!from.ok()) return Fail(from.status());
    if (Status st = (*from)->LoadParameters(reader); !st.ok()) return Fail(st);
    const std::string diff = wt::FirstDifference(want, reader);
    std::printf(diff.empty() ? "loaded match\n" : "loaded differ %s\n", diff.c_str());
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoll(argv[5])));
    if (Status st = (*from)->Acknowledge(); !st.ok()) return Fail(st);
    std::printf("acked\n");
    std::fflush(stdout);
    return 0;
  }
  if (mode == "nccl-read" && argc == 4) {
    const model::ModelConfig c = wt::SuiteConfig();
    const model::ParameterSet want = wt::RandomParameters(c, std::strtoull(argv[3], nullptr, 10));
    const model::ParameterSet reader = wt::PoisonedParameters(c, at::kFloat);
    if (Status st = wt::OpenAndLoad(argv[2], reader); !st.ok()) return Fail(st);
    const std::string diff = wt::FirstDifference(want, reader);
    std::printf(diff.empty() ? "loaded match\n" : "loaded differ %s\n", diff.c_str());
    std::fflush(stdout);
    for (;;) ::pause();
  }
  std::fprintf(stderr,
               "usage: weights_peer publish JOB TASK VERSION VOCAB SEED\n"
               "       weights_peer read SOURCE VOCAB SEED HOLD_MS\n"
               "       weights_peer nccl-read SOURCE SEED\n");
  return 2;
}
