// Native or staged optimizer state (state_slabs.h).
#include "workers/train/state_slabs.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#ifdef TANDEM_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tandem::train {

StatusOr<StagingOptions> MakeStaging(const std::string& residency, int64_t slots, int64_t slot_mib) {
  StagingOptions s;
  if (residency == "staged") {
    s.residency = Residency::kStaged;
  } else if (residency != "native") {
    return InvalidArgument("--optimizer-residency: expected native or staged, got \"" + residency + "\"");
  }
  if (slots < 1 || slots > 1024) return InvalidArgument("--optimizer-slots: expected 1 to 1024, got " + std::to_string(slots));
  if (slot_mib < 1 || slot_mib > 65536)
    return InvalidArgument("--optimizer-slot-mib: expected 1 to 65536, got " + std::to_string(slot_mib));
  s.slots = static_cast<int>(slots);
  s.slot_bytes = slot_mib << 20;
  return s;
}

std::string Describe(const StagingOptions& s) {
  if (s.residency == Residency::kNative) return "native";
  return "staged through " + std::to_string(s.slots) + " x " + std::to_string(s.slot_bytes >> 20) + " MiB buffers";
}

// Per buffer: the streams that copy in, update and copy out, and the
// events that chain them (state_slabs.h). Empty on a CPU.
struct StagingBuffers::Pipeline {
#ifdef TANDEM_TORCH_CUDA
  struct Slot {
    c10::cuda::CUDAStream in, compute, out;
    at::cuda::CUDAEvent copied_in, updated, copied_out;
  };
  explicit Pipeline(at::Device device, int slots) {
    for (int i = 0; i < slots; ++i) {
      slots_.push_back(std::make_unique<Slot>(Slot{c10::cuda::getStreamFromPool(false, device.index()),
                                                   c10::cuda::getStreamFromPool(false, device.index()),
                                                   c10::cuda::getStreamFromPool(false, device.index()),
                                                   {}, {}, {}}));
    }
  }
  std::vector<std::unique_ptr<Slot>> slots_;
#endif
};

StagingBuffers::StagingBuffers(const StagingOptions& options, at::Device device) : options_(options), device_(device) {
#ifdef TANDEM_TORCH_CUDA
  if (device.is_cuda()) pipeline_ = std::make_unique<Pipeline>(device, options.slots);
#endif
}

StagingBuffers::~StagingBuffers() = default;

at::Tensor StagingBuffers::Get(size_t i) {
  while (buffers_.size() <= i)
    buffers_.push_back(at::empty({options_.slot_bytes / 4}, at::TensorOptions().dtype(at::kFloat).device(device_)));
  return buffers_[i];
}

int64_t StagingBuffers::bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor& b : buffers_) bytes += static_cast<int64_t>(b.nbytes());
  return bytes;
}

StatusOr<std::unique_ptr<StateSlabs>> StateSlabs::Create(std::vector<Item> items, int kinds, const StagingOptions& staging,
                                                         at::Device device, std::shared_ptr<StagingBuffers> buffers) {
  std::unique_ptr<StateSlabs> s(new StateSlabs());
  s->items_ = std::move(items);
  s->kinds_ = kinds;
  s->staging_ = staging;
  s->device_ = device;
  for (const Item& item : s->items_) {
    s->offset_.push_back(s->total_);
    s->total_ += item.numel;
  }
  if (s->staged()) {
    if (!buffers) buffers = std::make_shared<StagingBuffers>(staging, device);
    s->buffers_ = std::move(buffers);
    // Consecutive pieces: a bucket's state is one contiguous range of the slabs.
    const int64_t capacity = s->Capacity();
    for (size_t i = 0; i < s->items_.size(); ++i) {
      const Item& item = s->items_[i];
      if (item.unit > capacity)
        return InvalidArgument("optimizer staging: " + item.name + " needs " + std::to_string(item.unit * 4 * kinds) +
                               " bytes of buffer in one piece (" + std::to_string(kinds) +
                               " fp32 state tensors), the buffers have " + std::to_string(staging.slot_bytes) +
                               ": raise --optimizer-slot-mib");
      for (int64_t begin = 0; begin < item.numel;) {
        if (s->buckets_.empty() || capacity - s->buckets_.back().elements < item.unit) {
          s->buckets_.push_back({{}, s->offset_[i] + begin, 0});
        }
        Bucket& b = s->buckets_.back();
        const int64_t room = (capacity - b.elements) / item.unit * item.unit;
        const int64_t length = std::min(item.numel - begin, room);
        b.pieces.push_back({i, begin, length});
        b.elements += length;
        begin += length;
      }
    }
  }
  try {
    at::TensorOptions where = at::TensorOptions().dtype(at::kFloat).device(s->staged() ? at::Device(at::kCPU) : device);
    if (s->staged() && device.is_cuda()) where = where.pinned_memory(true);
    for (int k = 0; k < kinds; ++k) s->slabs_.push_back(at::zeros({s->total_}, where));
  } catch (const std::exception& e) {
    return Internal(std::string("allocating the optimizer's state: ") + e.what());
  }
  return s;
}

// A resume's copies to the device, on their own stream: `done` follows them.
struct StateSlabs::Resuming {
#ifdef TANDEM_TORCH_CUDA
  at::cuda::CUDAEvent done;
#endif
};

StateSlabs::~StateSlabs() = default;

void StateSlabs::Settle() const {
  if (!resuming_) return;
#ifdef TANDEM_TORCH_CUDA
  resuming_->done.block(c10::cuda::getCurrentCUDAStream(device_.index()));
#endif
  resuming_.reset();
}

at::Tensor StateSlabs::View(int kind, size_t item) const {
  Settle();
  return slabs_[static_cast<size_t>(kind)].narrow(0, offset_[item], items_[item].numel);
}

void StateSlabs::Update(const UpdateFn& fn, int only_kind) {
  std::vector<int> kinds;
  for (int k = 0; k < kinds_; ++k)
    if (only_kind < 0 || k == only_kind) kinds.push_back(k);
  const size_t n = kinds.size();
  std::vector<at::Tensor> views(n);
  if (!staged()) {
    if (Status st = Resume(); !st.ok()) throw std::runtime_error(st.message());
    for (size_t i = 0; i < items_.size(); ++i) {
      for (size_t k = 0; k < n; ++k) views[k] = View(kinds[k], i);
      fn({i, 0, items_[i].numel}, views);
    }
    return;
  }
  const int64_t capacity = Capacity();
  const size_t count = std::min(static_cast<size_t>(staging_.slots), buckets_.size());
  std::vector<at::Tensor> host(n), staged(n);
  // Bucket b's host and buffer ranges, and its pieces through fn.
  auto stage = [&](size_t b) {
    const Bucket& bucket = buckets_[b];
    const at::Tensor buffer = buffers_->Get(b % count);
    for (size_t k = 0; k < n; ++k) {
      host[k] = slabs_[static_cast<size_t>(kinds[k])].narrow(0, bucket.first, bucket.elements);
      staged[k] = buffer.narrow(0, static_cast<int64_t>(k) * capacity, bucket.elements);
    }
  };
  auto update = [&](size_t b) {
    const Bucket& bucket = buckets_[b];
    for (const Piece& piece : bucket.pieces) {
      const int64_t at = offset_[piece.item] + piece.begin - bucket.first;
      for (size_t k = 0; k < n; ++k) views[k] = staged[k].narrow(0, at, piece.length);
      fn(piece, views);
    }
  };
#ifdef TANDEM_TORCH_CUDA
  if (StagingBuffers::Pipeline* pipe = buffers_->pipeline()) {
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device_.index());
    at::cuda::CUDAEvent gradients;
    gradients.record(caller);
    for (size_t b = 0; b < buckets_.size(); ++b) {
      StagingBuffers::Pipeline::Slot& slot = *pipe->slots_[b % count];
      stage(b);
      {
        c10::cuda::CUDAStreamGuard on(slot.in);
        slot.copied_out.block(slot.in);  // the buffer's previous bucket is home
        for (size_t k = 0; k < n; ++k) staged[k].copy_(host[k], /*non_blocking=*/true);
        slot.copied_in.record(slot.in);
      }
      {
        c10::cuda::CUDAStreamGuard on(slot.compute);
        gradients.block(slot.compute);
        slot.copied_in.block(slot.compute);
        update(b);
        slot.updated.record(slot.compute);
      }
      {
        c10::cuda::CUDAStreamGuard on(slot.out);
        slot.updated.block(slot.out);
        for (size_t k = 0; k < n; ++k) host[k].copy_(staged[k], /*non_blocking=*/true);
        slot.copied_out.record(slot.out);
      }
    }
    for (size_t i = 0; i < count; ++i) {
      pipe->slots_[i]->updated.block(caller);
      pipe->slots_[i]->copied_out.synchronize();
    }
    return;
  }
#endif
  for (size_t b = 0; b < buckets_.size(); ++b) {
    stage(b);
    for (size_t k = 0; k < n; ++k) staged[k].copy_(host[k]);
    update(b);
    for (size_t k = 0; k < n; ++k) host[k].copy_(staged[k]);
  }
}

namespace {

// What was freed goes back to the device, not to LibTorch's cache: the
// handoff's reading must fall by it.
void ReturnToDevice(at::Device device) {
#ifdef TANDEM_TORCH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)device;
#endif
}

}  // namespace

Status StateSlabs::Release() {
  try {
    if (staged()) {
      buffers_->Release();
      ReturnToDevice(device_);
      return Status::Ok();
    }
    if (released_ || device_.is_cpu()) {  // on a CPU already host memory
      released_ = true;
      return Status::Ok();
    }
    Settle();  // a resume's copies read host_: they finish first
    if (host_.empty()) {
      const at::TensorOptions host = at::TensorOptions().dtype(at::kFloat).device(at::kCPU).pinned_memory(true);
      for (int k = 0; k < kinds_; ++k) host_.push_back(at::empty({total_}, host));
    }
    for (int k = 0; k < kinds_; ++k) {
      host_[static_cast<size_t>(k)].copy_(slabs_[static_cast<size_t>(k)]);  // blocking: done before the slab is freed
      slabs_[static_cast<size_t>(k)] = host_[static_cast<size_t>(k)];
    }
    released_ = true;
    ReturnToDevice(device_);
  } catch (const std::exception& e) {
    return Internal(std::string("releasing the optimizer's state: ") + e.what());
  }
  return Status::Ok();
}

void StateSlabs::ResumeOnDevice() {
#ifdef TANDEM_TORCH_CUDA
  const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device_.index());
  const c10::cuda::CUDAStream copy = c10::cuda::getStreamFromPool(false, device_.index());
  // The allocator hands out memory the caller's queued kernels may still use.
  at::cuda::CUDAEvent ready;
  ready.record(caller);
  auto resuming = std::make_unique<Resuming>();
  std::vector<at::Tensor> slabs;
  for (int k = 0; k < kinds_; ++k) slabs.push_back(at::empty({total_}, at::TensorOptions().dtype(at::kFloat).device(device_)));
  {
    c10::cuda::CUDAStreamGuard on(copy);
    ready.block(copy);
    for (int k = 0; k < kinds_; ++k) {
      slabs[static_cast<size_t>(k)].copy_(host_[static_cast<size_t>(k)], /*non_blocking=*/true);
      slabs[static_cast<size_t>(k)].record_stream(copy);  // freed early, its memory still waits for the copy
    }
    resuming->done.record(copy);
  }
  slabs_ = std::move(slabs);
  resuming_ = std::move(resuming);
#else
  for (at::Tensor& slab : slabs_) slab = slab.to(device_);
#endif
}

Status StateSlabs::Resume() {
  try {
    if (staged()) {
      for (size_t i = 0; i < std::min(static_cast<size_t>(staging_.slots), buckets_.size()); ++i) buffers_->Get(i);
      return Status::Ok();
    }
    if (!released_) return Status::Ok();
    if (device_.is_cuda()) ResumeOnDevice();  // else the slabs never left the host
    released_ = false;
  } catch (const std::exception& e) {
    return Internal(std::string("resuming the optimizer's state: ") + e.what());
  }
  return Status::Ok();
}

int64_t StateSlabs::device_bytes() const {
  if (staged()) return buffers_->bytes();
  return released_ ? 0 : resident_bytes();
}

int64_t StateSlabs::resident_bytes() const {
  if (staged()) return std::min(buffers_->capacity_bytes(), static_cast<int64_t>(buckets_.size()) * staging_.slot_bytes);
  return total_ * 4 * kinds_;
}

}  // namespace tandem::train
