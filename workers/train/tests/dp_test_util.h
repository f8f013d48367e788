// What the data-parallel test and its worker binary (train_dp_worker) share:
// a tiny model, a batch of four groups, a run of a few GRPO steps on a
// replica's share of the groups, and the files a worker reports in.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "workers/model/model_input.h"
#include "workers/model/tests/model_test_util.h"
#include "workers/rl/algorithm_config.h"
#include "workers/collective/group.h"
#include "workers/train/grpo_trainer.h"
#include "workers/train/muon.h"

namespace tandem::train::dptest {

struct RunConfig {
  std::string algorithm = "dr_grpo";
  int64_t micro_batch_tokens = 0;
  int steps = 3;
  int rank0_groups = 2;  // rank 0 of 2 trains groups [0, rank0_groups), rank 1 the rest
  int bad_rank = -1;     // this rank's share has its groups out of order (a caller's error)
  std::string optimizer = "adamw";  // or "muon" (its ranks share the matrices, muon.h), or "adamw-shard"
                                    // (AdamW's state sharded across the ranks, adamw.h)
};

inline StatusOr<std::unique_ptr<model::Transformer>> TinyModel(uint64_t seed) {
  TANDEM_ASSIGN_OR_RETURN(auto m, model::Transformer::Create(model::testing::TinyConfig(/*moe=*/false, 2, /*tied=*/true),
                                                             at::kCPU, at::kFloat));
  m->InitRandom(seed, 0.2);
  return m;
}

// Four groups of four; group 3's rewards are all equal (dapo drops it).
inline std::vector<Trajectory> FourGroups() {
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4}, {1, 2, 9}, {7, 8}, {40, 41, 42, 43, 44}};
  const std::vector<std::vector<std::vector<int32_t>>> responses = {
      {{5, 6, 7}, {5, 6, 8, 9}, {10}, {11, 12}},
      {{20, 21}, {20, 22}, {20, 21, 23}, {24}},
      {{30, 31, 32, 33, 34}, {30}, {35, 36}, {30, 31}},
      {{50, 51}, {52}, {50, 53, 54}, {55, 56, 57}}};
  const std::vector<std::vector<double>> rewards = {{1, 0, 1, 0}, {0, 1, 1, 0}, {1, 1, 0, 0.5}, {1, 1, 1, 1}};
  std::vector<Trajectory> ts;
  for (size_t g = 0; g < prompts.size(); ++g)
    for (size_t i = 0; i < 4; ++i)
      ts.push_back({prompts[g], responses[g][i], {}, rewards[g][i], static_cast<int64_t>(g)});
  return ts;
}

// The trajectories of rank `rank` of `world` (1 or 2), in their groups.
inline std::vector<Trajectory> ShareOf(const std::vector<Trajectory>& all, int rank, int world, int rank0_groups) {
  if (world == 1) return all;
  std::vector<Trajectory> out;
  for (const Trajectory& t : all)
    if ((t.group < rank0_groups) == (rank == 0)) out.push_back(t);
  return out;
}

// The model's log-probs of each response token: the "rollout's".
inline void FillOldLogprobs(const model::Transformer& m, std::vector<Trajectory>& ts) {
  at::NoGradGuard no_grad;
  for (Trajectory& t : ts) {
    std::vector<int32_t> s = t.prompt;
    s.insert(s.end(), t.response.begin(), t.response.end());
    auto batch = model::BuildForestBatch({s}, {static_cast<int32_t>(t.prompt.size())}, m.config().vocab_size, m.device());
    const at::Tensor lp = m.Forward(*batch).logprob.contiguous();
    t.old_logprobs.assign(lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel());
  }
}

struct RunResult {
  std::vector<float> params;          // every parameter slot, flattened, in slot order
  std::vector<GrpoStepStats> steps;
  std::vector<double> seconds;        // each Step's wall time
  std::vector<float> first_grad;      // the gradient the first step applied (summed, clipped), the flat buffer
  int64_t muon_owned = -1;            // muon: the elements of Muon's matrices this rank updates
  std::vector<float> state;           // the optimizer's whole state after the last step (rank 0; by name, flattened)
  int64_t state_bytes = 0;            // what the optimizer's state holds on this rank
};

// `config.steps` GRPO steps from seed 1 on this rank's share (old log-probs
// of the start model, so later steps are off-policy and clip).
inline StatusOr<RunResult> Run(const RunConfig& config, collective::Group& dp) {
  TANDEM_ASSIGN_OR_RETURN(auto m, TinyModel(1));
  TANDEM_ASSIGN_OR_RETURN(auto ref, TinyModel(1));
  std::vector<Trajectory> ts = ShareOf(FourGroups(), dp.rank(), dp.world_size(), config.rank0_groups);
  FillOldLogprobs(*m, ts);
  if (dp.rank() == config.bad_rank) std::swap(ts.front(), ts.back());
  GrpoTrainerOptions o;
  TANDEM_ASSIGN_OR_RETURN(o.algorithm, rl::AlgorithmRegistry::WithBuiltins().Resolve(config.algorithm));
  if (o.algorithm.config.overlong) {  // dapo: a cache that fits 8-token responses
    TANDEM_ASSIGN_OR_RETURN(o.algorithm.config,
                            rl::ApplyAlgorithmOptions(o.algorithm.config, {{"overlong_shaping", {{"cache", 4}}}}, "test"));
  }
  TANDEM_ASSIGN_OR_RETURN(o.algorithm.config, rl::WithJobLimits(o.algorithm.config, 8));
  o.schedule = {1e-2, 0, 1.0};
  // AdamW's step is lr * g / (|g| + eps): a gradient component at rounding
  // noise (the KL term's at the start, ~1e-9) would get most of a full step
  // with the default 1e-8, in the direction of the noise.
  o.optimizer.adamw.eps = 1e-6;
  o.optimizer.name = config.optimizer == "adamw-shard" ? "adamw" : config.optimizer;
  o.optimizer.shard_state = config.optimizer == "adamw-shard";
  o.optimizer.muon.match_adamw_rms = true;
  o.optimizer.muon.ns_dtype = at::kFloat;  // the equivalence's bound is fp32's
  o.micro_batch_tokens = config.micro_batch_tokens;
  o.reference = ref.get();
  o.data_parallel = &dp;
  TANDEM_ASSIGN_OR_RETURN(auto trainer, GrpoTrainer::Create(*m, o));
  RunResult r;
  for (int s = 0; s < config.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    TANDEM_ASSIGN_OR_RETURN(GrpoStepStats st, trainer->Step(ts, static_cast<double>(s) / config.steps));
    r.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    r.steps.push_back(std::move(st));
    if (s == 0) {
      const at::Tensor g = m->parameters().grad_buffers()[0].contiguous();
      r.first_grad.assign(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
    }
  }
  if (const auto* muon = dynamic_cast<const Muon*>(&trainer->optimizer())) r.muon_owned = muon->owned_elements();
  TANDEM_RETURN_IF_ERROR(trainer->optimizer().GatherState());  // collective when sharded
  for (const auto& [name, t] : trainer->optimizer().State().tensors) {
    const at::Tensor c = t.contiguous().to(at::kFloat);
    r.state.insert(r.state.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  r.state_bytes = trainer->optimizer().resident_bytes();
  for (const model::ParameterSet::Slot& s : m->parameters().slots()) {
    const at::Tensor t = s.leaf.detach().contiguous();
    r.params.insert(r.params.end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  }
  return r;
}

// Muon over a tiny MoE model's bf16 parameters (fp32 masters), `steps`
// updates from the same gradients on every rank (what the all-reduce
// leaves), data parallel over `dp`, the state native or staged through
// buffers just larger than the largest matrix. Returns the parameters
// (upcast) then every state tensor (by name), flattened: rank 0's
// checkpoint.
inline StatusOr<std::vector<float>> RunMuonBf16(const std::string& residency, int steps, collective::Group& dp) {
  model::ParameterSet p = model::ParameterSet::Create(model::testing::TinyConfig(/*moe=*/true, 2), at::kCPU, at::kBFloat16);
  at::manual_seed(7);
  {
    at::NoGradGuard no_grad;
    for (const model::ParameterSet::Slot& s : p.slots()) s.leaf.detach().copy_(at::randn(s.leaf.sizes()) * 0.2);
  }
  AdamWOptions adamw;
  TANDEM_ASSIGN_OR_RETURN(adamw.staging, MakeStaging(residency, 2, 1));
  MuonOptions muon;
  muon.ns_dtype = at::kFloat;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Muon> o, Muon::Create(p, muon, adamw, &dp));
  for (int step = 0; step < steps; ++step) {
    at::manual_seed(100 + step);
    for (const at::Tensor& g : p.grad_buffers()) g.copy_(at::randn(g.sizes()) * 0.5);
    TANDEM_RETURN_IF_ERROR(o->Step(1e-3).status());
  }
  std::vector<float> out;
  auto append = [&out](const at::Tensor& t) {
    const at::Tensor f = t.detach().to(at::kFloat).contiguous();
    out.insert(out.end(), f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  };
  for (const model::ParameterSet::Slot& s : p.slots()) append(s.leaf);
  for (const auto& [name, t] : o->State().tensors) append(t);
  return out;
}

// A worker's report: `path` holds the parameters (raw float32), `path`.grad
// the first step's gradient buffer, `path`.state the optimizer's whole state
// (rank 0's), `path`.stats one line per step: updated grad_norm
// reward_mean reward_std pg_loss trajectories groups response_tokens
// micro_batches seconds muon_owned state_bytes.
inline Status WriteResult(const std::string& path, const RunResult& r) {
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(r.params.data()), static_cast<std::streamsize>(r.params.size() * 4));
    if (!out) return Internal("cannot write " + path);
  }
  for (const auto& [suffix, floats] : {std::pair{".grad", &r.first_grad}, std::pair{".state", &r.state}}) {
    std::ofstream out(path + suffix, std::ios::binary);
    out.write(reinterpret_cast<const char*>(floats->data()), static_cast<std::streamsize>(floats->size() * 4));
    if (!out) return Internal("cannot write " + path + suffix);
  }
  std::ofstream stats(path + ".stats");
  stats.precision(17);
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const GrpoStepStats& s = r.steps[i];
    stats << s.updated << ' ' << s.grad_norm << ' ' << s.reward_mean << ' ' << s.reward_std << ' '
          << (s.loss.count("pg_loss") ? s.loss.at("pg_loss") : 0.0) << ' ' << s.trajectories << ' ' << s.groups << ' '
          << s.response_tokens << ' ' << s.micro_batches << ' ' << r.seconds[i] << ' ' << r.muon_owned << ' '
          << r.state_bytes << '\n';
  }
  return stats ? Status::Ok() : Internal("cannot write " + path + ".stats");
}

}  // namespace tandem::train::dptest
