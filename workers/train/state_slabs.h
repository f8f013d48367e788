// An optimizer's state in flat fp32 slabs, native or staged (issue #17
// item 4; docs/optimizers.md "Residency"), shared by AdamW and Muon.
//
// The state is `kinds` slabs (AdamW: exp_avg, exp_avg_sq[, master]; Muon:
// momentum[, master]), each holding every item (a parameter slot) at the
// same offset. Update(fn) calls fn once per piece of the items with the
// piece's range of each slab:
//
//   native  the slabs on the parameters' device; one piece per item, the
//           views of the slabs themselves (what the update reads and
//           writes in place);
//   staged  the slabs in host memory (pinned when the device is a GPU);
//           the items are packed in order into buckets of at most
//           slot_bytes / (4 x kinds) elements per kind, cut only at
//           multiples of their `unit` (AdamW: any element; Muon: a whole
//           matrix, never split); bucket i goes through buffer i % slots:
//           host -> buffer, fn, buffer -> host. On a GPU each buffer has
//           its own three streams (copy in, compute, copy out) chained by
//           events: bucket i's copy in waits for the copy out of the
//           bucket that last used its buffer, its update for its copy in
//           (and for the caller's stream: the gradients), its copy out for
//           its update; so the copies of one bucket overlap the updates of
//           the others. At the end the caller's stream waits for every
//           update and Update waits for every copy out: it returns with
//           the state on the host and the parameters ordered before the
//           caller's next kernel. On a CPU the same steps run in order.
//
// The buffers (StagingBuffers) may be shared by several slabs stepped one
// after the other (Muon's and its AdamW's): the optimizer's device memory
// never exceeds slots x slot_bytes. On a CPU the "device" is the host: the
// same code, which CI runs.
//
// Release() (the handoff's optimizer tag): staged frees the buffers, the
// state is on the host already; native copies the slabs to pinned host
// memory (allocated at the first release, kept for the next ones) and
// frees them on the device (on a GPU, LibTorch's cache is emptied after
// either). Resume() allocates staged buffers, or native slabs on the
// device and returns with their copies from the host still in flight on a
// stream of their own: the trainer's forward and backward run meanwhile,
// and the first use of the state (Update, View, Release) makes the
// caller's current stream wait for the copies (it does not block the
// host). Update resumes by itself. device_bytes() is what is held on the device now,
// resident_bytes() what is held once resumed (the tag's size).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::train {

enum class Residency { kNative, kStaged };

struct StagingOptions {
  Residency residency = Residency::kNative;
  int slots = 2;                           // staged: device buffers, >= 1
  int64_t slot_bytes = int64_t{128} << 20; // staged: each, >= 1 KiB
};

// From the roles' flags (docs/optimizers.md): residency "native" or
// "staged", slots in [1, 1024], slot_mib in [1, 65536]; InvalidArgument
// naming the flag otherwise.
StatusOr<StagingOptions> MakeStaging(const std::string& residency, int64_t slots, int64_t slot_mib);

// "native", or "staged through 2 x 128 MiB buffers": for the roles' logs.
std::string Describe(const StagingOptions& staging);

// The bounded device buffers: up to `slots` fp32 buffers of slot_bytes,
// allocated when first asked for, freed by Release.
class StagingBuffers {
 public:
  StagingBuffers(const StagingOptions& options, at::Device device);
  ~StagingBuffers();
  const StagingOptions& options() const { return options_; }
  at::Tensor Get(size_t i);  // i < slots; throws what LibTorch throws
  void Release() { buffers_.clear(); }
  int64_t bytes() const;
  int64_t capacity_bytes() const { return int64_t{options_.slots} * options_.slot_bytes; }

  // The GPU's streams and events per buffer (state_slabs.cc; null on a CPU).
  struct Pipeline;
  Pipeline* pipeline() { return pipeline_.get(); }

 private:
  StagingOptions options_;
  at::Device device_;
  std::vector<at::Tensor> buffers_;
  std::unique_ptr<Pipeline> pipeline_;
};

class StateSlabs {
 public:
  struct Item {
    size_t slot = 0;     // the caller's index (a parameter slot)
    std::string name;    // for errors
    int64_t numel = 0;
    int64_t unit = 1;    // staged pieces are cut at multiples of it; numel % unit == 0
  };
  struct Piece {
    size_t item = 0;     // index into items()
    int64_t begin = 0;   // elements into the item
    int64_t length = 0;
  };
  using UpdateFn = std::function<void(const Piece&, const std::vector<at::Tensor>& kinds)>;

  // Zeroed slabs of `kinds` kinds for `items` on `device` (staged: host).
  // Staged: `buffers` (nullptr: its own) must have the same staging
  // options; InvalidArgument naming an item whose unit does not fit a
  // bucket. Internal when allocation fails.
  static StatusOr<std::unique_ptr<StateSlabs>> Create(std::vector<Item> items, int kinds, const StagingOptions& staging,
                                                      at::Device device, std::shared_ptr<StagingBuffers> buffers);

  ~StateSlabs();
  const std::vector<Item>& items() const { return items_; }
  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }
  // Item `item`'s range of slab `kind`, flat, wherever the slab is now.
  at::Tensor View(int kind, size_t item) const;
  // Throws what LibTorch throws (the optimizers turn it into a Status).
  // only_kind >= 0: that slab alone is staged and passed (`kinds` has one
  // element): a second pass over one kind moves only its bytes.
  void Update(const UpdateFn& fn, int only_kind = -1);

  // Internal naming what LibTorch threw (an allocation or copy that failed).
  Status Release();
  Status Resume();
  bool released() const { return released_; }
  int64_t device_bytes() const;
  int64_t resident_bytes() const;

 private:
  struct Bucket {
    std::vector<Piece> pieces;
    int64_t first = 0;     // elements into the slabs
    int64_t elements = 0;
  };
  StateSlabs() = default;
  bool staged() const { return staging_.residency == Residency::kStaged; }
  // Orders the caller's stream after a resume's copies (nothing without one).
  void Settle() const;
  void ResumeOnDevice();  // native on a GPU: the slabs back from host_, asynchronously
  int64_t Capacity() const { return staging_.slot_bytes / (4 * kinds_); }

  std::vector<Item> items_;
  std::vector<int64_t> offset_;  // per item: elements into the slabs
  int kinds_ = 0;
  int64_t total_ = 0;
  StagingOptions staging_;
  at::Device device_ = at::Device(at::kCPU);
  std::vector<at::Tensor> slabs_;
  std::vector<Bucket> buckets_;               // staged
  std::shared_ptr<StagingBuffers> buffers_;   // staged
  bool released_ = false;                     // native: the slabs are on the host
  std::vector<at::Tensor> host_;              // native on a GPU: where a release puts the slabs (pinned)
  struct Resuming;                            // a resume's copies in flight (state_slabs.cc)
  mutable std::unique_ptr<Resuming> resuming_;
};

}  // namespace tandem::train
