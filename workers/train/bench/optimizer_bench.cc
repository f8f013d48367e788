// train_optimizer_bench: the optimizers' step (issue #17 "Performance";
// scripts/gpu/run_optimizers.sh; docs/benchmarks.md "Optimizers").
//
//   train_optimizer_bench --params 1e9 [--device cuda|cpu --dtype fp32|bf16
//                         --slots 2 --slot-mib 128 --steps 3]
//
// Over the parameters of a dense Qwen3-shaped model of about --params
// elements (random gradients), after one warm-up step each:
//   adamw_native_s   our AdamW, state beside the parameters, the fused
//                    kernel (kernels/adamw)
//   adamw_native_unfused_s  the same through LibTorch's ops, op for op
//   copy_gbps, adamw_native_bound_s  a 1 GiB tensor copy's bandwidth (bytes
//                    read + written), and the fused step's floor: the 28
//                    bytes a parameter it reads and writes at that rate
// and with --device cuda (the default; only with LibTorch's CUDA path):
//   adamw_staged_s   our AdamW, state in pinned host slabs through
//                    --slots x --slot-mib buffers (the stream pipeline)
//   muon_staged_s    Muon (AdamW on embeddings, head, norms), staged
//   *_gpu_peak_bytes the allocator's peak during the step beyond what was
//                    allocated before it (the optimizer's own memory)
//   h2d/d2h/duplex_gbps  pinned copies of 1 GiB, one way and both at once
//   pcie_bound_s     the state's bytes each way over the measured duplex
//                    bandwidth (the staged step's floor); staged_vs_bound
//   ns_s, ns_matmul_s  Newton–Schulz (5 steps, bf16) on a 4096 x 11008
//                    matrix, and the same 15 matrix multiplies alone
// One JSON object on stdout.
#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <string>

#include "workers/model/config.h"
#include "workers/model/parameter_set.h"
#include "workers/train/adamw.h"
#include "workers/train/muon.h"

namespace {

using namespace tandem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A dense Qwen3-shaped config of about `target` parameters.
model::ModelConfig ConfigFor(double target) {
  model::ModelConfig c = model::DefaultConfig(model::Architecture::kQwen3);
  c.hidden_size = target >= 4e9 ? 4096 : 2048;
  c.head_dim = 128;
  c.num_attention_heads = c.num_key_value_heads = c.hidden_size / 128;
  c.intermediate_size = c.hidden_size * 43 / 16;  // 11008 at 4096
  c.vocab_size = 32000;
  c.tie_word_embeddings = false;
  const double h = static_cast<double>(c.hidden_size);
  const double per_layer = 4 * h * h + 3 * h * static_cast<double>(c.intermediate_size);
  c.num_hidden_layers = std::max<int64_t>(1, static_cast<int64_t>((target - 2 * 32000 * h) / per_layer + 0.5));
  return c;
}

// Seconds per call of fn after one warm-up, and on CUDA the allocator's
// peak above what was allocated before the timed calls (0 on the CPU).
std::pair<double, int64_t> Time(const at::Device& device, int steps, const std::function<void()>& fn) {
  fn();
#ifdef TANDEM_TORCH_CUDA
  if (device.is_cuda()) {
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  }
  const int64_t base =
      device.is_cuda() ? c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current : 0;
#endif
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < steps; ++i) fn();
#ifdef TANDEM_TORCH_CUDA
  if (device.is_cuda()) {
    c10::cuda::device_synchronize();
    const double s = Since(t0) / steps;
    return {s, c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak - base};
  }
#endif
  return {Since(t0) / steps, 0};
}

double Gbps(int64_t bytes, double s) { return static_cast<double>(bytes) / s / 1e9; }

#ifdef TANDEM_TORCH_CUDA
// Pinned PCIe bandwidth and Newton–Schulz against its matrix multiplies.
void PcieAndNewtonSchulz(const at::Device& gpu, int steps, nlohmann::json& out) {
  // Pinned PCIe bandwidth, 1 GiB each way and both at once.
  {
    const int64_t n = int64_t{1} << 28;  // floats
    at::Tensor host_in = at::empty({n}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true)).fill_(1);
    at::Tensor host_out = at::empty({n}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));  // empty_like would not pin
    at::Tensor dev_in = at::empty({n}, at::TensorOptions().dtype(at::kFloat).device(gpu)), dev_out = at::empty_like(dev_in);
    const int64_t bytes = n * 4;
    const double h2d = Time(gpu, 3, [&] { dev_in.copy_(host_in, true); }).first;
    const double d2h = Time(gpu, 3, [&] { host_out.copy_(dev_out, true); }).first;
    const c10::cuda::CUDAStream other = c10::cuda::getStreamFromPool(false, 0);
    const double both = Time(gpu, 3, [&] {
      {
        c10::cuda::CUDAStreamGuard g(other);
        host_out.copy_(dev_out, true);
      }
      dev_in.copy_(host_in, true);
      other.synchronize();
    }).first;
    out["h2d_gbps"] = Gbps(bytes, h2d);
    out["d2h_gbps"] = Gbps(bytes, d2h);
    out["duplex_gbps"] = Gbps(bytes, both);  // each way, both at once
  }

  // Newton–Schulz against its matrix multiplies.
  {
    const at::Tensor g = at::randn({4096, 11008}, at::TensorOptions().dtype(at::kBFloat16).device(gpu));
    const double ns = Time(gpu, steps, [&] { (void)train::NewtonSchulz5(g, 5, at::kBFloat16); }).first;
    const at::Tensor x = g / g.norm();
    const double mm = Time(gpu, steps, [&] {
      at::Tensor y = x;
      for (int i = 0; i < 5; ++i) {
        const at::Tensor a = at::matmul(y, y.transpose(0, 1));
        const at::Tensor b = at::matmul(a, a);
        y = at::matmul(b, y);
      }
    }).first;
    out["ns_s"] = ns;
    out["ns_matmul_s"] = mm;
    out["ns_vs_matmul"] = ns / mm;
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  double target = 1e9;
  int slots = 2, steps = 3;
  int64_t slot_mib = 128;
  bool bf16 = false;  // --dtype bf16: bf16 parameters, fp32 masters in the state
  std::string device_name = "cuda";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--params") target = std::atof(argv[i + 1]);
    else if (flag == "--slots") slots = std::atoi(argv[i + 1]);
    else if (flag == "--slot-mib") slot_mib = std::atoll(argv[i + 1]);
    else if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    else if (flag == "--dtype") bf16 = std::string(argv[i + 1]) == "bf16";
    else if (flag == "--device") device_name = argv[i + 1];
    else { std::fprintf(stderr, "unknown flag %s\n", argv[i]); return 2; }
  }
  if (device_name != "cuda" && device_name != "cpu") {
    std::fprintf(stderr, "--device must be cuda or cpu\n");
    return 2;
  }
  const bool cuda = device_name == "cuda";
#ifdef TANDEM_TORCH_CUDA
  if (cuda && c10::cuda::device_count() == 0) { std::fprintf(stderr, "no GPU\n"); return 1; }
#else
  if (cuda) { std::fprintf(stderr, "built without LibTorch's CUDA path: --device cpu\n"); return 1; }
#endif
  const at::Device device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  nlohmann::json out;
  out["device"] = device_name;
  if (!cuda) out["cpu_threads"] = at::get_num_threads();

  // Memory bandwidth: a 1 GiB tensor copied, bytes read + written.
  {
    const int64_t n = int64_t{1} << 28;  // floats
    const at::Tensor src = at::ones({n}, at::TensorOptions().dtype(at::kFloat).device(device));
    at::Tensor dst = at::empty_like(src);
    out["copy_gbps"] = Gbps(2 * n * 4, Time(device, 3, [&] { dst.copy_(src); }).first);
  }
#ifdef TANDEM_TORCH_CUDA
  if (cuda) PcieAndNewtonSchulz(device, steps, out);
#endif
  const model::ModelConfig config = ConfigFor(target);
  model::ParameterSet params = model::ParameterSet::Create(config, device, bf16 ? at::kBFloat16 : at::kFloat);
  params.EnableGrad();
  {
    c10::NoGradGuard no_grad;
    for (const at::Tensor& b : params.buffers()) b.normal_(0, 0.02);
    for (const at::Tensor& g : params.grad_buffers()) g.normal_(0, 1e-3);
  }
  const int64_t n = params.numel();
  out["params"] = n;
  out["layers"] = config.num_hidden_layers;
  out["hidden"] = config.hidden_size;
  out["dtype"] = bf16 ? "bf16" : "fp32";
  train::AdamWOptions adamw;
  adamw.max_grad_norm = 0;  // the update alone
  auto run = [&](const std::string& name, const std::function<tandem::StatusOr<std::unique_ptr<train::Optimizer>>()>& make) {
    auto o = make();
    if (!o.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), o.status().ToString().c_str());
      out[name + "_error"] = o.status().ToString();
      return;
    }
    std::string error;
    const auto [s, peak] = Time(device, steps, [&] {
      if (!error.empty()) return;
      if (const auto st = (*o)->Step(1e-4); !st.ok()) error = st.status().ToString();
    });
    if (!error.empty()) {  // no time for a step that failed
      std::fprintf(stderr, "%s: %s\n", name.c_str(), error.substr(0, 400).c_str());
      out[name + "_error"] = error.substr(0, 400);
      return;
    }
    out[name + "_s"] = s;
    if (cuda) out[name + "_gpu_peak_bytes"] = peak;
    out[name + "_device_bytes"] = (*o)->device_bytes();
    std::fprintf(stderr, "[bench] %s: %.3f s a step, peak %.2f GiB\n", name.c_str(), s, peak / 1073741824.0);
  };
  auto adamw_with = [&](const train::AdamWOptions& options) {
    return [&params, options]() -> tandem::StatusOr<std::unique_ptr<train::Optimizer>> {
      TANDEM_ASSIGN_OR_RETURN(auto o, train::AdamW::Create(params, options));
      return std::unique_ptr<train::Optimizer>(std::move(o));
    };
  };
  train::AdamWOptions unfused = adamw;
  unfused.fused = false;
  run("adamw_native_unfused", adamw_with(unfused));
  run("adamw_native", adamw_with(adamw));
  out["adamw_native_bound_s"] = 28.0 * static_cast<double>(n) / (out["copy_gbps"].get<double>() * 1e9);
  if (out.contains("adamw_native_s") && out.contains("adamw_native_unfused_s")) {
    out["fused_speedup"] = out["adamw_native_unfused_s"].get<double>() / out["adamw_native_s"].get<double>();
    out["fused_vs_bound"] = out["adamw_native_bound_s"].get<double>() / out["adamw_native_s"].get<double>();
  }
  if (!cuda) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
#ifdef TANDEM_TORCH_CUDA
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  train::AdamWOptions staged = adamw;
  staged.staging = {train::Residency::kStaged, slots, slot_mib << 20};
  run("adamw_staged", adamw_with(staged));
  // Muon's buffers hold its largest matrix's state whole.
  int64_t largest = 0;
  for (const model::ParameterSet::Slot& s : params.slots())
    if (train::MuonTakes(s.name, s.leaf.sizes())) largest = std::max(largest, s.leaf.numel());
  train::AdamWOptions muon_staged = staged;
  const int64_t muon_kinds = bf16 ? 2 : 1;  // the momentum, and the fp32 master of bf16 parameters
  muon_staged.staging.slot_bytes = std::max(staged.staging.slot_bytes, ((largest * 4 * muon_kinds >> 20) + 1) << 20);
  out["muon_slot_mib"] = muon_staged.staging.slot_bytes >> 20;
  run("muon_staged", [&]() -> tandem::StatusOr<std::unique_ptr<train::Optimizer>> {
    train::MuonOptions muon;
    muon.match_adamw_rms = true;
    TANDEM_ASSIGN_OR_RETURN(auto o, train::Muon::Create(params, muon, muon_staged));
    return std::unique_ptr<train::Optimizer>(std::move(o));
  });
  // AdamW's state each way: two fp32 moments, and the fp32 master of bf16 parameters.
  const double bytes = (bf16 ? 12.0 : 8.0) * static_cast<double>(n);
  const double bound = bytes / (out["duplex_gbps"].get<double>() * 1e9);
  out["pcie_bound_s"] = bound;
  if (out.contains("adamw_staged_s")) out["staged_vs_bound"] = bound / out["adamw_staged_s"].get<double>();
  out["slots"] = slots;
  out["slot_mib"] = slot_mib;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
