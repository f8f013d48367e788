// Helpers shared by the model tests: tiny configs, random parameters with a
// float64 copy, and an independent float64 reference of the whole model
// written with plain LibTorch ops — one sequence at a time, dense causal
// attention with repeated kv heads, the MoE as a per-token loop over the
// chosen experts (HF's Qwen3-MoE math), HF names for every weight.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/testing/compare.h"
#include "workers/model/config.h"
#include "workers/model/transformer.h"

namespace tandem::model::testing {

using kernels::testing::Tolerance;

// hidden 64, 4 heads / 2 kv heads, head_dim 16, vocab 300; MoE: 8 experts
// top-2 (renormalised), every layer MoE except layer 1 (mlp_only_layers)
// when there are 3 layers or more.
inline ModelConfig TinyConfig(bool moe, int64_t layers = 2, bool tied = false) {
  ModelConfig c = DefaultConfig(moe ? Architecture::kQwen3Moe : Architecture::kQwen3);
  c.vocab_size = 300;
  c.hidden_size = 64;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 96;
  c.max_position_embeddings = 512;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  if (moe) {
    c.num_experts = 8;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 32;
    c.norm_topk_prob = true;
    c.decoder_sparse_step = 1;
    c.mlp_only_layers = layers >= 3 ? std::vector<int64_t>{1} : std::vector<int64_t>{};
    c.router_aux_loss_coef = 0.01;
  }
  EXPECT_TRUE(ValidateModelConfig(c).ok()) << ValidateModelConfig(c).ToString();
  return c;
}

inline std::unique_ptr<Transformer> MakeModel(const ModelConfig& c) {
  auto m = Transformer::Create(c, at::Device(at::kCPU), at::kFloat);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// Fills every parameter with random values (norm weights near 1, linear
// weights ~ 1/sqrt(fan_in), embeddings ~ 0.5: logits of a few units, so
// the distributions are neither flat nor one-hot) and returns their float64 copies
// under HF names (leaves requiring grad).
inline std::map<std::string, at::Tensor> RandomizeParameters(Transformer& model, uint64_t seed) {
  at::NoGradGuard no_grad;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::map<std::string, at::Tensor> ref;
  for (const ParameterSet::Named& n : model.parameters().named()) {
    at::Tensor t = at::empty(n.view.sizes(), at::TensorOptions().dtype(at::kDouble));
    double* p = t.data_ptr<double>();
    const bool norm = n.name.find("norm.weight") != std::string::npos;
    const bool embed = n.name.find("embed_tokens") != std::string::npos;
    const double scale = norm ? 0.1 : embed ? 0.5 : 1.0 / std::sqrt(static_cast<double>(n.view.size(1)));
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = (norm ? 1.0 : 0.0) + scale * normal(rng);
    n.view.copy_(t);
    ref[n.name] = n.view.to(at::kDouble).contiguous().detach().requires_grad_(true);  // the rounded values
  }
  return ref;
}

inline at::Tensor RefRms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return w * x * at::rsqrt(x.pow(2).mean(-1, true) + eps);
}

struct RefOutput {
  at::Tensor logits;                    // [L, V] float64
  std::vector<at::Tensor> router_prob;  // per MoE layer [L, E]
  std::vector<at::Tensor> router_top;   // per MoE layer [L, k] int64
  double min_margin = INFINITY;         // smallest gap between the k-th and (k+1)-th router prob
};

// The whole model on one sequence, positions 0..L-1.
inline RefOutput ReferenceForward(const ModelConfig& c, const std::map<std::string, at::Tensor>& w,
                                  const std::vector<int32_t>& seq) {
  const int64_t n = static_cast<int64_t>(seq.size()), d = c.head_dim, hq = c.num_attention_heads,
                hkv = c.num_key_value_heads;
  auto W = [&](const std::string& name) -> const at::Tensor& { return w.at(name); };
  std::vector<int64_t> ids(seq.begin(), seq.end());
  const at::Tensor tokens = at::tensor(ids, at::TensorOptions().dtype(at::kLong));
  at::Tensor x = W("model.embed_tokens.weight").index_select(0, tokens);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor inv = at::pow(c.rope_theta, -at::arange(0, d, 2, f64) / static_cast<double>(d));
  const at::Tensor ang = at::arange(n, f64).unsqueeze(1) * inv.unsqueeze(0);
  const at::Tensor cos = at::cat({ang, ang}, 1).cos().unsqueeze(1), sin = at::cat({ang, ang}, 1).sin().unsqueeze(1);
  auto rope = [&](const at::Tensor& t) {
    const at::Tensor rot = at::cat({-t.narrow(2, d / 2, d / 2), t.narrow(2, 0, d / 2)}, 2);
    return t * cos + rot * sin;
  };
  const at::Tensor causal = at::ones({n, n}, at::TensorOptions().dtype(at::kBool)).tril();
  RefOutput out;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    at::Tensor h = RefRms(x, W(p + "input_layernorm.weight"), c.rms_norm_eps);
    at::Tensor q = at::matmul(h, W(p + "self_attn.q_proj.weight").t()).view({n, hq, d});
    at::Tensor k = at::matmul(h, W(p + "self_attn.k_proj.weight").t()).view({n, hkv, d});
    const at::Tensor v = at::matmul(h, W(p + "self_attn.v_proj.weight").t()).view({n, hkv, d});
    q = rope(RefRms(q, W(p + "self_attn.q_norm.weight"), c.rms_norm_eps));
    k = rope(RefRms(k, W(p + "self_attn.k_norm.weight"), c.rms_norm_eps));
    std::vector<at::Tensor> heads;
    for (int64_t head = 0; head < hq; ++head) {
      const int64_t kv = head / (hq / hkv);
      at::Tensor s = at::matmul(q.select(1, head), k.select(1, kv).t()) / std::sqrt(static_cast<double>(d));
      s = s.masked_fill(causal.logical_not(), -INFINITY);
      heads.push_back(at::matmul(at::softmax(s, 1), v.select(1, kv)));
    }
    x = x + at::matmul(at::stack(heads, 1).reshape({n, hq * d}), W(p + "self_attn.o_proj.weight").t());
    h = RefRms(x, W(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
    auto swiglu = [&](const at::Tensor& a, const std::string& mp) {
      return at::matmul(at::silu(at::matmul(a, W(mp + "gate_proj.weight").t())) *
                            at::matmul(a, W(mp + "up_proj.weight").t()),
                        W(mp + "down_proj.weight").t());
    };
    if (c.IsMoeLayer(l)) {
      const at::Tensor prob = at::softmax(at::matmul(h, W(p + "mlp.gate.weight").t()), 1);
      const auto sorted = std::get<0>(at::sort(prob.detach(), 1, /*descending=*/true));
      const int64_t kk = c.num_experts_per_tok;
      if (kk < c.num_experts)
        out.min_margin = std::min(out.min_margin, (sorted.select(1, kk - 1) - sorted.select(1, kk)).min().item<double>());
      auto [top_w, top_i] = at::topk(prob, kk, 1);
      if (c.norm_topk_prob) top_w = top_w / top_w.sum(1, true);
      std::vector<at::Tensor> rows;
      for (int64_t t = 0; t < n; ++t) {
        at::Tensor y = at::zeros({c.hidden_size}, f64);
        for (int64_t j = 0; j < kk; ++j) {
          const int64_t e = top_i[t][j].item<int64_t>();
          y = y + top_w[t][j] * swiglu(h[t], p + "mlp.experts." + std::to_string(e) + ".");
        }
        rows.push_back(y);
      }
      x = x + at::stack(rows, 0);
      out.router_prob.push_back(prob);
      out.router_top.push_back(top_i);
    } else {
      x = x + swiglu(h, p + "mlp.");
    }
  }
  x = RefRms(x, W("model.norm.weight"), c.rms_norm_eps);
  const at::Tensor& head = W(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  out.logits = at::matmul(x, head.t());
  return out;
}

// HF's load_balancing_loss_func over the concatenated router outputs.
inline at::Tensor ReferenceAuxLoss(const std::vector<RefOutput>& outs, int64_t num_experts) {
  std::vector<at::Tensor> probs, tops;
  for (const auto& o : outs)
    for (size_t i = 0; i < o.router_prob.size(); ++i) probs.push_back(o.router_prob[i]), tops.push_back(o.router_top[i]);
  if (probs.empty()) return at::zeros({}, at::TensorOptions().dtype(at::kDouble));
  const at::Tensor p = at::cat(probs, 0), top = at::cat(tops, 0);
  const at::Tensor mask = at::one_hot(top, num_experts).to(at::kDouble);  // [N, k, E]
  const at::Tensor tokens_per_expert = mask.mean(0);                       // [k, E]
  const at::Tensor prob_per_expert = p.mean(0);                            // [E]
  return (tokens_per_expert * prob_per_expert.unsqueeze(0)).sum() * static_cast<double>(num_experts);
}

inline std::string Close(const at::Tensor& out, const at::Tensor& ref, Tolerance tol) {
  if (!out.defined() || !ref.defined()) return "undefined tensor";
  if (out.sizes() != ref.sizes()) return "shape mismatch";
  const at::Tensor o = out.detach().to(at::kFloat).contiguous();
  const at::Tensor r = ref.detach().to(at::kFloat).contiguous();
  return kernels::testing::CheckClose(o.data_ptr<float>(), r.data_ptr<float>(), static_cast<size_t>(o.numel()), tol);
}

inline double Rms(const at::Tensor& t) {
  return t.numel() == 0 ? 0.0 : t.detach().to(at::kDouble).pow(2).mean().sqrt().item<double>();
}

// Random token sequences of the given lengths.
inline std::vector<std::vector<int32_t>> RandomSequences(std::mt19937_64& rng, const std::vector<int>& lengths,
                                                         int64_t vocab) {
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::vector<std::vector<int32_t>> out;
  for (int len : lengths) {
    std::vector<int32_t> s;
    for (int i = 0; i < len; ++i) s.push_back(tok(rng));
    out.push_back(s);
  }
  return out;
}

}  // namespace tandem::model::testing
