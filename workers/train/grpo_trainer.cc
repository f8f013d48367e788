// The actor's step: advantages, micro-batches, policy loss, update (grpo_trainer.h).
#include "workers/train/grpo_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "workers/data/microbatch_planner.h"
#include "workers/model/model_input.h"
#include "workers/rl/distill_loss.h"
#include "workers/rl/dynamic_sampling.h"
#include "workers/rl/groups.h"

namespace tandem::train {
namespace {

// Why the MOPD part of `t` (its route over `teachers`, with `top_k` top
// tokens per position, or none) is unusable, or "".
std::string RouteDefect(const Trajectory& t, int64_t teachers, int64_t top_k, int64_t vocab) {
  if (t.route.empty()) return "";
  if (static_cast<int64_t>(t.route.size()) != teachers)
    return "a route of " + std::to_string(t.route.size()) + " weights for " + std::to_string(teachers) + " teachers";
  for (size_t j = 0; j < t.route.size(); ++j) {
    if (!std::isfinite(t.route[j]) || t.route[j] < 0) return "route weight " + std::to_string(j) + " is not a finite number >= 0";
    if (t.route[j] == 0) continue;
    if (j >= t.teacher_logprobs.size() || t.teacher_logprobs[j].size() != t.response.size())
      return "teacher " + std::to_string(j) + " has " +
             std::to_string(j < t.teacher_logprobs.size() ? t.teacher_logprobs[j].size() : 0) + " log-probs for " +
             std::to_string(t.response.size()) + " response tokens";
    for (const float lp : t.teacher_logprobs[j])
      if (!std::isfinite(lp)) return "a non-finite log-prob of teacher " + std::to_string(j);
    if (top_k == 0) continue;
    const size_t cells = t.response.size() * static_cast<size_t>(top_k);
    if (j >= t.teacher_top_ids.size() || j >= t.teacher_top_logprobs.size() || t.teacher_top_ids[j].size() != cells ||
        t.teacher_top_logprobs[j].size() != cells)
      return "teacher " + std::to_string(j) + " lacks its top " + std::to_string(top_k) + " tokens at each of " +
             std::to_string(t.response.size()) + " response tokens";
    for (size_t c = 0; c < cells; ++c) {
      if (!std::isfinite(t.teacher_top_logprobs[j][c]))
        return "a non-finite top log-prob of teacher " + std::to_string(j);
      if (t.teacher_top_ids[j][c] < 0 || t.teacher_top_ids[j][c] >= vocab)
        return "teacher " + std::to_string(j) + "'s top token id " + std::to_string(t.teacher_top_ids[j][c]) +
               " outside [0, " + std::to_string(vocab) + ")";
    }
  }
  return "";
}

// Whether the loss counts response token j of `t` (Trajectory::trained).
bool Trained(const Trajectory& t, size_t j) { return t.trained.empty() || t.trained[j] != 0; }

// The response tokens of `t` the loss counts.
int64_t TrainedTokens(const Trajectory& t) {
  if (t.trained.empty()) return static_cast<int64_t>(t.response.size());
  return static_cast<int64_t>(std::count_if(t.trained.begin(), t.trained.end(), [](uint8_t m) { return m != 0; }));
}

// The response tokens of `t` the distill loss counts (those of a sequence routed to some teacher).
double RoutedTokens(const Trajectory& t) {
  double w = 0;
  for (const float x : t.route) w += x;
  return w > 0 ? static_cast<double>(TrainedTokens(t)) : 0.0;
}

// Why trajectory `t` cannot be trained on, or "" when it can (`teachers`:
// K with MOPD, else 0 and the route is not looked at; `top_k` its top-k).
std::string Defect(const Trajectory& t, int64_t vocab, int64_t teachers, int64_t top_k) {
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
  if (!t.trained.empty() && t.trained.size() != t.response.size())
    return "a trained mask of " + std::to_string(t.trained.size()) + " for " + std::to_string(t.response.size()) +
           " response tokens";
  if (TrainedTokens(t) == 0) return "no trained response token (its mask is all 0)";
  if (!std::isfinite(t.reward)) return "a non-finite reward";
  return teachers > 0 ? RouteDefect(t, teachers, top_k, vocab) : "";
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

// Appends Accumulate's sums `m` to `v` as (present, value) pairs in the
// order of `names` (ratio_max's value left out: it is a max, reduced apart);
// Internal for a metric not in `names`.
Status PackMetrics(const std::map<std::string, double>& m, const std::vector<std::string>& names,
                   std::vector<double>& v) {
  for (const auto& [k, x] : m)
    if (std::find(names.begin(), names.end(), k) == names.end())
      return Internal("the loss's metric \"" + k + "\" is not in its Names()");
  for (const std::string& k : names) {
    const auto it = m.find(k);
    v.push_back(it == m.end() ? 0.0 : 1.0);
    v.push_back(it == m.end() || k == "ratio_max" ? 0.0 : it->second);
  }
  return Status::Ok();
}

// PackMetrics' pairs from v[at...], summed over the replicas, as means:
// losses as they are (batch normalisers), the rest over "tokens".
std::map<std::string, double> UnpackMetrics(const std::vector<double>& v, size_t at,
                                            const std::vector<std::string>& names) {
  std::map<std::string, double> m;
  for (size_t i = 0; i < names.size(); ++i)
    if (v[at + 2 * i] > 0) m[names[i]] = v[at + 2 * i + 1];
  const double tokens = m.count("tokens") ? m["tokens"] : 0.0;
  for (auto& [k, x] : m)
    if (k != "tokens" && k != "ratio_max" && !IsLoss(k) && tokens > 0) x /= tokens;
  return m;
}

// The teachers' part of the distill loss for the sequences valid[samples[b]]
// of a micro-batch: log-probs [K, B, width], routes [B, K] and, with the
// top-k term, the teachers' top log-probs [K, B, width, top_k] and the
// extra (pair, label) the student scores for them (ForwardOptions), whose
// results go to cells `top_cells` of the [K, B, width, top_k] grid.
struct TeacherBatch {
  rl::DistillLossInputs inputs;  // teacher_logprobs, route, teacher_top_logprobs
  at::Tensor extra_pairs, extra_labels, top_cells;
};

TeacherBatch TeacherInputs(const std::vector<const Trajectory*>& valid, const std::vector<int64_t>& samples,
                           int64_t k, int64_t width, int64_t top_k, const model::ForestBatch& batch,
                           const at::Device& device) {
  const int64_t b = static_cast<int64_t>(samples.size());
  std::vector<float> teacher(static_cast<size_t>(k * b * width), 0.0f), route(static_cast<size_t>(b * k), 0.0f);
  std::vector<float> top(static_cast<size_t>(k * b * width * top_k), 0.0f);
  std::vector<int64_t> pairs, labels, cells;
  for (int64_t s = 0; s < b; ++s) {
    const Trajectory& t = *valid[samples[s]];
    if (t.route.empty()) continue;
    for (int64_t j = 0; j < k; ++j) {
      route[s * k + j] = t.route[j];
      if (!(t.route[j] > 0)) continue;
      std::copy(t.teacher_logprobs[j].begin(), t.teacher_logprobs[j].end(), &teacher[(j * b + s) * width]);
      // Response token p of sequence s is its pair pair_offsets[s] + p (scored from the prompt's end).
      for (int64_t p = 0; p < static_cast<int64_t>(t.response.size()) && top_k > 0; ++p) {
        for (int64_t i = 0; i < top_k; ++i) {
          const int64_t cell = ((j * b + s) * width + p) * top_k + i;
          top[cell] = t.teacher_top_logprobs[j][p * top_k + i];
          pairs.push_back(batch.pair_offsets[s] + p);
          labels.push_back(t.teacher_top_ids[j][p * top_k + i]);
          cells.push_back(cell);
        }
      }
    }
  }
  TeacherBatch out;
  out.inputs.teacher_logprobs = at::tensor(teacher).view({k, b, width}).to(device);
  out.inputs.route = at::tensor(route).view({b, k}).to(device);
  if (top_k > 0) {
    out.inputs.teacher_top_logprobs = at::tensor(top).view({k, b, width, top_k}).to(device);
    out.extra_pairs = at::tensor(pairs, at::kLong).to(device);
    out.extra_labels = at::tensor(labels, at::kLong).to(device);
    out.top_cells = at::tensor(cells, at::kLong).to(device);
  }
  return out;
}

// FailedPrecondition unless every replica holds the same parameters (their
// sum and sum of squares agree exactly; the padding is not compared).
Status CheckSameParameters(const model::Transformer& model, collective::Group& dp, const std::string& advice) {
  double sum = 0, sq = 0;
  try {
    for (const model::ParameterSet::Slot& s : model.parameters().slots()) {
      const at::Tensor d = s.leaf.detach().to(at::kDouble);
      sum += d.sum().item<double>();
      sq += d.square().sum().item<double>();
    }
  } catch (const std::exception& e) {
    return Internal(std::string("checksum of the parameters: ") + e.what());
  }
  std::vector<double> v = {sum, -sum, sq, -sq};
  TANDEM_RETURN_IF_ERROR(dp.AllReduce(v, collective::HostReduce::kMax), "comparing the replicas' parameters");
  if (!(v[0] == -v[1] && v[2] == -v[3]))
    return FailedPrecondition("the data-parallel replicas hold different parameters (sums " +
                              std::to_string(-v[1]) + " to " + std::to_string(v[0]) + "): " + advice);
  return Status::Ok();
}

}  // namespace

// This replica's part of a step's batch: its valid trajectories, their
// shaped rewards and advantages, the kept groups as planner items.
struct GrpoTrainer::Share {
  std::vector<const Trajectory*> valid;
  at::Tensor rewards;     // [valid.size()] float, shaped; undefined when none is valid
  at::Tensor advantages;  // [valid.size()]
  std::vector<data::PlanItem> items;
  std::vector<std::vector<int64_t>> item_samples;  // the item's k-th sequence -> index into `valid`
  int64_t total_tokens = 0;                        // sequence tokens of the items
  double tokens = 0, sequences = 0;                // response tokens and sequences of the items
  double distill_tokens = 0;                       // response tokens of the items routed to a teacher (MOPD)
  int64_t groups_all_equal = 0;
};

// The global batch's normalisers (summed over the replicas).
struct GrpoTrainer::Normalisers {
  double tokens = 0, sequences = 0;  // response tokens and sequences
  double distill_tokens = 0;         // response tokens routed to a teacher
};

GrpoTrainer::GrpoTrainer(model::Transformer& model, GrpoTrainerOptions options, std::unique_ptr<Optimizer> opt)
    : model_(model), options_(std::move(options)), opt_(std::move(opt)) {}
GrpoTrainer::~GrpoTrainer() = default;

StatusOr<std::unique_ptr<GrpoTrainer>> GrpoTrainer::Create(model::Transformer& model, const GrpoTrainerOptions& options) {
  TANDEM_RETURN_IF_ERROR(options.schedule.Validate(), "grpo trainer");
  TANDEM_RETURN_IF_ERROR(rl::Validate(options.algorithm.config), "grpo trainer: algorithm " + options.algorithm.name);
  if (!options.algorithm.loss) return InvalidArgument("grpo trainer: algorithm " + options.algorithm.name + " has no loss");
  if (options.micro_batch_tokens < 0) return InvalidArgument("grpo trainer: micro_batch_tokens must be >= 0");
  if (options.algorithm.config.distill && options.teachers < 1)
    return InvalidArgument("grpo trainer: algorithm " + options.algorithm.name +
                           " has a distill term and needs at least one teacher (teachers " +
                           std::to_string(options.teachers) + ")");
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
  if (options.data_parallel != nullptr && options.data_parallel->world_size() > 1)
    TANDEM_RETURN_IF_ERROR(CheckSameParameters(model, *options.data_parallel, "give every rank the same init seed or checkpoint"), "grpo trainer");
  OptimizerChoice choice = options.optimizer;
  choice.data_parallel = options.data_parallel;  // Muon's ranks share its matrices
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, MakeOptimizer(model.parameters(), choice), "grpo trainer");
  return std::unique_ptr<GrpoTrainer>(new GrpoTrainer(model, options, std::move(opt)));
}

// Steps 1-2 of grpo_trainer.h on this replica's trajectories (no collective).
Status GrpoTrainer::Prepare(const std::vector<Trajectory>& trajectories, const std::string& where, Share& share,
                            GrpoStepStats& st) {
  const rl::AlgorithmConfig& config = options_.algorithm.config;
  // 1. The trajectories that can be trained on, in contiguous groups.
  std::vector<const Trajectory*>& valid = share.valid;
  std::vector<int64_t> run_sizes;
  std::vector<int64_t> seen_groups;
  for (size_t i = 0; i < trajectories.size(); ++i) {
    const Trajectory& t = trajectories[i];
    if (i > 0 && t.group != trajectories[i - 1].group) {
      if (std::find(seen_groups.begin(), seen_groups.end(), t.group) != seen_groups.end())
        return InvalidArgument(where + ": the trajectories of group " + std::to_string(t.group) + " are not contiguous");
    }
    if (i == 0 || t.group != trajectories[i - 1].group) seen_groups.push_back(t.group);
    if (std::string why = Defect(t, model_.config().vocab_size, config.distill ? options_.teachers : 0,
                                 config.distill ? config.distill->top_k : 0);
        !why.empty()) {
      st.dropped.push_back("trajectory " + std::to_string(i) + " (group " + std::to_string(t.group) + "): " + why);
      continue;
    }
    if (valid.empty() || valid.back()->group != t.group) run_sizes.push_back(0);
    ++run_sizes.back();
    valid.push_back(&t);
  }
  if (valid.empty()) return Status::Ok();

  try {
    const int64_t n = static_cast<int64_t>(valid.size());
    std::vector<float> reward_values;
    std::vector<int64_t> lengths;
    for (const Trajectory* t : valid) {
      reward_values.push_back(static_cast<float>(t->reward));
      lengths.push_back(static_cast<int64_t>(t->response.size()));
    }
    share.rewards = at::tensor(reward_values);
    if (config.overlong) {
      TANDEM_ASSIGN_OR_RETURN(share.rewards, rl::ShapeOverlongRewards(share.rewards, at::tensor(lengths), *config.overlong),
                              where);
    }
    TANDEM_ASSIGN_OR_RETURN(const rl::Groups groups, rl::Groups::FromRuns(run_sizes, n), where);
    TANDEM_ASSIGN_OR_RETURN(const rl::GroupAdvantages adv,
                            rl::ComputeGroupAdvantages(share.rewards, groups, config.advantage), where);
    share.advantages = adv.advantages;
    TANDEM_ASSIGN_OR_RETURN(const rl::KeptGroups varied, rl::GroupsWithVariedRewards(share.rewards, groups), where);
    share.groups_all_equal = groups.num_groups() - static_cast<int64_t>(varied.groups.size());

    // 2. The groups trained on, each as a planner item (its trie).
    std::vector<int64_t> group_start(static_cast<size_t>(groups.num_groups()) + 1, 0);
    for (int64_t g = 0; g < groups.num_groups(); ++g) group_start[g + 1] = group_start[g] + run_sizes[g];
    std::vector<int64_t> kept_groups;
    if (config.dynamic_sampling) {
      kept_groups = varied.groups;
    } else {
      for (int64_t g = 0; g < groups.num_groups(); ++g) kept_groups.push_back(g);
    }
    for (const int64_t g : kept_groups) {
      std::vector<std::vector<int32_t>> seqs;
      for (int64_t i = group_start[g]; i < group_start[g + 1]; ++i) {
        std::vector<int32_t> s = valid[i]->prompt;
        s.insert(s.end(), valid[i]->response.begin(), valid[i]->response.end());
        share.total_tokens += static_cast<int64_t>(s.size());
        share.tokens += static_cast<double>(TrainedTokens(*valid[i]));
        share.sequences += 1;
        if (config.distill) share.distill_tokens += RoutedTokens(*valid[i]);
        seqs.push_back(std::move(s));
      }
      TANDEM_ASSIGN_OR_RETURN(data::TrieItem trie, data::TrieItemFromTokens(seqs), where);
      std::vector<int64_t> samples;
      for (const int32_t k : trie.order) samples.push_back(group_start[g] + k);
      share.items.push_back(std::move(trie.item));
      share.item_samples.push_back(std::move(samples));
    }
  } catch (const std::exception& e) {
    return Internal(where + ": " + e.what());
  }
  return Status::Ok();
}

// Step 3 on this replica's share: gradients accumulate in the model's
// buffer, with the global batch's normalisers.
Status GrpoTrainer::TrainMicroBatches(const Share& share, const Normalisers& global, const std::string& where,
                                      GrpoStepStats& st) {
  const rl::AlgorithmConfig& config = options_.algorithm.config;
  const std::vector<const Trajectory*>& valid = share.valid;
  try {
    data::MicroBatchOptions plan_options;
    plan_options.token_cap = options_.micro_batch_tokens > 0 ? options_.micro_batch_tokens : share.total_tokens;
    plan_options.cost.packing = options_.tree_packing;
    TANDEM_ASSIGN_OR_RETURN(const data::MicroBatchPlan plan, data::PlanMicroBatches(share.items, plan_options), where);
    const at::Device device = model_.device();
    for (const data::MicroBatch& mb : plan.ranks[0].micro_batches) {
      std::vector<int64_t> samples;
      for (const data::ItemPart& part : mb.parts)
        for (int32_t k = part.begin; k < part.end; ++k) samples.push_back(share.item_samples[part.item][k]);
      if (samples.empty()) continue;
      std::vector<std::vector<int32_t>> seqs;
      std::vector<int32_t> score_from;
      int64_t width = 0;
      for (const int64_t i : samples) {
        const Trajectory& t = *valid[i];
        std::vector<int32_t> s = t.prompt;
        s.insert(s.end(), t.response.begin(), t.response.end());
        st.sequence_tokens += static_cast<int64_t>(s.size());
        st.response_tokens += TrainedTokens(t);
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
      int64_t trained = 0;
      for (int64_t s = 0; s < b; ++s) {
        const Trajectory& t = *valid[samples[s]];
        for (size_t j = 0; j < t.response.size(); ++j) {
          cells.push_back(s * width + static_cast<int64_t>(j));
          if (!Trained(t, j)) continue;
          old[s * width + j] = t.old_logprobs[j];
          mask[s * width + j] = 1;
          ++trained;
        }
        adv_index.push_back(samples[s]);
      }
      const bool distilling = config.distill && global.distill_tokens > 0;
      const int64_t top_k = distilling ? config.distill->top_k : 0;
      TeacherBatch teachers;
      model::ForwardOptions forward{.temperature = options_.temperature};
      if (distilling) {
        teachers = TeacherInputs(valid, samples, options_.teachers, width, top_k, batch, device);
        forward.extra_pairs = teachers.extra_pairs;
        forward.extra_labels = teachers.extra_labels;
      }
      const model::ForestOutput out = model_.Forward(batch, forward);
      const at::Tensor index = at::tensor(cells).to(device);
      auto grid = [&](const at::Tensor& flat) {
        return at::zeros({b * width}, flat.options()).index_copy(0, index, flat).view({b, width});
      };
      rl::PolicyLossInputs in;
      in.logprobs = grid(out.logprob);
      in.entropy = grid(out.entropy);
      in.old_logprobs = at::tensor(old).view({b, width}).to(device);
      in.mask = at::tensor(mask).view({b, width}).to(at::kBool).to(device);
      in.advantages = share.advantages.index_select(0, at::tensor(adv_index)).to(device);
      if (config.loss.kl_coef > 0) {
        at::NoGradGuard no_grad;
        in.ref_logprobs = grid(options_.reference->Forward(batch, {.temperature = options_.temperature}).logprob);
      }
      in.batch_tokens = global.tokens;
      in.batch_sequences = global.sequences;
      TANDEM_ASSIGN_OR_RETURN(const rl::PolicyLossOutput loss, options_.algorithm.loss(in, config), where);
      at::Tensor total = loss.loss;
      if (distilling) {
        rl::DistillLossInputs& din = teachers.inputs;
        din.logprobs = in.logprobs;
        din.old_logprobs = in.old_logprobs;
        din.mask = in.mask;
        din.batch_tokens = global.distill_tokens;
        if (top_k > 0)
          din.top_logprobs = at::zeros({options_.teachers * b * width * top_k}, out.extra_logprob.options())
                                 .index_copy(0, teachers.top_cells, out.extra_logprob)
                                 .view({options_.teachers, b, width, top_k});
        TANDEM_ASSIGN_OR_RETURN(const rl::DistillLossOutput distill, rl::ComputeDistillLoss(din, config.distill->loss),
                                where);
        total = config.distill->rl_coef * loss.loss + config.distill->distill_coef * distill.loss;
        if (top_k > 0) total = total + config.distill->top_k_coef * distill.topk_loss;
        double routed = 0;
        for (const int64_t i : samples) routed += RoutedTokens(*valid[i]);
        Accumulate(distill.metrics.ToHost(), routed, st.distill);
      }
      total.backward();
      Accumulate(loss.metrics.ToHost(), static_cast<double>(trained), st.loss);
    }
  } catch (const std::exception& e) {
    return Internal(where + ": " + e.what());
  }
  return Status::Ok();
}

Status GrpoTrainer::CheckReplicasAgree(bool for_checkpoint) {
  if (options_.data_parallel == nullptr || options_.data_parallel->world_size() == 1) return Status::Ok();
  TANDEM_RETURN_IF_ERROR(CheckSameParameters(model_, *options_.data_parallel, "they diverged"));
  return for_checkpoint ? opt_->GatherState() : Status::Ok();
}

StatusOr<GrpoStepStats> GrpoTrainer::Step(const std::vector<Trajectory>& trajectories, double progress) {
  const std::string where = "grpo step " + std::to_string(steps());
  collective::Group* dp = options_.data_parallel;
  auto reduce = [&](std::vector<double>& v, collective::HostReduce op, const char* what) -> Status {
    if (dp == nullptr) return Status::Ok();
    return dp->AllReduce(v, op).WithContext(where + ": " + what);
  };
  const std::string failed_elsewhere = where + ": another data-parallel replica failed this step (its log says why)";
  GrpoStepStats st;
  st.lr = options_.schedule.At(steps(), progress);

  // Steps 1-2 on this replica's share, then the global batch's counts (one
  // collective, whatever happened here: every replica must take part).
  Share share;
  const Status prepared = Prepare(trajectories, where, share, st);
  double reward_sum = 0;
  if (prepared.ok() && share.rewards.defined()) reward_sum = share.rewards.to(at::kDouble).sum().item<double>();
  std::vector<double> batch = {prepared.ok() ? 0.0 : 1.0,
                               prepared.ok() ? static_cast<double>(share.valid.size()) : 0.0,
                               reward_sum,
                               share.tokens,
                               share.sequences,
                               static_cast<double>(share.items.size()),
                               static_cast<double>(share.groups_all_equal),
                               static_cast<double>(st.dropped.size()),
                               share.distill_tokens};
  TANDEM_RETURN_IF_ERROR(reduce(batch, collective::HostReduce::kSum, "summing the batch's counts"));
  if (!prepared.ok()) return prepared;
  if (batch[0] > 0) return FailedPrecondition(failed_elsewhere);
  const double n = batch[1], items = batch[5];
  const Normalisers global{.tokens = batch[3], .sequences = batch[4], .distill_tokens = batch[8]};
  st.dropped_total = static_cast<int64_t>(batch[7]);
  if (n == 0) return st;
  st.reward_mean = batch[2] / n;
  st.groups_all_equal = static_cast<int64_t>(batch[6]);

  // Step 3 on this replica's share, then the global stats.
  model_.parameters().ZeroGrad();
  const Status trained = share.items.empty() ? Status::Ok() : TrainMicroBatches(share, global, where, st);
  double reward_sq = 0;
  if (trained.ok() && share.rewards.defined())
    reward_sq = (share.rewards.to(at::kDouble) - st.reward_mean).square().sum().item<double>();
  const std::vector<std::string> policy_names = rl::PolicyLossMetrics::Names();
  const std::vector<std::string> distill_names = rl::DistillLossMetrics::Names();
  std::vector<double> sums = {trained.ok() ? 0.0 : 1.0,
                              reward_sq,
                              static_cast<double>(st.response_tokens),
                              static_cast<double>(st.sequence_tokens),
                              static_cast<double>(st.packed_tokens),
                              static_cast<double>(st.micro_batches)};
  const size_t policy_at = sums.size();
  TANDEM_RETURN_IF_ERROR(PackMetrics(st.loss, policy_names, sums), where);
  const size_t distill_at = sums.size();
  TANDEM_RETURN_IF_ERROR(PackMetrics(st.distill, distill_names, sums), where);
  std::vector<double> ratio_max = {st.loss.count("ratio_max") ? st.loss["ratio_max"]
                                                              : -std::numeric_limits<double>::infinity()};
  TANDEM_RETURN_IF_ERROR(reduce(sums, collective::HostReduce::kSum, "summing the step's metrics"));
  TANDEM_RETURN_IF_ERROR(reduce(ratio_max, collective::HostReduce::kMax, "the step's ratio_max"));
  if (!trained.ok()) return trained;
  if (sums[0] > 0) return FailedPrecondition(failed_elsewhere);
  st.reward_std = n > 1 ? std::sqrt(sums[1] / n) : 0.0;
  st.response_tokens = static_cast<int64_t>(sums[2]);
  st.sequence_tokens = static_cast<int64_t>(sums[3]);
  st.packed_tokens = static_cast<int64_t>(sums[4]);
  st.micro_batches = static_cast<int64_t>(sums[5]);
  st.loss = UnpackMetrics(sums, policy_at, policy_names);
  if (st.loss.count("ratio_max")) st.loss["ratio_max"] = ratio_max[0];
  st.distill = UnpackMetrics(sums, distill_at, distill_names);
  if (items == 0) {
    st.loss.clear();
    st.distill.clear();
    return st;  // nothing to train on anywhere: no update
  }

  // Step 4: the whole batch's gradient on every replica, one update.
  if (dp != nullptr) {
    std::vector<at::Tensor> grads = model_.parameters().grad_buffers();
    TANDEM_RETURN_IF_ERROR(dp->AllReduceSum(grads), where + ": summing the gradients");
  }
  st.trajectories = static_cast<int64_t>(global.sequences);
  st.groups = static_cast<int64_t>(items);
  TANDEM_ASSIGN_OR_RETURN(st.grad_norm, opt_->Step(st.lr), where);
  st.updated = true;
  return st;
}

}  // namespace tandem::train
