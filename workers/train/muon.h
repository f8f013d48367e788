// Muon's update (issue #17 item 3; docs/optimizers.md "Muon"): momentum
// (Nesterov by default), then the update orthogonalised by the quintic
// Newton–Schulz iteration with the published coefficients (a, b, c) =
// (3.4445, -4.7750, 2.0315), five steps, then scaled by the matrix's shape
// (max(1, rows/cols)^0.5, the reference's) or to match AdamW's update RMS
// (0.2 * sqrt(max(rows, cols)), Moonlight's), with decoupled weight decay:
//
//   m  = m + (1 - beta) * (g - m)                   (m.lerp_(g, 1 - beta))
//   u  = nesterov ? g + beta * (m - g) : m          (g.lerp(m, beta))
//   X  = u / (||u||_F + 1e-7), transposed when rows > cols
//   5x: A = X X^T; B = b A + c A A; X = a X + B X
//   w  = w * (1 - lr * weight_decay) - lr * scale * X
//
// rows and cols are the matrix's in Hugging Face's [out, in] orientation
// (the scale depends on it). A tensor of more than two dimensions is a
// stack of matrices over its last two, each normalised and orthogonalised
// on its own; MuonMatrices gives a slot's matrices as the reference sees
// them (one nn.Linear weight each). Only hidden matrices take Muon:
// embeddings, the LM head, norms and biases go through AdamW (MuonTakes).
// The iteration runs in `ns_dtype` (bf16 as the reference does; fp32 for
// exactness tests).
//
// Muon (the class) is the optimizer over a model: Muon on the slots
// MuonTakes, AdamW (adamw.h) on the rest, one step, one state; the
// trainers take it by name (MakeOptimizer; --optimizer muon). Its state
// is native or staged like AdamW's (state_slabs.h), both parts streamed
// through the same buffers, a matrix never cut between buckets.
//
// Data parallel (a group of world_size > 1: the actor's replicas, whose
// gradients are the same sum on every rank): each rank owns whole slots
// (MuonOwners: the largest first, each to the least loaded rank) and runs
// Newton–Schulz and the weight update on its own only; every rank updates
// every momentum (elementwise, cheap), then each slot's new weights (the
// fp32 masters for bf16 parameters; staged, streamed through the buffers
// again) are summed over the ranks with the non-owners' zeroed: the
// owner's, exactly, on every rank. The state stays the same on every
// rank, so rank 0's checkpoint is whole and restores into any number of
// ranks (ownership follows the count).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/model/parameter_set.h"
#include "workers/train/adamw.h"

namespace tandem::collective {
class Group;  // workers/collective/group.h
}  // namespace tandem::collective

namespace tandem::train {

struct MuonOptions {
  double beta = 0.95;
  bool nesterov = true;
  int ns_steps = 5;
  double weight_decay = 0.1;
  bool match_adamw_rms = false;  // scale 0.2 * sqrt(max(rows, cols)) instead of max(1, rows/cols)^0.5
  at::ScalarType ns_dtype = at::kBFloat16;
  double lr_scale = 1.0;         // Muon's rate: the step's lr times this (the reference: 0.02 against AdamW's 3e-4)
};
// InvalidArgument naming the option: beta in [0, 1), ns_steps in [1, 100],
// weight_decay >= 0, ns_dtype floating, lr_scale > 0.
Status Validate(const MuonOptions& options);

// Whether the parameter slot `name` of `shape` is Muon's: at least two
// dimensions, not the embedding or the LM head.
bool MuonTakes(const std::string& name, at::IntArrayRef shape);

// The matrices of parameter slot `name` (its tensor, or any tensor laid
// out like it: gradient, momentum), as views of `t` in [out, in]
// orientation: the slot itself (a dense slot is one HF tensor), or for a
// MoE layer's experts (model.layers.{i}.mlp.experts.w_gate_up [E, H, 2I],
// w_down [E, I, H]) the stacks of the experts' gate_proj and up_proj
// ([E, I, H] each, transposed halves) and down_proj ([E, H, I]).
std::vector<at::Tensor> MuonMatrices(const std::string& name, const at::Tensor& t);

// X, orthogonalised: each matrix of `g` ([..., rows, cols]) through
// `steps` quintic Newton–Schulz steps in `dtype`; returned in g's dtype.
at::Tensor NewtonSchulz5(const at::Tensor& g, int steps, at::ScalarType dtype);

// The owner of each of `sizes` among `ranks`: the largest first, each to
// the rank with the fewest elements so far (the lowest on a tie).
std::vector<int> MuonOwners(const std::vector<int64_t>& sizes, int ranks);

// The shape factor of a [..., rows, cols] update.
double MuonScale(int64_t rows, int64_t cols, bool match_adamw_rms);

// One update of `w` in place (`momentum` too; `grad` is not changed), all
// of one shape, fp32 `w` and `momentum`.
void MuonUpdate(const at::Tensor& w, const at::Tensor& grad, const at::Tensor& momentum, double lr,
                const MuonOptions& options);

// Muon on the hidden matrices, AdamW on the rest. Step(lr): the global
// gradient norm clipped once (adamw.max_grad_norm, over every gradient),
// then MuonUpdate on each of Muon's matrices at lr * lr_scale (fp32
// momentum; an fp32 master for bf16/fp16 parameters, the parameter its
// rounding), then AdamW's step at lr on the rest. State: AdamW's tensors
// and "momentum/<slot>" ("master/<slot>" too for bf16 parameters) of
// Muon's slots; Restore checks all of it before it changes anything.
class Muon final : public Optimizer {
 public:
  // `params` must outlive the optimizer; its gradients are enabled here.
  // adamw.takes is set here (the slots Muon does not take). `dp` (may be
  // null; must outlive the optimizer): the data-parallel group.
  static StatusOr<std::unique_ptr<Muon>> Create(model::ParameterSet& params, const MuonOptions& muon,
                                                const AdamWOptions& adamw, collective::Group* dp = nullptr);
  ~Muon() override;

  StatusOr<double> Step(double lr) override;  // the norm before clipping
  int64_t steps() const override { return steps_; }
  OptimizerState State() const override;      // the tensors alias the optimizer's
  Status Restore(const OptimizerState& state) override;
  Status Release() override;
  Status Resume() override;
  int64_t device_bytes() const override;
  int64_t resident_bytes() const override;
  std::vector<size_t> muon_slots() const;  // indices into params.slots()
  int64_t bucket_count() const { return slabs_->bucket_count(); }  // Muon's part, staged
  int64_t owned_elements() const;  // of Muon's slots, this rank's (data parallel)

 private:
  Muon(model::ParameterSet& params, MuonOptions muon, double max_grad_norm);
  bool Mine(size_t item) const;
  Status GatherOwned();
  model::ParameterSet& params_;
  MuonOptions muon_;
  double max_grad_norm_;
  bool master_ = false;                      // bf16/fp16 parameters
  std::shared_ptr<StagingBuffers> buffers_;  // staged: shared with rest_
  std::unique_ptr<AdamW> rest_;
  std::unique_ptr<StateSlabs> slabs_;        // momentum[, master] of Muon's slots
  collective::Group* dp_ = nullptr;          // world_size > 1 only
  std::vector<int> owner_;                   // per item of slabs_
  int64_t steps_ = 0;
};

// The trainers' choice (--optimizer): "adamw" (AdamW on every slot) or
// "muon" (Muon on the hidden matrices, AdamW on the rest); InvalidArgument
// naming anything else.
struct OptimizerChoice {
  std::string name = "adamw";
  AdamWOptions adamw;
  MuonOptions muon;
  collective::Group* data_parallel = nullptr;  // muon: its ranks share the matrices (not owned)
  bool shard_state = false;  // adamw: its state sharded across data_parallel's ranks (adamw.h "Sharded")
};
StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(model::ParameterSet& params, const OptimizerChoice& choice);

// The training roles' flags (workers/roles/optimizer_flags.h) as a choice:
// `name`, Muon scaled to AdamW's RMS at lr * muon_lr_scale (one --lr
// schedule for both), AdamW's weight decay, clipping and residency
// (MakeStaging's checks). InvalidArgument naming a bad flag.
StatusOr<OptimizerChoice> ChooseOptimizer(const std::string& name, double muon_lr_scale, const std::string& residency,
                                          int64_t slots, int64_t slot_mib, double weight_decay, double max_grad_norm);
// "muon, state staged through 2 x 128 MiB buffers": for the roles' logs.
std::string Describe(const OptimizerChoice& choice);

}  // namespace tandem::train
