// Where a reader's new weights come from (issue #14 item 4: the seam the
// weight-exchange transports of issue #15 implement; DESIGN.md "Layout of
// workers/", weights/; docs/weights.md "Sources").
//
// A load_weights{version, source} command names its source as a URI:
//   file:DIR (or a bare DIR)   a Hugging Face model directory (config.json,
//                              *.safetensors): the actor's durable copy
//                              (file_transport.h), a checkpoint, another
//                              model of the same shapes;
//   shm:/NAME                  a POSIX shared-memory segment a ShmPublisher
//                              wrote (shm_transport.h);
//   ipc:, nccl:                the GPU transports (issue #15): refused as
//                              InvalidArgument until they exist.
// OpenWeightSource validates what it can before any copy: an shm segment is
// mapped and its header and manifest checked (NotFound once freed,
// FailedPrecondition while unsealed, DataLoss when corrupt).
// LoadInto copies every parameter into the model's existing buffers (same
// addresses: captured CUDA graphs and tagged-memory pools stay valid),
// converting dtypes, with model::LoadWeights' rules (every tensor present with
// its exact shape, nothing else). Errors name the source and the tensor. A
// file: load may leave the parameters partly written when a file is bad
// midway; an shm: load checks the manifest, the shapes and the digest of
// every byte before it writes any. The caller keeps the previous version
// number on failure (Generator::LoadWeights).
// Acknowledge tells the publisher this reader is done with the version
// (after LoadInto succeeded and, on a GPU, the copy is synchronised); the
// last expected reader's ack frees a non-durable version (transport.h).
// Idempotent; a no-op for file:.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "workers/model/transformer.h"

namespace tandem::weights {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual Status LoadInto(model::Transformer& model) = 0;
  virtual Status Acknowledge() { return Status::Ok(); }
  virtual std::string Describe() const = 0;  // for logs: "file:/runs/x/weights/v3"
  // The version the source says it holds, when it says (shm: the manifest's).
  virtual std::optional<int64_t> version() const { return std::nullopt; }
};

// InvalidArgument for an empty or malformed source, and for a transport
// this build does not have; the shm: errors above.
StatusOr<std::unique_ptr<WeightSource>> OpenWeightSource(std::string_view source);

}  // namespace tandem::weights
