// cuda-ipc publish+load against one device-to-device copy of the same
// bytes and a per-tensor copy loop (docs/benchmarks.md "Weight exchange
// (cuda-ipc, H200)"; issue #15 "Performance").
//   weights_ipc_bench [--models 0.5b,3b] [--reps 5]
// Two bf16 models on cuda:0 with Qwen2.5's shapes (0.5B: hidden 896, 24
// layers; 3B: hidden 2048, 36 layers; vocabulary 151936, tied), as the
// model's ParameterSet lays them out (one flat buffer, a slot per tensor).
// Per repetition, the same bytes, the same process (the colocated path: the
// reader imports the export's descriptor through the socket as another
// process would):
//   copy      one cuMemcpyDtoDAsync of the flat buffer into the reader's, synchronised;
//   per-tensor  one LibTorch copy_ per slot, then a device synchronise;
//   ipc       IpcPublisher::Publish (a new VMM allocation, the copy into it)
//             + OpenWeightSource + LoadParameters (the copy out) + Acknowledge (the free).
// Best of `reps` after one warm-up each, in milliseconds and GB/s of the
// model's bytes; the ratios are copy time / other time (1.0: as fast as one
// copy). Publish+load makes two copies by contract (Publish copies, so the
// actor may change its parameters at once), so its ceiling is ~0.5.
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "workers/model/config.h"
#include "workers/model/parameter_set.h"
#include "workers/weights/cuda_vmm.h"
#include "workers/weights/ipc_transport.h"
#include "workers/weights/weight_source.h"

namespace {

using namespace tandem;
using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

model::ModelConfig Qwen25(const std::string& name) {
  model::ModelConfig c = model::DefaultConfig(model::Architecture::kQwen3);
  c.vocab_size = 151936;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 32768;
  if (name == "0.5b") {
    c.hidden_size = 896, c.num_hidden_layers = 24, c.num_attention_heads = 14, c.num_key_value_heads = 2;
    c.head_dim = 64, c.intermediate_size = 4864;
  } else {
    c.hidden_size = 2048, c.num_hidden_layers = 36, c.num_attention_heads = 16, c.num_key_value_heads = 2;
    c.head_dim = 128, c.intermediate_size = 11008;
  }
  return c;
}

#define CHECK_OK(expr)                                                        \
  do {                                                                        \
    const ::tandem::Status _st = (expr);                                      \
    if (!_st.ok()) {                                                          \
      std::fprintf(stderr, "%s: %s\n", #expr, _st.ToString().c_str());        \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models = {"0.5b", "3b"};
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--models") == 0) {
      models.clear();
      std::string s = argv[i + 1];
      for (size_t at = 0; at <= s.size();) {
        const size_t comma = std::min(s.find(',', at), s.size());
        models.push_back(s.substr(at, comma - at));
        at = comma + 1;
      }
    }
  }
  CHECK_OK(weights::IpcTransportAvailable(0));
  const at::Device cuda(at::kCUDA, 0);
  std::vector<std::string> breakdown;
  std::printf("| model | parameters | bytes | tensors | copy | per-tensor loop | ipc publish | ipc load (open+copy+ack) | ipc publish+load | ipc / copy | ipc / per-tensor | load / copy |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& name : models) {
    const model::ModelConfig c = Qwen25(name);
    CHECK_OK(model::ValidateModelConfig(c));
    model::ParameterSet pub = model::ParameterSet::Create(c, cuda, at::kBFloat16);
    model::ParameterSet reader = model::ParameterSet::Create(c, cuda, at::kBFloat16);
    pub.buffers()[0].normal_();
    reader.buffers()[0].zero_();
    const uint64_t bytes = static_cast<uint64_t>(pub.buffers()[0].nbytes());
    auto copier = weights::DeviceCopier::Create(0);
    CHECK_OK(copier.status());
    double best_copy = 1e30, best_loop = 1e30, best_pub = 1e30, best_load = 1e30, best_ipc = 1e30;
    weights::IpcPublisher publisher({"bench" + std::to_string(::getpid()), "actor", 1});
    int64_t version = 0;
    for (int r = 0; r <= reps; ++r) {  // r == 0: warm-up
      CHECK_OK((*copier)->SynchronizeDevice());
      auto t = Clock::now();
      CHECK_OK((*copier)->Copy(reader.buffers()[0].data_ptr(), pub.buffers()[0].data_ptr(), bytes));
      CHECK_OK((*copier)->Wait());
      const double copy = Ms(t);

      CHECK_OK((*copier)->SynchronizeDevice());
      t = Clock::now();
      for (size_t s = 0; s < pub.slots().size(); ++s) reader.slots()[s].leaf.detach().copy_(pub.slots()[s].leaf.detach());
      CHECK_OK((*copier)->SynchronizeDevice());
      const double loop = Ms(t);

      reader.buffers()[0].zero_();
      CHECK_OK((*copier)->SynchronizeDevice());
      t = Clock::now();
      auto source = publisher.Publish(++version, pub);
      CHECK_OK(source.status());
      const double publish = Ms(t);
      const auto t1 = Clock::now();
      auto from = weights::OpenWeightSource(*source);
      CHECK_OK(from.status());
      CHECK_OK((*from)->LoadParameters(reader));
      CHECK_OK((*from)->Acknowledge());
      const double load = Ms(t1);
      const double ipc = Ms(t);
      if (publisher.ExportedBytes() != 0) {
        std::fprintf(stderr, "the ack did not free the export\n");
        return 1;
      }
      if (!at::equal(reader.buffers()[0], pub.buffers()[0])) {
        std::fprintf(stderr, "%s: the reader's bytes differ from the publisher's\n", name.c_str());
        return 1;
      }
      if (r == 0) continue;
      best_copy = std::min(best_copy, copy), best_loop = std::min(best_loop, loop);
      best_pub = std::min(best_pub, publish), best_load = std::min(best_load, load), best_ipc = std::min(best_ipc, ipc);
    }
    const double gb = static_cast<double>(bytes) / 1e9;
    auto cell = [&](double ms) {
      char b[64];
      std::snprintf(b, sizeof b, "%.3f ms (%.0f GB/s)", ms, gb / (ms / 1e3));
      return std::string(b);
    };
    std::printf("| %s | %.2f B | %.2f GB | %zu | %s | %s | %s | %s | %s | **%.2f** | %.2f | %.2f |\n", name.c_str(),
                static_cast<double>(c.NumParameters()) / 1e9, gb, pub.slots().size(), cell(best_copy).c_str(),
                cell(best_loop).c_str(), cell(best_pub).c_str(), cell(best_load).c_str(), cell(best_ipc).c_str(),
                best_copy / best_ipc, best_loop / best_ipc, best_copy / best_load);
    std::fflush(stdout);
    // Where the time goes: the VMM calls alone on an allocation of the same size.
    double best_create = 1e30, best_import = 1e30, best_first = 1e30, best_unmap = 1e30, best_free = 1e30;
    for (int r = 0; r <= reps; ++r) {
      auto t = Clock::now();
      auto exp = weights::VmmExport::Create(0, bytes);
      CHECK_OK(exp.status());
      const double create = Ms(t);
      t = Clock::now();
      auto imp = weights::VmmImport::Open((*exp)->fd(), (*exp)->bytes(), 0);
      CHECK_OK(imp.status());
      const double import = Ms(t);
      t = Clock::now();
      CHECK_OK((*copier)->Copy(reader.buffers()[0].data_ptr(), (*imp)->data(), bytes));
      CHECK_OK((*copier)->Wait());
      const double first = Ms(t);
      t = Clock::now();
      imp->reset();
      const double unmap = Ms(t);
      t = Clock::now();
      exp->reset();
      const double freed = Ms(t);
      if (r == 0) continue;
      best_create = std::min(best_create, create), best_import = std::min(best_import, import);
      best_first = std::min(best_first, first), best_unmap = std::min(best_unmap, unmap), best_free = std::min(best_free, freed);
    }
    breakdown.push_back(name + ": create+map+export " + std::to_string(best_create) + " ms, import+map " +
                        std::to_string(best_import) + " ms, first copy out of a fresh import " + std::to_string(best_first) +
                        " ms, unmap import " + std::to_string(best_unmap) + " ms, free export " + std::to_string(best_free) + " ms");
  }
  std::printf("\nVMM calls alone (best of %d):\n", reps);
  for (const std::string& b : breakdown) std::printf("- %s\n", b.c_str());
  return 0;
}
