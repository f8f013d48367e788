// Checking the tensor arguments of the RL functions (docs/rl.md "Losses and
// advantages"), so that a bad shape, dtype or device is an InvalidArgument
// naming the argument ("logprobs: expected shape [4, 7], got [4, 8]")
// instead of an exception from inside ATen; and the edge where ATen's own
// exceptions (c10::Error, std::exception) become a Status, so none escapes
// a public function of workers/rl/.
//
// Every function of workers/rl/ computes in float32 for float32, bfloat16 and
// float16 inputs, and in float64 when any floating input is float64 (the
// finite-difference tests use that).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <exception>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tandem::rl {

// "[4, 7]".
std::string ShapeString(at::IntArrayRef sizes);

// `t` is defined, floating (float32, bfloat16, float16 or float64) and has
// exactly `sizes`.
Status CheckFloating(std::string_view name, const at::Tensor& t, at::IntArrayRef sizes);
// `t` is defined, 1-D or 2-D, and floating: what the per-token inputs are
// checked against first (their [B, T] comes from it).
Status CheckFloatingRank(std::string_view name, const at::Tensor& t, int64_t rank);
// `t` is defined, bool or an integer type, and has exactly `sizes`.
Status CheckMask(std::string_view name, const at::Tensor& t, at::IntArrayRef sizes);
// `t` is defined, an integer type (not bool), 1-D of `n` elements.
Status CheckIndex(std::string_view name, const at::Tensor& t, int64_t n);
// `t` is on `device`.
Status CheckDevice(std::string_view name, const at::Tensor& t, const at::Device& device);

// float64 when any of `ts` (defined ones) is float64, else float32.
at::ScalarType ComputeType(std::initializer_list<at::Tensor> ts);

// The defined ones of `named` 0-dim tensors as (name, value) on the host,
// in order, through one device-to-host copy: what the losses' metrics
// ToHost return.
std::vector<std::pair<std::string, double>> ScalarsToHost(
    const std::vector<std::pair<const char*, const at::Tensor*>>& named);

// Runs `fn` (returning a StatusOr<T> or a Status), turning an exception
// from LibTorch into Internal("<what>: <message>").
template <typename Fn>
auto GuardTorch(std::string_view what, Fn&& fn) -> decltype(fn()) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const c10::Error& e) {
    return Internal(std::string(what) + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Internal(std::string(what) + ": " + e.what());
  }
}

}  // namespace tandem::rl
