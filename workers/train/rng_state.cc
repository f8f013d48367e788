// Saving and restoring the default generators (rng_state.h).
#include "workers/train/rng_state.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>

#include <mutex>
#include <vector>

namespace tandem::train {
namespace {

// The generators a run on `device` draws from, with their state names.
std::vector<std::pair<std::string, at::Device>> Generators(at::Device device) {
  std::vector<std::pair<std::string, at::Device>> out{{"rng/cpu", at::Device(at::kCPU)}};
  if (device.is_cuda()) {
    const at::Device d(at::kCUDA, device.has_index() ? device.index() : 0);
    out.emplace_back("rng/cuda:" + std::to_string(d.index()), d);
  }
  return out;
}

}  // namespace

std::map<std::string, at::Tensor> SaveRngStates(at::Device device) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, d] : Generators(device)) {
    at::Generator g = at::globalContext().defaultGenerator(d);
    std::lock_guard<std::mutex> lock(g.mutex());
    out[name] = g.get_state().clone();
  }
  return out;
}

Status RestoreRngStates(const std::map<std::string, at::Tensor>& states, at::Device device) {
  const auto generators = Generators(device);
  for (const auto& [name, d] : generators) {
    const auto it = states.find(name);
    if (it == states.end() || !it->second.defined()) return InvalidArgument("rng state: no \"" + name + "\"");
    if (it->second.scalar_type() != at::kByte || it->second.dim() != 1)
      return InvalidArgument("rng state: \"" + name + "\" is not a 1-D byte tensor");
  }
  for (const auto& [name, d] : generators) {
    try {
      at::Generator g = at::globalContext().defaultGenerator(d);
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(states.at(name));
    } catch (const std::exception& e) {
      return InvalidArgument("rng state \"" + name + "\": " + e.what());
    }
  }
  return Status::Ok();
}

}  // namespace tandem::train
