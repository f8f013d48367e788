// The actor's step: advantages, micro-batches, policy loss, update (grpo_trainer.h).
#include "workers/train/grpo_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "workers/data/microbatch_planner.h"
#include "workers/model/model_input.h"
#include "workers/rl/dynamic_sampling.h"
#include "workers/rl/groups.h"

namespace tandem::train {
namespace {

// Why trajectory `t` cannot be trained on, or "" when it can.
std::string Defect(const Trajectory& t, int64_t vocab) {
  if (t.prompt.empty()) return "an empty prompt";
  if (t.response.empty()) return "an empty response";
  for (const auto* ids : {&t.prompt, &t.response})
    for (const int32_t id : *ids)
      if (id < 0 || id >= vocab) return "token id " + std::to_string(id) + " outside [0, " + std::to_string(vocab) + ")";
  if (t.old_logprobs.size() != t.response.size())
    return std::to_string(t.old_logprobs.size()) + " old log-probs for " + std::to_string(t.response.size()) +
           " response tokens";
  for (const float lp : t.old_logprobs)
    if (!std::isfinite(lp)) return "a non-finite old log-prob";
  if (!std::isfinite(t.reward)) return "a non-finite reward";
  return "";
}

// A loss term of the policy loss's metrics ("pg_loss", "kl_loss", ...).
bool IsLoss(const std::string& k) { return k.size() > 5 && k.compare(k.size() - 5, 5, "_loss") == 0; }

// Sums metrics of micro-batches: losses add (batch normalisers), the rest
// are token-weighted means, ratio_max a max.
void Accumulate(const std::vector<std::pair<std::string, double>>& part, double tokens, std::map<std::string, double>& sum) {
  for (const auto& [k, v] : part) {
    if (k == "tokens") continue;
    if (IsLoss(k)) {
      sum[k] += v;
    } else if (k == "ratio_max") {
      sum[k] = sum.count(k) ? std::max(sum[k], v) : v;
    } else {
      sum[k] += v * tokens;
    }
  }
  sum["tokens"] += tokens;
}

}  // namespace

GrpoTrainer::GrpoTrainer(model::Transformer& model, GrpoTrainerOptions options, std::unique_ptr<AdamW> opt)
    : model_(model), options_(std::move(options)), opt_(std::move(opt)) {}
GrpoTrainer::~GrpoTrainer() = default;

StatusOr<std::unique_ptr<GrpoTrainer>> GrpoTrainer::Create(model::Transformer& model, const GrpoTrainerOptions& options) {
  TANDEM_RETURN_IF_ERROR(options.schedule.Validate(), "grpo trainer");
  TANDEM_RETURN_IF_ERROR(rl::Validate(options.algorithm.config), "grpo trainer: algorithm " + options.algorithm.name);
  if (!options.algorithm.loss) return InvalidArgument("grpo trainer: algorithm " + options.algorithm.name + " has no loss");
  if (options.micro_batch_tokens < 0) return InvalidArgument("grpo trainer: micro_batch_tokens must be >= 0");
  if (!(options.temperature > 0) || !std::isfinite(options.temperature))
    return InvalidArgument("grpo trainer: temperature must be a finite number > 0");
  if (options.algorithm.config.loss.kl_coef > 0) {
    if (!options.reference)
      return InvalidArgument("grpo trainer: algorithm " + options.algorithm.name + " has a KL term (kl_coef " +
                             std::to_string(options.algorithm.config.loss.kl_coef) + ") and needs a reference model");
    if (options.reference->config().vocab_size != model.config().vocab_size ||
        options.reference->parameters().numel() != model.parameters().numel())
      return InvalidArgument("grpo trainer: the reference model's shape differs from the trained model's");
  }
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<AdamW> opt, AdamW::Create(model.parameters(), options.adamw), "grpo trainer");
  return std::unique_ptr<GrpoTrainer>(new GrpoTrainer(model, options, std::move(opt)));
}

StatusOr<GrpoStepStats> GrpoTrainer::Step(const std::vector<Trajectory>& trajectories, double progress) {
  const std::string where = "grpo step " + std::to_string(steps());
  const rl::AlgorithmConfig& config = options_.algorithm.config;
  GrpoStepStats st;
  st.lr = options_.schedule.At(steps(), progress);

  // 1. The trajectories that can be trained on, in contiguous groups.
  std::vector<const Trajectory*> valid;
  std::vector<int64_t> run_sizes;
  std::vector<int64_t> seen_groups;
  for (size_t i = 0; i < trajectories.size(); ++i) {
    const Trajectory& t = trajectories[i];
    if (i > 0 && t.group != trajectories[i - 1].group) {
      if (std::find(seen_groups.begin(), seen_groups.end(), t.group) != seen_groups.end())
        return InvalidArgument(where + ": the trajectories of group " + std::to_string(t.group) + " are not contiguous");
    }
    if (i == 0 || t.group != trajectories[i - 1].group) seen_groups.push_back(t.group);
    if (std::string why = Defect(t, model_.config().vocab_size); !why.empty()) {
      st.dropped.push_back("trajectory " + std::to_string(i) + " (group " + std::to_string(t.group) + "): " + why);
      continue;
    }
    if (valid.empty() || valid.back()->group != t.group) run_sizes.push_back(0);
    ++run_sizes.back();
    valid.push_back(&t);
  }
  if (valid.empty()) return st;

  try {
    const int64_t n = static_cast<int64_t>(valid.size());
    std::vector<float> reward_values;
    std::vector<int64_t> lengths;
    for (const Trajectory* t : valid) {
      reward_values.push_back(static_cast<float>(t->reward));
      lengths.push_back(static_cast<int64_t>(t->response.size()));
    }
    at::Tensor rewards = at::tensor(reward_values);
    if (config.overlong) {
      TANDEM_ASSIGN_OR_RETURN(rewards, rl::ShapeOverlongRewards(rewards, at::tensor(lengths), *config.overlong), where);
    }
    st.reward_mean = rewards.mean().item<double>();
    st.reward_std = n > 1 ? rewards.std(/*unbiased=*/false).item<double>() : 0.0;
    TANDEM_ASSIGN_OR_RETURN(const rl::Groups groups, rl::Groups::FromRuns(run_sizes, n), where);
    TANDEM_ASSIGN_OR_RETURN(const rl::GroupAdvantages adv, rl::ComputeGroupAdvantages(rewards, groups, config.advantage),
                            where);
    TANDEM_ASSIGN_OR_RETURN(const rl::KeptGroups varied, rl::GroupsWithVariedRewards(rewards, groups), where);
    st.groups_all_equal = groups.num_groups() - static_cast<int64_t>(varied.groups.size());

    // 2. The groups trained on, each as a planner item (its trie).
    std::vector<int64_t> group_start(static_cast<size_t>(groups.num_groups()) + 1, 0);
    for (int64_t g = 0; g < groups.num_groups(); ++g) group_start[g + 1] = group_start[g] + run_sizes[g];
    std::vector<int64_t> kept_groups;
    if (config.dynamic_sampling) {
      kept_groups = varied.groups;
    } else {
      for (int64_t g = 0; g < groups.num_groups(); ++g) kept_groups.push_back(g);
    }
    std::vector<data::PlanItem> items;
    std::vector<std::vector<int64_t>> item_samples;  // the item's k-th sequence -> index into `valid`
    int64_t total_tokens = 0;
    for (const int64_t g : kept_groups) {
      std::vector<std::vector<int32_t>> seqs;
      for (int64_t i = group_start[g]; i < group_start[g + 1]; ++i) {
        std::vector<int32_t> s = valid[i]->prompt;
        s.insert(s.end(), valid[i]->response.begin(), valid[i]->response.end());
        total_tokens += static_cast<int64_t>(s.size());
        seqs.push_back(std::move(s));
      }
      TANDEM_ASSIGN_OR_RETURN(data::TrieItem trie, data::TrieItemFromTokens(seqs), where);
      std::vector<int64_t> samples;
      for (const int32_t k : trie.order) samples.push_back(group_start[g] + k);
      items.push_back(std::move(trie.item));
      item_samples.push_back(std::move(samples));
    }
    if (items.empty()) return st;
    data::MicroBatchOptions plan_options;
    plan_options.token_cap = options_.micro_batch_tokens > 0 ? options_.micro_batch_tokens : total_tokens;
    plan_options.cost.packing = options_.tree_packing;
    TANDEM_ASSIGN_OR_RETURN(const data::MicroBatchPlan plan, data::PlanMicroBatches(items, plan_options), where);

    double batch_tokens = 0, batch_sequences = 0;
    for (const auto& samples : item_samples) {
      batch_sequences += static_cast<double>(samples.size());
      for (const int64_t i : samples) batch_tokens += static_cast<double>(valid[i]->response.size());
    }

    // 3. Forward and backward per micro-batch; gradients accumulate.
    model_.parameters().ZeroGrad();
    const at::Device device = model_.device();
    for (const data::MicroBatch& mb : plan.ranks[0].micro_batches) {
      std::vector<int64_t> samples;
      for (const data::ItemPart& part : mb.parts)
        for (int32_t k = part.begin; k < part.end; ++k) samples.push_back(item_samples[part.item][k]);
      if (samples.empty()) continue;
      std::vector<std::vector<int32_t>> seqs;
      std::vector<int32_t> score_from;
      int64_t width = 0;
      for (const int64_t i : samples) {
        const Trajectory& t = *valid[i];
        std::vector<int32_t> s = t.prompt;
        s.insert(s.end(), t.response.begin(), t.response.end());
        st.sequence_tokens += static_cast<int64_t>(s.size());
        st.response_tokens += static_cast<int64_t>(t.response.size());
        width = std::max<int64_t>(width, static_cast<int64_t>(t.response.size()));
        score_from.push_back(static_cast<int32_t>(t.prompt.size()));
        seqs.push_back(std::move(s));
      }
      TANDEM_ASSIGN_OR_RETURN(const model::ForestBatch batch,
                              model::BuildForestBatch(seqs, score_from, model_.config().vocab_size, device,
                                                      options_.tree_packing),
                              where);
      st.packed_tokens += batch.num_tokens();
      ++st.micro_batches;
      // Pair m of sequence s (response token j) -> cell s * width + j.
      const int64_t b = static_cast<int64_t>(samples.size());
      std::vector<int64_t> cells;
      std::vector<float> old(static_cast<size_t>(b * width), 0.0f);
      std::vector<uint8_t> mask(static_cast<size_t>(b * width), 0);
      std::vector<int64_t> adv_index;
      for (int64_t s = 0; s < b; ++s) {
        const Trajectory& t = *valid[samples[s]];
        for (size_t j = 0; j < t.response.size(); ++j) {
          cells.push_back(s * width + static_cast<int64_t>(j));
          old[s * width + j] = t.old_logprobs[j];
          mask[s * width + j] = 1;
        }
        adv_index.push_back(samples[s]);
      }
      const model::ForestOutput out = model_.Forward(batch, {.temperature = options_.temperature});
      const at::Tensor index = at::tensor(cells).to(device);
      auto grid = [&](const at::Tensor& flat) {
        return at::zeros({b * width}, flat.options()).index_copy(0, index, flat).view({b, width});
      };
      rl::PolicyLossInputs in;
      in.logprobs = grid(out.logprob);
      in.entropy = grid(out.entropy);
      in.old_logprobs = at::tensor(old).view({b, width}).to(device);
      in.mask = at::tensor(mask).view({b, width}).to(at::kBool).to(device);
      in.advantages = adv.advantages.index_select(0, at::tensor(adv_index)).to(device);
      if (config.loss.kl_coef > 0) {
        at::NoGradGuard no_grad;
        in.ref_logprobs = grid(options_.reference->Forward(batch, {.temperature = options_.temperature}).logprob);
      }
      in.batch_tokens = batch_tokens;
      in.batch_sequences = batch_sequences;
      TANDEM_ASSIGN_OR_RETURN(const rl::PolicyLossOutput loss, options_.algorithm.loss(in, config), where);
      loss.loss.backward();
      Accumulate(loss.metrics.ToHost(), static_cast<double>(cells.size()), st.loss);
    }
    for (auto& [k, v] : st.loss)
      if (k != "tokens" && k != "ratio_max" && !IsLoss(k) && st.loss["tokens"] > 0)
        v /= st.loss["tokens"];
    st.trajectories = static_cast<int64_t>(batch_sequences);
    st.groups = static_cast<int64_t>(items.size());
  } catch (const std::exception& e) {
    return Internal(where + ": " + e.what());
  }
  TANDEM_ASSIGN_OR_RETURN(st.grad_norm, opt_->Step(st.lr), where);
  st.updated = true;
  return st;
}

}  // namespace tandem::train
