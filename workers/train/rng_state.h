// The random generators' states a training checkpoint keeps (docs/weights.md
// "Checkpoints"): LibTorch's default CPU generator and, for a CUDA device,
// that device's default generator, as byte tensors named "rng/cpu" and
// "rng/cuda:<index>" (what at::Generator::get_state gives: opaque, valid
// only for the same LibTorch generator kind).
//
// Restoring checks names and that every generator the device uses has a
// state before it sets any (InvalidArgument naming the one that is missing);
// a state LibTorch refuses (wrong size) is an InvalidArgument with its
// message, and the generators set before it keep their new state.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <map>
#include <string>

#include "common/status.h"

namespace tandem::train {

std::map<std::string, at::Tensor> SaveRngStates(at::Device device);
Status RestoreRngStates(const std::map<std::string, at::Tensor>& states, at::Device device);

}  // namespace tandem::train
