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
//   ipc:@NAME#vN, ipc:/PATH#vN a CUDA VMM export of version N on this GPU,
//                              served by an IpcPublisher (ipc_transport.h);
//   nccl:HOST:PORT/eE/nR#vN    version N broadcast to the R readers of an
//                              NcclPublisher's group (nccl_transport.h).
// OpenWeightSource validates what it can before any copy: an shm segment is
// mapped and its header and manifest checked (NotFound once freed,
// FailedPrecondition while unsealed, DataLoss when corrupt).
// LoadParameters (and LoadInto, its form for a whole model) copies every
// parameter into the existing buffers (same addresses: captured CUDA graphs
// and tagged-memory pools stay valid), converting dtypes (F32, BF16, F16,
// F64 to the reader's), with model::LoadWeights' rules: every tensor present
// with its exact shape, nothing else (a tied model tolerates and ignores a
// file's lm_head.weight). Names, shapes and dtypes are all checked before
// the first byte is written, so a mismatched model is refused with its
// parameters untouched; errors name the source and the tensor. An shm: load
// also checks the digest of every byte before it writes any; a file: load
// may still leave the parameters partly written when a file's bytes cannot
// be read midway. The caller keeps the previous version number on failure
// (Generator::LoadWeights).
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
  virtual Status LoadParameters(const model::ParameterSet& params) = 0;
  Status LoadInto(model::Transformer& model) { return LoadParameters(model.parameters()); }
  virtual Status Acknowledge() { return Status::Ok(); }
  virtual std::string Describe() const = 0;  // for logs: "file:/runs/x/weights/v3"
  // The version the source says it holds, when it says (shm: the manifest's).
  virtual std::optional<int64_t> version() const { return std::nullopt; }
};

// InvalidArgument for an empty or malformed source, and for a transport
// this build does not have; the shm: errors above.
StatusOr<std::unique_ptr<WeightSource>> OpenWeightSource(std::string_view source);

}  // namespace tandem::weights
