// The causal LM (transformer.h): one decoder-layer body for both input
// forms; they differ only in how attention sees the other tokens (tree
// attention over the forest, or the cache) and in the LM head.
#include "workers/model/transformer.h"

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <c10/core/GradMode.h>
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <functional>
#include <string>

#include "workers/ops/decode_glue.h"
#include "workers/ops/lm_head_loss_op.h"
#include "workers/ops/paged_attention_op.h"

namespace tandem::model {

struct Transformer::LayerWeights {
  at::Tensor input_norm, post_norm;
  AttentionWeights attn;
  bool moe = false;
  at::Tensor gate, up, down;                // dense
  at::Tensor router, w_gate_up, w_down;     // MoE
  // q/k/v and gate/up as one matrix each ([(Hq + 2 Hkv) D, H], [2I, H]),
  // views of the same bytes with no autograd history, for the no-grad
  // decode step (one GEMM instead of three and two); undefined when the
  // slots are not back to back in the parameter buffer.
  at::Tensor qkv, gate_up;
};

namespace {

// The residual stream between layers: x plus the last layer's MLP output
// `delta`, not yet added (undefined before the first layer). The next
// norm adds it in its own kernel (AddRmsNorm), so no layer ends with an add.
struct Residual {
  at::Tensor x, delta;
};

// The residual stream summed and normalised by `weight`.
ResidualNorm NormResidual(const Residual& r, const at::Tensor& weight, double eps) {
  if (r.delta.defined()) return AddRmsNorm(r.x, r.delta, weight, eps);
  return {r.x, RmsNorm(r.x, weight, eps)};
}

// A layer's attention: its normed input [N, H] -> [N, Hq, D].
using Attention = std::function<at::Tensor(const at::Tensor&)>;

// The attention training uses: q/k/v projected by ProjectQkv, then
// `attend`; the layer's Qkv kept in *qkv_out when given.
Attention Projected(const ModelConfig& c, const AttentionWeights& w, const RotaryAngles& angles,
                    std::function<at::Tensor(const Qkv&)> attend, Qkv* qkv_out = nullptr) {
  return [&c, &w, &angles, attend = std::move(attend), qkv_out](const at::Tensor& h) {
    const AttentionShape shape{c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rms_norm_eps};
    Qkv qkv = ProjectQkv(h, w, shape, angles);
    at::Tensor out = attend(qkv);
    if (qkv_out) *qkv_out = std::move(qkv);
    return out;
  };
}

// Runs a decoder layer on the residual stream ([N, H] each).
Residual DecoderLayer(const ModelConfig& c, const Residual& in, const Attention& attention,
                      const AttentionWeights& attn_w, const at::Tensor& input_norm, const at::Tensor& post_norm,
                      const std::function<at::Tensor(const at::Tensor&)>& mlp) {
  const ResidualNorm x = NormResidual(in, input_norm, c.rms_norm_eps);
  const ResidualNorm h = AddRmsNorm(x.sum, OutputProjection(attention(x.normed), attn_w), post_norm, c.rms_norm_eps);
  return {h.sum, mlp(h.normed)};
}

// A layer's MLP: dense SwiGLU, or the MoE block, whose router statistics are
// appended to `router` (the output's, in layer order). W is the layer's
// weights (Transformer::LayerWeights, private to the class).
template <typename W>
at::Tensor LayerMlp(const ModelConfig& c, const W& w, const at::Tensor& h, std::vector<RouterStats>& router) {
  if (!w.moe) return DenseMlp(h, w.gate, w.up, w.down);
  MoeMlpOutput m = MoeMlp(h, w.router, w.w_gate_up, w.w_down, c.num_experts_per_tok, c.norm_topk_prob);
  router.push_back(std::move(m.stats));
  return m.out;
}

// `parts` ([r_i, C] each) as one [sum r_i, C] matrix when they lie back to
// back in one storage (the parameter buffer lays slots out in HF's order,
// q, k, v and gate, up adjacent, at 256-byte offsets that leave no gap when
// each slot's bytes are a multiple of 256); else undefined. No autograd
// history: for no-grad use only.
at::Tensor Adjacent(std::initializer_list<at::Tensor> parts) {
  const at::Tensor& first = *parts.begin();
  int64_t rows = 0;
  const char* next = static_cast<const char*>(first.data_ptr());
  for (const at::Tensor& p : parts) {
    if (p.dim() != 2 || !p.is_contiguous() || p.size(1) != first.size(1) || !p.storage().is_alias_of(first.storage()) ||
        static_cast<const char*>(p.data_ptr()) != next)
      return {};
    rows += p.size(0);
    next += p.nbytes();
  }
  return first.detach().as_strided({rows, first.size(1)}, {first.size(1), 1});
}

}  // namespace

Transformer::Transformer(ModelConfig config, at::Device device, at::ScalarType dtype)
    : config_(std::move(config)), device_(device), dtype_(dtype) {}

Transformer::~Transformer() = default;

StatusOr<std::unique_ptr<Transformer>> Transformer::Create(const ModelConfig& config, at::Device device,
                                                           at::ScalarType dtype, const at::Tensor& parameter_buffer) {
  TANDEM_RETURN_IF_ERROR(ValidateModelConfig(config), "model");
  const bool cpu_ok = device.is_cpu() && dtype == at::kFloat;
#ifdef TANDEM_TORCH_CUDA
  const bool cuda_ok = device.is_cuda() && dtype == at::kBFloat16;
#else
  const bool cuda_ok = false;
#endif
  if (!cpu_ok && !cuda_ok)
    return InvalidArgument(std::string("model: unsupported device ") + device.str() + " with dtype " +
                           c10::toString(dtype) +
                           "; supported: cpu with Float"
#ifdef TANDEM_TORCH_CUDA
                           ", cuda with BFloat16"
#else
                           " (this build has no CUDA path)"
#endif
    );
  if (parameter_buffer.defined()) {
    const int64_t need = ParameterSet::BufferNumel(config, dtype);
    if (parameter_buffer.dim() != 1 || !parameter_buffer.is_contiguous() || parameter_buffer.scalar_type() != dtype ||
        parameter_buffer.device() != device || parameter_buffer.numel() < need)
      return InvalidArgument("model: the parameter buffer is not a flat " + std::string(c10::toString(dtype)) +
                             " tensor on " + device.str() + " of at least " + std::to_string(need) + " elements");
  }
  std::unique_ptr<Transformer> m(new Transformer(config, device, dtype));
  m->params_ = ParameterSet::Create(config, device, dtype, parameter_buffer);
  m->inv_freq_ = RotaryInvFreq(config.head_dim, config.rope_theta, device);
  const ParameterSet& p = m->params_;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    auto w = std::make_unique<LayerWeights>();
    w->input_norm = p.Leaf(pre + "input_layernorm.weight");
    w->post_norm = p.Leaf(pre + "post_attention_layernorm.weight");
    w->attn = {p.Leaf(pre + "self_attn.q_proj.weight"), p.Leaf(pre + "self_attn.k_proj.weight"),
               p.Leaf(pre + "self_attn.v_proj.weight"), p.Leaf(pre + "self_attn.o_proj.weight"),
               p.Leaf(pre + "self_attn.q_norm.weight"), p.Leaf(pre + "self_attn.k_norm.weight")};
    w->moe = config.IsMoeLayer(l);
    if (w->moe) {
      w->router = p.Leaf(pre + "mlp.gate.weight");
      w->w_gate_up = p.Leaf(pre + "mlp.experts.w_gate_up");
      w->w_down = p.Leaf(pre + "mlp.experts.w_down");
    } else {
      w->gate = p.Leaf(pre + "mlp.gate_proj.weight");
      w->up = p.Leaf(pre + "mlp.up_proj.weight");
      w->down = p.Leaf(pre + "mlp.down_proj.weight");
      w->gate_up = Adjacent({w->gate, w->up});
    }
    w->qkv = Adjacent({w->attn.q_proj, w->attn.k_proj, w->attn.v_proj});
    m->layers_.push_back(std::move(w));
  }
  return m;
}

const Transformer::LayerWeights& Transformer::Layer(int64_t l) const { return *layers_[static_cast<size_t>(l)]; }

at::Tensor Transformer::HeadWeight() const {
  return params_.Leaf(config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
}

void Transformer::InitRandom(uint64_t seed, double std) {
  c10::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const ParameterSet::Slot& s : params_.slots()) {
    const bool norm = s.name.size() >= 11 && s.name.compare(s.name.size() - 11, 11, "norm.weight") == 0;
    at::Tensor v = at::empty(s.leaf.sizes(), at::TensorOptions().dtype(at::kFloat));
    if (norm) v.fill_(1.0);
    else v.normal_(0.0, std, gen);
    s.leaf.copy_(v);
  }
}

at::Tensor Transformer::Embed(const at::Tensor& tokens, const char* fn) const {
  TORCH_CHECK(tokens.defined() && tokens.dim() == 1 && tokens.scalar_type() == at::kLong, fn,
              ": tokens must be int64 [N]");
  TORCH_CHECK(tokens.device() == device_, fn, ": tokens must be on ", device_, ", got ", tokens.device());
  return at::embedding(params_.Leaf("model.embed_tokens.weight"), tokens);
}

void Transformer::TopLogprobs(const at::Tensor& rows, const at::Tensor& pair_head, const ForwardOptions& options,
                              ForestOutput& out) const {
  TORCH_CHECK(options.top_k <= config_.vocab_size, "Transformer::Forward: top_k ", options.top_k,
              " exceeds the vocabulary (", config_.vocab_size, ")");
  std::vector<at::Tensor> values, ids;
  for (int64_t start = 0; start < rows.size(0); start += options.chunk_rows) {
    const int64_t n = std::min(options.chunk_rows, rows.size(0) - start);
    const at::Tensor logits = at::linear(rows.narrow(0, start, n), HeadWeight()).to(at::kFloat).div_(options.temperature);
    auto [v, i] = at::log_softmax(logits, -1).topk(options.top_k, -1);
    values.push_back(v);
    ids.push_back(i);
  }
  out.top_logprobs = at::cat(values).index_select(0, pair_head);
  out.top_ids = at::cat(ids).index_select(0, pair_head);
}

ForestOutput Transformer::Forward(const ForestBatch& batch, const ForwardOptions& options) const {
  constexpr const char* kFn = "Transformer::Forward";
  TORCH_CHECK(batch.forest, kFn, ": the batch has no forest");
  TORCH_CHECK(batch.num_tokens() == batch.forest->num_tokens(), kFn, ": ", batch.num_tokens(),
              " tokens for a forest of ", batch.forest->num_tokens());
  TORCH_CHECK(batch.positions.sizes() == batch.tokens.sizes() && batch.positions.device() == device_, kFn,
              ": positions must be int64 [T] on ", device_);
  TORCH_CHECK(options.temperature > 0 && options.chunk_rows > 0, kFn, ": temperature and chunk_rows must be > 0");
  const ModelConfig& c = config_;
  ForestOutput out;
  Residual x{Embed(batch.tokens, kFn), {}};
  const RotaryAngles angles = RotaryCosSin(inv_freq_, batch.positions, dtype_);
  auto attend = [&](const Qkv& qkv) { return ForestAttention(qkv, batch.forest); };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = Layer(l);
    auto mlp = [&](const at::Tensor& h) { return LayerMlp(c, w, h, out.router); };
    Qkv qkv;
    x = DecoderLayer(c, x, Projected(c, w.attn, angles, attend, options.return_kv ? &qkv : nullptr), w.attn,
                     w.input_norm, w.post_norm, mlp);
    if (options.return_kv) {
      out.keys.push_back(qkv.k);
      out.values.push_back(qkv.v);
    }
  }
  const at::Tensor hidden = NormResidual(x, params_.Leaf("model.norm.weight"), c.rms_norm_eps).normed;
  if (options.return_hidden) out.hidden = hidden;
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device_);
  if (batch.num_pairs() == 0) {
    TORCH_CHECK(!options.extra_pairs.defined() || options.extra_pairs.numel() == 0, kFn,
                ": extra_pairs for a batch without pairs");
    out.logprob = at::empty({0}, f32);
    out.entropy = at::empty({0}, f32);
    if (options.extra_pairs.defined()) out.extra_logprob = at::empty({0}, f32);
    return out;
  }
  TORCH_CHECK(batch.head_rows.device() == device_ && batch.pair_head.device() == device_ &&
                  batch.labels.device() == device_,
              kFn, ": head_rows, pair_head and labels must be on ", device_);
  const at::Tensor rows = hidden.index_select(0, batch.head_rows);
  at::Tensor pair_head = batch.pair_head, labels = batch.labels;
  const bool extra = options.extra_pairs.defined() || options.extra_labels.defined();
  if (extra) {
    const at::Tensor& ep = options.extra_pairs;
    const at::Tensor& el = options.extra_labels;
    TORCH_CHECK(ep.defined() && el.defined() && ep.dim() == 1 && ep.sizes() == el.sizes() &&
                    ep.scalar_type() == at::kLong && el.scalar_type() == at::kLong,
                kFn, ": extra_pairs and extra_labels must both be int64 [E]");
    TORCH_CHECK(ep.device() == device_ && el.device() == device_, kFn, ": extra_pairs and extra_labels must be on ",
                device_);
    if (ep.numel() > 0) {
      TORCH_CHECK(ep.min().item<int64_t>() >= 0 && ep.max().item<int64_t>() < batch.num_pairs(), kFn,
                  ": extra_pairs must index the batch's ", batch.num_pairs(), " pairs");
      TORCH_CHECK(el.min().item<int64_t>() >= 0 && el.max().item<int64_t>() < config_.vocab_size, kFn,
                  ": extra_labels must lie in [0, ", config_.vocab_size, ")");
    }
    pair_head = at::cat({pair_head, pair_head.index_select(0, ep)});
    labels = at::cat({labels, el});
  }
  const ops::LmHeadLossOutput head =
      ops::LmHeadLoss(rows, HeadWeight(), pair_head, labels, options.temperature, options.chunk_rows);
  const int64_t m = batch.num_pairs();
  out.logprob = extra ? head.logprob.narrow(0, 0, m) : head.logprob;
  if (extra) out.extra_logprob = head.logprob.narrow(0, m, head.logprob.size(0) - m);
  out.entropy = head.entropy.index_select(0, batch.pair_head);
  if (options.top_k > 0) TopLogprobs(rows, batch.pair_head, options, out);
  return out;
}

DecodeOutput Transformer::Decode(const at::Tensor& tokens, const at::Tensor& positions, const KvCache& cache) const {
  constexpr const char* kFn = "Transformer::Decode";
  const ModelConfig& c = config_;
  Residual x{Embed(tokens, kFn), {}};
  const int64_t b = tokens.size(0);
  TORCH_CHECK(positions.sizes() == tokens.sizes() && positions.scalar_type() == at::kLong &&
                  positions.device() == device_,
              kFn, ": positions must be int64 [B] on ", device_);
  TORCH_CHECK(static_cast<int64_t>(cache.keys.size()) == c.num_hidden_layers &&
                  cache.values.size() == cache.keys.size(),
              kFn, ": the cache must hold keys and values for ", c.num_hidden_layers, " layers");
  TORCH_CHECK(cache.lengths.defined() && cache.lengths.sizes() == at::IntArrayRef({b}) &&
                  cache.lengths.device() == device_,
              kFn, ": cache.lengths must be int64 [", b, "] on ", device_);
  const int64_t past = cache.capacity();
  // Row b sees its first lengths[b] cached entries and itself (index past).
  const at::Tensor idx = at::arange(past + 1, cache.lengths.options()).unsqueeze(0);
  const at::Tensor visible = idx.lt(cache.lengths.unsqueeze(1)).logical_or(idx.eq(past));
  const RotaryAngles angles = RotaryCosSin(inv_freq_, positions, dtype_);
  DecodeOutput out;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = Layer(l);
    const at::Tensor& pk = cache.keys[static_cast<size_t>(l)];
    const at::Tensor& pv = cache.values[static_cast<size_t>(l)];
    TORCH_CHECK(pk.dim() == 4 && pk.size(0) == b && pk.size(1) == past && pk.size(2) == c.num_key_value_heads &&
                    pk.size(3) == c.head_dim && pv.sizes() == pk.sizes() && pk.device() == device_ &&
                    pk.scalar_type() == dtype_ && pv.scalar_type() == dtype_,
                kFn, ": cache layer ", l, " must be [", b, ", ", past, ", ", c.num_key_value_heads, ", ",
                c.head_dim, "] of ", dtype_, " on ", device_, ", got ", pk.sizes());
    auto attend = [&](const Qkv& qkv) {
      const at::Tensor keys = at::cat({pk, qkv.k.unsqueeze(1)}, 1);
      const at::Tensor values = at::cat({pv, qkv.v.unsqueeze(1)}, 1);
      return DecodeAttention(qkv.q, keys, values, visible);
    };
    auto mlp = [&](const at::Tensor& h) { return LayerMlp(c, w, h, out.router); };
    Qkv qkv;
    x = DecoderLayer(c, x, Projected(c, w.attn, angles, attend, &qkv), w.attn, w.input_norm, w.post_norm, mlp);
    out.new_keys.push_back(qkv.k);
    out.new_values.push_back(qkv.v);
  }
  const at::Tensor hidden = NormResidual(x, params_.Leaf("model.norm.weight"), c.rms_norm_eps).normed;
  out.logits = at::linear(hidden, HeadWeight()).to(at::kFloat);
  return out;
}

DecodeOutput Transformer::DecodePaged(const at::Tensor& tokens, const at::Tensor& positions, const PagedKv& kv,
                                      bool all_logits) const {
  constexpr const char* kFn = "Transformer::DecodePaged";
  const ModelConfig& c = config_;
  TORCH_CHECK(positions.sizes() == tokens.sizes() && positions.scalar_type() == at::kLong &&
                  positions.device() == device_,
              kFn, ": positions must be int64 [T] on ", device_);
  TORCH_CHECK(static_cast<int64_t>(kv.key_blocks.size()) == c.num_hidden_layers &&
                  kv.value_blocks.size() == kv.key_blocks.size(),
              kFn, ": kv must hold key and value blocks for ", c.num_hidden_layers, " layers");
  TORCH_CHECK(kv.q_lens.defined() && kv.q_lens.dim() == 1 && kv.slot_mapping.defined() &&
                  kv.slot_mapping.sizes() == tokens.sizes(),
              kFn, ": kv.q_lens must be [B] and kv.slot_mapping [T] for ", tokens.size(0), " tokens");
  // q_starts before the embedding, once for every layer: an ordinary
  // kernel then runs between its writes and the layers' dependent
  // launches, which under a clustered paged-attention plan read it before
  // waiting (kernels/paged_attention/paged_attention_cuda.h).
  const at::Tensor q_starts = ops::QueryStarts(kv.q_lens);
  Residual x{Embed(tokens, kFn), {}};
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  const RotaryAngles angles = RotaryCosSin(inv_freq_, positions, dtype_);
  DecodeOutput out;
  // No grad (the engine): each norm fused into the projection after it,
  // SwiGLU into gate/up, q/k norm, rotary and the cache write into one
  // kernel (ops/decode_glue.h): at batch 1 a layer is six kernels and
  // attention. With grad, the ops training uses.
  const bool fused = !c10::GradMode::is_enabled() && FusedNormWidth(c.hidden_size);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = Layer(l);
    const at::Tensor& kb = kv.key_blocks[static_cast<size_t>(l)];
    const at::Tensor& vb = kv.value_blocks[static_cast<size_t>(l)];
    if (fused && w.qkv.defined()) {
      const ops::NormLinearOutput a = ops::NormLinear(x.x, x.delta, w.input_norm, c.rms_norm_eps, w.qkv, false);
      const at::Tensor q = ops::QkvRotaryKvWrite(a.y, w.attn.q_norm, w.attn.k_norm, angles.cos, angles.sin, kb, vb,
                                                 kv.slot_mapping, c.num_attention_heads, c.rms_norm_eps);
      const at::Tensor attn = ops::PagedAttention(q, kb, vb, kv.block_table, kv.context_lens, q_starts, scale);
      const at::Tensor o = ops::DecodeLinear(attn.reshape({attn.size(0), -1}), w.attn.o_proj);
      if (w.gate_up.defined()) {
        const ops::NormLinearOutput m = ops::NormLinear(a.sum, o, w.post_norm, c.rms_norm_eps, w.gate_up, true);
        x = {m.sum, ops::DecodeLinear(m.y, w.down)};
      } else {
        const ResidualNorm h = AddRmsNorm(a.sum, o, w.post_norm, c.rms_norm_eps);
        x = {h.sum, LayerMlp(c, w, h.normed, out.router)};
      }
      continue;
    }
    auto attend = [&](const Qkv& qkv) {
      ops::PagedKvWrite(qkv.k, qkv.v, kb, vb, kv.slot_mapping);
      return ops::PagedAttention(qkv.q, kb, vb, kv.block_table, kv.context_lens, q_starts, scale);
    };
    auto mlp = [&](const at::Tensor& h) { return LayerMlp(c, w, h, out.router); };
    x = DecoderLayer(c, x, Projected(c, w.attn, angles, attend), w.attn, w.input_norm, w.post_norm, mlp);
  }
  // Each sequence's last new token: row q_starts[b + 1] - 1.
  // T == B: every sequence fed one token (q_lens >= 1 each, summing to T),
  // so every row is its sequence's last: no gather (a decode step).
  if (!all_logits && tokens.size(0) != kv.batch()) {
    const at::Tensor last = q_starts.narrow(0, 1, q_starts.size(0) - 1).to(at::kLong) - 1;
    x = {x.x.index_select(0, last), x.delta.defined() ? x.delta.index_select(0, last) : at::Tensor()};
  }
  const at::Tensor& final_norm = params_.Leaf("model.norm.weight");
  if (fused) {
    out.logits = ops::NormLinear(x.x, x.delta, final_norm, c.rms_norm_eps, HeadWeight(), false).y.to(at::kFloat);
    return out;
  }
  const at::Tensor hidden = NormResidual(x, final_norm, c.rms_norm_eps).normed;
  out.logits = at::linear(hidden, HeadWeight()).to(at::kFloat);
  return out;
}

}  // namespace tandem::model
