// The parameter layout (parameter_set.h): slots in HF checkpoint order, each
// at a 256-byte aligned offset of one buffer, and the HF-named views over
// them.
#include "workers/model/parameter_set.h"

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>

#include <c10/util/Exception.h>

namespace tandem::model {
namespace {

constexpr int64_t kAlignBytes = 256;

struct SlotSpec {
  std::string name;
  std::vector<int64_t> shape;
  // The HF-named views of an expert slot: (name, view of the slot leaf).
  enum class Kind { kPlain, kExpertsGateUp, kExpertsDown } kind = Kind::kPlain;
  std::string hf_prefix;  // "model.layers.{i}.mlp.experts." for expert slots
};

std::vector<SlotSpec> Layout(const ModelConfig& c) {
  const int64_t h = c.hidden_size, d = c.head_dim;
  std::vector<SlotSpec> s;
  s.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    s.push_back({p + "input_layernorm.weight", {h}});
    s.push_back({p + "self_attn.q_proj.weight", {c.num_attention_heads * d, h}});
    s.push_back({p + "self_attn.k_proj.weight", {c.num_key_value_heads * d, h}});
    s.push_back({p + "self_attn.v_proj.weight", {c.num_key_value_heads * d, h}});
    s.push_back({p + "self_attn.o_proj.weight", {h, c.num_attention_heads * d}});
    s.push_back({p + "self_attn.q_norm.weight", {d}});
    s.push_back({p + "self_attn.k_norm.weight", {d}});
    s.push_back({p + "post_attention_layernorm.weight", {h}});
    if (c.IsMoeLayer(l)) {
      const int64_t e = c.num_experts, i = c.moe_intermediate_size;
      s.push_back({p + "mlp.gate.weight", {e, h}});
      s.push_back({p + "mlp.experts.w_gate_up", {e, h, 2 * i}, SlotSpec::Kind::kExpertsGateUp, p + "mlp.experts."});
      s.push_back({p + "mlp.experts.w_down", {e, i, h}, SlotSpec::Kind::kExpertsDown, p + "mlp.experts."});
    } else {
      s.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, h}});
      s.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, h}});
      s.push_back({p + "mlp.down_proj.weight", {h, c.intermediate_size}});
    }
  }
  s.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, h}});
  return s;
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t x : shape) n *= x;
  return n;
}

std::vector<int64_t> Offsets(const std::vector<SlotSpec>& layout, at::ScalarType dtype, int64_t& total) {
  const int64_t align = kAlignBytes / static_cast<int64_t>(c10::elementSize(dtype));
  std::vector<int64_t> offsets;
  total = 0;
  for (const SlotSpec& spec : layout) {
    offsets.push_back(total);
    total += (Numel(spec.shape) + align - 1) / align * align;
  }
  return offsets;
}

}  // namespace

int64_t ParameterSet::BufferNumel(const ModelConfig& config, at::ScalarType dtype) {
  int64_t total = 0;
  (void)Offsets(Layout(config), dtype, total);
  return total;
}

ParameterSet ParameterSet::Create(const ModelConfig& config, at::Device device, at::ScalarType dtype,
                                  const at::Tensor& buffer) {
  const std::vector<SlotSpec> layout = Layout(config);
  int64_t total = 0;
  const std::vector<int64_t> offsets = Offsets(layout, dtype, total);
  ParameterSet ps;
  if (buffer.defined()) {
    TORCH_CHECK(buffer.dim() == 1 && buffer.is_contiguous() && buffer.scalar_type() == dtype &&
                    buffer.device() == device && buffer.numel() >= total,
                "ParameterSet::Create: the given buffer is not a flat ", c10::toString(dtype), " tensor on ",
                device.str(), " of at least ", total, " elements");
    ps.buffers_.push_back(buffer.narrow(0, 0, total));
  } else {
    ps.buffers_.push_back(at::zeros({total}, at::TensorOptions().dtype(dtype).device(device)));
  }
  const at::Tensor& flat = ps.buffers_[0];
  for (size_t i = 0; i < layout.size(); ++i) {
    at::Tensor leaf = flat.narrow(0, offsets[i], Numel(layout[i].shape)).view(layout[i].shape).detach();
    ps.slot_index_[layout[i].name] = static_cast<int>(ps.slots_.size());
    ps.slots_.push_back({layout[i].name, leaf, 0, offsets[i]});
  }
  auto add = [&](std::string name, const at::Tensor& view, size_t slot) {
    ps.named_index_[name] = static_cast<int>(ps.named_.size());
    ps.named_.push_back({std::move(name), view.detach(), static_cast<int>(slot)});
  };
  for (size_t i = 0; i < layout.size(); ++i) {
    const SlotSpec& spec = layout[i];
    const at::Tensor& leaf = ps.slots_[i].leaf;
    if (spec.kind == SlotSpec::Kind::kPlain) {
      add(spec.name, leaf, i);
    } else if (spec.kind == SlotSpec::Kind::kExpertsGateUp) {
      // HF order per expert: gate_proj, up_proj, down_proj. w_gate_up [E, H, 2I]:
      // gate_proj.weight [I, H] is columns [0, I) transposed, up_proj [I, 2I);
      // w_down (the next slot) [E, I, H]: down_proj.weight [H, I] transposed.
      const at::Tensor& down = ps.slots_[i + 1].leaf;
      const int64_t inter = spec.shape[2] / 2;
      for (int64_t e = 0; e < spec.shape[0]; ++e) {
        const std::string p = spec.hf_prefix + std::to_string(e) + ".";
        add(p + "gate_proj.weight", leaf.select(0, e).narrow(1, 0, inter).t(), i);
        add(p + "up_proj.weight", leaf.select(0, e).narrow(1, inter, inter).t(), i);
        add(p + "down_proj.weight", down.select(0, e).t(), i + 1);
      }
    }  // kExpertsDown: its views were added with the gate_up slot.
  }
  return ps;
}

int64_t ParameterSet::numel() const {
  int64_t n = 0;
  for (const Slot& s : slots_) n += s.leaf.numel();
  return n;
}

const at::Tensor* ParameterSet::Find(std::string_view name) const {
  auto it = named_index_.find(name);
  return it == named_index_.end() ? nullptr : &named_[static_cast<size_t>(it->second)].view;
}

const at::Tensor& ParameterSet::Leaf(std::string_view slot_name) const {
  auto it = slot_index_.find(slot_name);
  TORCH_CHECK(it != slot_index_.end(), "ParameterSet: no slot ", std::string(slot_name));
  return slots_[static_cast<size_t>(it->second)].leaf;
}

void ParameterSet::EnableGrad() {
  if (grad_enabled()) return;
  for (const at::Tensor& b : buffers_) grad_buffers_.push_back(at::zeros_like(b));
  for (Slot& s : slots_) {
    const at::Tensor& g = grad_buffers_[static_cast<size_t>(s.buffer)];
    s.leaf.requires_grad_(true);
    s.leaf.mutable_grad() = g.as_strided(s.leaf.sizes(), s.leaf.strides(), s.leaf.storage_offset());
  }
}

void ParameterSet::ZeroGrad() {
  for (at::Tensor& g : grad_buffers_) g.zero_();
}

at::Tensor ParameterSet::Grad(std::string_view name) const {
  auto it = named_index_.find(name);
  if (!grad_enabled() || it == named_index_.end()) return {};
  const Named& n = named_[static_cast<size_t>(it->second)];
  const at::Tensor& g = grad_buffers_[static_cast<size_t>(slots_[static_cast<size_t>(n.slot)].buffer)];
  return g.as_strided(n.view.sizes(), n.view.strides(), n.view.storage_offset());
}

}  // namespace tandem::model
