// The model's parameters: a few contiguous buffers with a named view per
// parameter (docs/model.md "The model"; DESIGN.md "Layout of workers/").
//
// Every parameter lives in one flat buffer per (dtype, device) — a model has
// one dtype and one device, so today exactly one buffer — at an offset
// aligned to 256 bytes. Tagged memory can release or re-home the buffer whole
// and weight exchange can publish it without a per-tensor copy.
//
// Two views of the same bytes:
//   * slots: the tensors the layers compute with, each contiguous in the
//     buffer and an autograd leaf (requires_grad once EnableGrad ran). A slot
//     is one HF tensor, except the experts of a MoE layer, which are two
//     slots in the layout the MoE kernels take:
//       model.layers.{i}.mlp.experts.w_gate_up  [E, H, 2I]  (gate columns [0, I), up [I, 2I))
//       model.layers.{i}.mlp.experts.w_down     [E, I, H]
//   * named parameters: HF's names and shapes, in HF's checkpoint order
//     (model.embed_tokens.weight, model.layers.{i}.input_layernorm.weight,
//     model.layers.{i}.self_attn.{q,k,v,o}_proj.weight,
//     model.layers.{i}.self_attn.{q,k}_norm.weight,
//     model.layers.{i}.post_attention_layernorm.weight,
//     model.layers.{i}.mlp.{gate,up,down}_proj.weight (dense layers),
//     model.layers.{i}.mlp.gate.weight and
//     model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight (MoE layers),
//     model.norm.weight, lm_head.weight (absent when tied)). Each is a view
//     aliasing its slot's bytes with no autograd history; the per-expert
//     views are strided (a transpose of a slice of the slot), so copy them
//     with .contiguous() to serialise. Writing into a view (under
//     c10::NoGradGuard) writes the parameter.
//
// Gradients: EnableGrad() allocates one gradient buffer per parameter buffer
// (same layout, zeroed) and makes each slot's .grad() a view of it, so
// backward accumulates in place into the flat gradient buffer; Grad(name)
// is the named view of it. Not thread-safe; a ParameterSet is owned by one
// model and is not copyable (moving it keeps every view valid).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "workers/model/config.h"

namespace tandem::model {

class ParameterSet {
 public:
  struct Slot {
    std::string name;
    at::Tensor leaf;       // contiguous view of a buffer; an autograd leaf
    int buffer = 0;        // index into buffers()
    int64_t offset = 0;    // elements from the buffer's start
  };
  struct Named {
    std::string name;      // HF name
    at::Tensor view;       // HF shape, aliases slots()[slot].leaf's bytes
    int slot = 0;
  };

  // Lays out every parameter of `config` (which must be valid) in one
  // buffer of `dtype` on `device`: `buffer` when defined (a flat contiguous
  // tensor of that dtype and device with at least BufferNumel elements,
  // e.g. over a tagged-memory pool, which the caller keeps mapped while the
  // set is used; its contents are left as they are), else a new one of
  // zeros (the alignment padding too: a buffer compared, summed or copied
  // whole is the same on every run).
  static ParameterSet Create(const ModelConfig& config, at::Device device, at::ScalarType dtype,
                             const at::Tensor& buffer = {});
  // Elements of the one buffer Create lays `config` out in (alignment padding included).
  static int64_t BufferNumel(const ModelConfig& config, at::ScalarType dtype);

  ParameterSet() = default;
  ParameterSet(ParameterSet&&) = default;
  ParameterSet& operator=(ParameterSet&&) = default;
  ParameterSet(const ParameterSet&) = delete;
  ParameterSet& operator=(const ParameterSet&) = delete;

  const std::vector<at::Tensor>& buffers() const { return buffers_; }
  const std::vector<Slot>& slots() const { return slots_; }
  const std::vector<Named>& named() const { return named_; }  // HF checkpoint order
  size_t size() const { return named_.size(); }
  int64_t numel() const;  // elements over all parameters (padding excluded)

  // The named view, or nullptr for an unknown name.
  const at::Tensor* Find(std::string_view name) const;
  // The leaf of a slot, by slot name; throws c10::Error when unknown (a
  // bug, not an input error).
  const at::Tensor& Leaf(std::string_view slot_name) const;

  // Gradients (see the file comment). EnableGrad is idempotent.
  void EnableGrad();
  bool grad_enabled() const { return !grad_buffers_.empty(); }
  const std::vector<at::Tensor>& grad_buffers() const { return grad_buffers_; }
  void ZeroGrad();
  // The gradient of a named parameter (HF shape, strided like its view), or
  // an undefined tensor when grads are not enabled or the name is unknown.
  at::Tensor Grad(std::string_view name) const;

 private:
  std::vector<at::Tensor> buffers_;
  std::vector<at::Tensor> grad_buffers_;
  std::vector<Slot> slots_;
  std::vector<Named> named_;
  std::map<std::string, int, std::less<>> slot_index_;
  std::map<std::string, int, std::less<>> named_index_;
};

}  // namespace tandem::model
