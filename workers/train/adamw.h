// The trainers' optimizer (docs/optimizers.md; issue #17): AdamW whose
// state may live off the GPU. torch.optim.AdamW's math, op for op as
// LibTorch's (decoupled weight decay, bias correction, eps outside the
// square root), over a ParameterSet's slots, weight decay on matrices
// (dim >= 2) only, after clipping the gradients' global norm
// (ClipGradNorm). The state is fp32 whatever the parameters' dtype:
// exp_avg, exp_avg_sq and, for bf16 or fp16 parameters, an fp32 master
// copy the update is applied to (the parameter is then its rounding).
//
// The update: by default one pass over each piece through the fused kernel
// (kernels/adamw: CPU fp32 parameters; CUDA fp32, bf16, fp16), with the
// clip's factor applied to the gradients as the kernel reads them when
// AdamW owns every parameter (the gradients are then left unscaled);
// `fused = false`, or parameters the kernel does not take (bf16 on the
// CPU), run LibTorch's ops, op for op.
//
// Residency, a setting of the same optimizer (state_slabs.h): native, the
// state on the parameters' device; staged, in host slabs streamed through
// `slots` buffers of `slot_bytes` on the device (a slot larger than a
// bucket is cut: the update is elementwise). Not yet: the copies on their
// own streams overlapping the update (the GPU path runs them in the
// caller's stream).
//
// Equality: unfused with fp32 parameters, native is bit for bit LibTorch's
// AdamW (the same ops on the same tensors); fused, it differs from that by
// the roundings of LibTorch's contracted multiply-adds (kernels/adamw/
// adamw.h; tests bound it). Staged computes the same update on pieces: bit
// for bit native's when fused, equal up to the vectorised kernels' tails
// when not (tests bound it).
//
// Sharded (ZeRO-1; docs/optimizers.md "Sharded state"): with `shard` a
// group of N > 1 data-parallel ranks, AdamW owning every parameter, rank r
// keeps the state of elements [r·T/N, (r+1)·T/N) of the parameters taken
// in slot order (T in all; a slot may be cut between ranks) and updates
// those only; then every rank's other elements are set to -0.0 and the
// parameter buffers summed over the ranks (x + -0.0 is x, for every x): the
// owners' values, exactly, everywhere. The gradients are every rank's sum
// already (data_parallel.h), so the clip is the same on every rank. The
// state's memory is 1/N of the replicated one's, native or staged.
// GatherState() (collective: every rank at the same step) assembles the
// whole state for State(), which a sharded AdamW returns only for the step
// gathered (empty otherwise: a checkpoint refuses it). Restore takes the
// whole state and keeps its range: a checkpoint of any number of ranks
// restores into any number.
//
// State() / Restore(): the checkpoint's view, by slot name:
// "exp_avg/<slot>", "exp_avg_sq/<slot>" (the names LibTorch's AdamW state
// was saved under before: those checkpoints restore) and "master/<slot>"
// (bf16/fp16 parameters; absent on restore: the parameters upcast). No
// tensors before the first step. Restore changes nothing when a tensor is
// missing or of the wrong shape (InvalidArgument naming it); restoring the
// state saved with parameters equal to the model's continues bit for bit.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/model/parameter_set.h"
#include "workers/train/optimizer.h"
#include "workers/train/state_slabs.h"

namespace tandem::collective {
class Group;  // workers/collective/group.h
}  // namespace tandem::collective

namespace tandem::train {

struct AdamWOptions {
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double max_grad_norm = 1.0;  // 0: no clipping
  bool fused = true;           // the one-pass kernel where it takes the parameters (above)
  StagingOptions staging;
  // The slots it updates (empty: every slot); the others are another
  // optimizer's (Muon's matrices: muon.h) and have no state here.
  std::function<bool(const model::ParameterSet::Slot&)> takes;
  // Sharded across these ranks when there are several (above; not owned,
  // outlives the optimizer). Only with `takes` empty.
  collective::Group* shard = nullptr;
};
// InvalidArgument naming the option: weight decay and clip >= 0, betas in
// [0, 1), eps > 0, slots >= 1, slot_bytes >= 1024.
Status Validate(const AdamWOptions& options);

// The gradients' global L2 norm: squares summed in double, one pass over
// each gradient buffer, one device sync. Internal when it is not finite.
StatusOr<double> GradNorm(const model::ParameterSet& params);
// The factor clipping scales the gradients by: max_grad_norm / (norm +
// 1e-6) when max_grad_norm > 0 and the norm is over it, else 1.
double ClipScale(double norm, double max_grad_norm);
// GradNorm, then every gradient scaled by ClipScale (nothing scaled when the
// norm is not finite).
StatusOr<double> ClipGradNorm(const model::ParameterSet& params, double max_grad_norm);


class AdamW final : public Optimizer {
 public:
  // `params` must outlive the optimizer; its gradients are enabled here.
  // InvalidArgument naming a bad option. Staged: `buffers` (nullptr: its
  // own) are the device buffers it streams through, shared with another
  // optimizer's state (Muon's).
  static StatusOr<std::unique_ptr<AdamW>> Create(model::ParameterSet& params, const AdamWOptions& options,
                                                 std::shared_ptr<StagingBuffers> buffers = nullptr);
  ~AdamW() override;

  // The gradients' global norm before clipping; Internal when it is not
  // finite (nothing updated).
  StatusOr<double> Step(double lr) override;
  int64_t steps() const override { return steps_; }

  OptimizerState State() const override;  // the tensors alias the optimizer's (copy before the next Step)
  Status Restore(const OptimizerState& state) override;
  bool sharded() const override { return shard_ != nullptr; }
  Status GatherState() override;
  Status Release() override;
  Status Resume() override;
  int64_t device_bytes() const override { return slabs_->device_bytes(); }
  int64_t resident_bytes() const override { return slabs_->resident_bytes(); }
  int64_t bucket_count() const { return slabs_->bucket_count(); }

 private:
  AdamW(model::ParameterSet& params, AdamWOptions options);
  // grad_scale: the clip's factor, still to be applied (fused only).
  void Update(const StateSlabs::Piece& piece, const std::vector<at::Tensor>& state, double lr, double grad_scale);
  // Sharded: the other ranks' elements from them (above).
  Status GatherParameters();
  // Item i's elements of its slot's parameter, flat.
  at::Tensor Owned(const at::Tensor& slot_tensor, size_t item) const;
  // The item of `slot` (sharded: none when another rank owns all of it).
  std::optional<size_t> ItemOf(size_t slot) const;

  model::ParameterSet& params_;
  AdamWOptions adamw_;
  bool master_ = false;               // bf16/fp16 parameters
  bool fused_ = false;                // the kernel takes these parameters (and options.fused)
  std::unique_ptr<StateSlabs> slabs_; // exp_avg, exp_avg_sq[, master] of the slots it takes
  std::vector<int64_t> begin_;        // per item: where its elements start in its slot (0 unsharded)
  std::vector<size_t> taken_;         // the slots AdamW updates (sharded: every slot)
  collective::Group* shard_ = nullptr; // sharded only
  OptimizerState gathered_;           // sharded: GatherState's, for State()
  int64_t steps_ = 0;
};

}  // namespace tandem::train
