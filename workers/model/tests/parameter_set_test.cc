// ParameterSet (workers/model/parameter_set.h): HF names in checkpoint
// order, every named view and slot aliasing the one contiguous buffer at
// 256-byte aligned, non-overlapping offsets, expert views as strided slices
// of the kernel-layout slots, and gradients accumulating in place into the
// flat gradient buffer.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>

#include "workers/model/tests/model_test_util.h"

namespace tandem::model::testing {
namespace {

bool Aliases(const at::Tensor& view, const at::Tensor& buffer) {
  const auto* lo = static_cast<const char*>(buffer.data_ptr());
  const auto* hi = lo + buffer.numel() * static_cast<int64_t>(buffer.element_size());
  const auto* p = static_cast<const char*>(view.data_ptr());
  return view.storage().is_alias_of(buffer.storage()) && p >= lo && p < hi;
}

TEST(ParameterSet, HfNamesInCheckpointOrder) {
  ModelConfig c = TinyConfig(/*moe=*/true, /*layers=*/3);
  c.num_experts = 2;
  c.num_experts_per_tok = 1;
  const ParameterSet ps = ParameterSet::Create(c, at::Device(at::kCPU), at::kFloat);
  std::vector<std::string> want{"model.embed_tokens.weight"};
  for (int l = 0; l < 3; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight", "self_attn.o_proj.weight", "self_attn.q_norm.weight",
                          "self_attn.k_norm.weight", "post_attention_layernorm.weight"})
      want.push_back(p + n);
    if (l == 1) {  // mlp_only_layers
      for (const char* n : {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) want.push_back(p + n);
    } else {
      want.push_back(p + "mlp.gate.weight");
      for (int e = 0; e < 2; ++e)
        for (const char* n : {"gate_proj", "up_proj", "down_proj"})
          want.push_back(p + "mlp.experts." + std::to_string(e) + "." + n + ".weight");
    }
  }
  want.push_back("model.norm.weight");
  want.push_back("lm_head.weight");
  std::vector<std::string> got;
  for (const auto& n : ps.named()) got.push_back(n.name);
  EXPECT_EQ(got, want);
  EXPECT_EQ(ps.Find("model.layers.0.mlp.experts.1.down_proj.weight")->sizes(),
            at::IntArrayRef({c.hidden_size, c.moe_intermediate_size}));
  EXPECT_EQ(ps.Find("model.layers.0.mlp.experts.1.up_proj.weight")->sizes(),
            at::IntArrayRef({c.moe_intermediate_size, c.hidden_size}));
  EXPECT_EQ(ps.Find("model.layers.1.mlp.gate.weight"), nullptr);
  EXPECT_EQ(ps.Find("nope"), nullptr);
  EXPECT_EQ(ps.numel(), c.NumParameters());

  c.tie_word_embeddings = true;
  const ParameterSet tied = ParameterSet::Create(c, at::Device(at::kCPU), at::kFloat);
  EXPECT_EQ(tied.Find("lm_head.weight"), nullptr);
  EXPECT_EQ(tied.size(), ps.size() - 1);
  EXPECT_EQ(tied.numel(), c.NumParameters());
}

TEST(ParameterSet, ViewsAliasOneAlignedBuffer) {
  const ModelConfig c = TinyConfig(true, 3);
  ParameterSet ps = ParameterSet::Create(c, at::Device(at::kCPU), at::kFloat);
  ASSERT_EQ(ps.buffers().size(), 1u);
  const at::Tensor& buf = ps.buffers()[0];
  EXPECT_TRUE(buf.is_contiguous());
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto& s : ps.slots()) {
    EXPECT_TRUE(Aliases(s.leaf, buf)) << s.name;
    EXPECT_TRUE(s.leaf.is_contiguous()) << s.name;
    EXPECT_EQ(s.leaf.storage_offset(), s.offset) << s.name;
    EXPECT_EQ(s.offset * 4 % 256, 0) << s.name;
    ranges.emplace_back(s.offset, s.offset + s.leaf.numel());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
  EXPECT_LE(ranges.back().second, buf.numel());
  for (const auto& n : ps.named()) EXPECT_TRUE(Aliases(n.view, buf)) << n.name;

  // Writing the buffer shows through the views; writing a view writes the slot.
  at::NoGradGuard no_grad;
  buf.copy_(at::arange(buf.numel(), buf.options()));
  const at::Tensor& wgu = ps.Leaf("model.layers.0.mlp.experts.w_gate_up");
  const at::Tensor& wd = ps.Leaf("model.layers.0.mlp.experts.w_down");
  const int64_t inter = c.moe_intermediate_size;
  for (int64_t e : {0, 5}) {
    const std::string p = "model.layers.0.mlp.experts." + std::to_string(e) + ".";
    EXPECT_TRUE(ps.Find(p + "gate_proj.weight")->equal(wgu[e].narrow(1, 0, inter).t()));
    EXPECT_TRUE(ps.Find(p + "up_proj.weight")->equal(wgu[e].narrow(1, inter, inter).t()));
    EXPECT_TRUE(ps.Find(p + "down_proj.weight")->equal(wd[e].t()));
  }
  ps.Find("model.layers.0.mlp.experts.3.up_proj.weight")->fill_(-7);
  EXPECT_TRUE(wgu[3].narrow(1, inter, inter).eq(-7).all().item<bool>());
  EXPECT_FALSE(wgu[3].narrow(1, 0, inter).eq(-7).any().item<bool>());
  ps.Find("model.norm.weight")->fill_(3);
  EXPECT_TRUE(ps.Leaf("model.norm.weight").eq(3).all().item<bool>());
}

TEST(ParameterSet, GradientsAccumulateIntoTheFlatBuffer) {
  const ModelConfig c = TinyConfig(true, 2);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  model->InitRandom(7);
  ParameterSet& ps = model->parameters();
  EXPECT_FALSE(ps.Grad("model.norm.weight").defined());
  ps.EnableGrad();
  ASSERT_EQ(ps.grad_buffers().size(), 1u);
  const at::Tensor& gbuf = ps.grad_buffers()[0];
  for (const auto& s : ps.slots()) EXPECT_TRUE(Aliases(s.leaf.grad(), gbuf)) << s.name;
  auto batch = BuildForestBatch({{1, 2, 3, 4, 5}, {1, 2, 9}}, {}, c.vocab_size, at::Device(at::kCPU));
  ASSERT_TRUE(batch.ok());
  const ForestOutput out = model->Forward(*batch);
  (out.logprob.sum() + LoadBalancingLoss(out.router, c.num_experts)).backward();
  const at::Tensor once = gbuf.clone();
  EXPECT_GT(once.abs().sum().item<double>(), 0);
  for (const auto& n : ps.named()) {
    const at::Tensor g = ps.Grad(n.name);
    EXPECT_TRUE(Aliases(g, gbuf)) << n.name;
    EXPECT_EQ(g.sizes(), n.view.sizes()) << n.name;
  }
  const at::Tensor up = ps.Grad("model.layers.1.mlp.experts.2.up_proj.weight");
  EXPECT_TRUE(up.equal(ps.Leaf("model.layers.1.mlp.experts.w_gate_up").grad()[2].narrow(1, c.moe_intermediate_size,
                                                                                           c.moe_intermediate_size).t()));
  // A second backward accumulates; ZeroGrad clears in place.
  const ForestOutput again = model->Forward(*batch);
  again.logprob.sum().backward();
  EXPECT_FALSE(gbuf.equal(once));
  ps.ZeroGrad();
  EXPECT_EQ(gbuf.abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(Aliases(ps.Leaf("model.norm.weight").grad(), gbuf));
}

}  // namespace
}  // namespace tandem::model::testing
