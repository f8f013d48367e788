// The trainers' optimizer (docs/optimizers.md; issue #17): AdamW whose
// state may live off the GPU. torch.optim.AdamW's math, op for op as
// LibTorch's (decoupled weight decay, bias correction, eps outside the
// square root), over a ParameterSet's slots, weight decay on matrices
// (dim >= 2) only, after clipping the gradients' global norm
// (ClipGradNorm). The state is fp32 whatever the parameters' dtype:
// exp_avg, exp_avg_sq and, for bf16 or fp16 parameters, an fp32 master
// copy the update is applied to (the parameter is then its rounding).
//
// Residency, a setting of the same optimizer:
//   native  the state on the parameters' device, one tensor per slot's
//           moment: what the update reads and writes in place;
//   staged  the state in host slabs (pinned when the parameters are on a
//           GPU). A step streams it through `slots` buffers of `slot_bytes`
//           on the parameters' device: the slots' pieces (a slot larger
//           than a buffer is cut: the update is elementwise) are packed
//           into buckets; bucket i uses buffer i % slots: host -> buffer,
//           update, buffer -> host, in the device's stream order (a buffer
//           is reused only after its copy back; the last copy back blocks,
//           so the step's state is on the host when Step returns). The
//           optimizer's device memory never exceeds slots x slot_bytes,
//           and Release() frees even that (the handoff's optimizer tag: the
//           state is on the host already). On a CPU the buffers are host
//           memory: the same code, which CI runs.
// Not yet: the copies on their own streams overlapping the update (the
// GPU path runs them in the caller's stream); Muon as an optimizer (its
// update: muon.h).
//
// Equality: with fp32 parameters, native is bit for bit LibTorch's AdamW
// (the same ops on the same tensors); staged computes the same ops on
// pieces, equal up to the vectorised kernels' tails (tests bound it).
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
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/model/parameter_set.h"
#include "workers/train/optimizer.h"

namespace tandem::train {

enum class Residency { kNative, kStaged };

struct StagingOptions {
  Residency residency = Residency::kNative;
  int slots = 2;                           // staged: device buffers, >= 1
  int64_t slot_bytes = int64_t{128} << 20; // staged: each, >= 1 KiB
};

struct AdamWOptions {
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double max_grad_norm = 1.0;  // 0: no clipping
  StagingOptions staging;
  // The slots it updates (empty: every slot); the others are another
  // optimizer's (Muon's matrices: muon.h) and have no state here.
  std::function<bool(const model::ParameterSet::Slot&)> takes;
};
// InvalidArgument naming the option: weight decay and clip >= 0, betas in
// [0, 1), eps > 0, slots >= 1, slot_bytes >= 1024.
Status Validate(const AdamWOptions& options);

// From the roles' flags (docs/optimizers.md): residency "native" or
// "staged", slots >= 1, slot_mib in [1, 65536]; InvalidArgument naming the
// flag otherwise.
StatusOr<StagingOptions> MakeStaging(const std::string& residency, int64_t slots, int64_t slot_mib);

// "native", or "staged through 2 x 128 MiB buffers": for the roles' logs.
std::string Describe(const StagingOptions& staging);

// The gradients' global L2 norm (in double) before clipping; when over
// max_grad_norm > 0, every gradient is scaled by max_grad_norm / (norm +
// 1e-6). Internal when the norm is not finite (nothing scaled).
StatusOr<double> ClipGradNorm(const model::ParameterSet& params, double max_grad_norm);


class AdamW final : public Optimizer {
 public:
  // `params` must outlive the optimizer; its gradients are enabled here.
  // InvalidArgument naming a bad option.
  static StatusOr<std::unique_ptr<AdamW>> Create(model::ParameterSet& params, const AdamWOptions& options);
  ~AdamW() override;

  // The gradients' global norm before clipping; Internal when it is not
  // finite (nothing updated).
  StatusOr<double> Step(double lr) override;
  int64_t steps() const override { return steps_; }

  OptimizerState State() const override;  // the tensors alias the optimizer's (copy before the next Step)
  Status Restore(const OptimizerState& state) override;

  // Staged: frees the device buffers (the next Step allocates them again).
  void Release();
  // Bytes the optimizer holds on the parameters' device now (staged: its
  // buffers; native: the whole state).
  int64_t device_bytes() const;
  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Piece {
    size_t slot = 0;       // index into params.slots()
    int64_t begin = 0;     // elements into the slot
    int64_t length = 0;
    int64_t state = 0;     // elements into the state slabs
  };
  struct Bucket {
    std::vector<Piece> pieces;
    int64_t elements = 0;
  };
  AdamW(model::ParameterSet& params, AdamWOptions options);
  void Update(const Piece& piece, const at::Tensor& m, const at::Tensor& v, const at::Tensor& master, double lr);

  model::ParameterSet& params_;
  AdamWOptions adamw_;
  bool master_ = false;                     // bf16/fp16 parameters
  std::vector<size_t> owned_;               // the slots it updates, in order
  std::vector<int64_t> slot_state_;         // per slot: elements into the state slabs (owned slots only)
  int64_t total_ = 0;                       // state elements per kind
  at::Tensor exp_avg_, exp_avg_sq_, master_w_;  // flat fp32 slabs (native: on the device; staged: host)
  std::vector<Bucket> buckets_;             // staged
  std::vector<at::Tensor> buffers_;         // staged: the device buffers, allocated by Step
  int64_t steps_ = 0;
};

}  // namespace tandem::train
