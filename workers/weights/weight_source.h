// Where a reader's new weights come from (issue #14 item 4: the seam the
// weight-exchange transports of issue #15 implement; DESIGN.md "Layout of
// workers/", weights/).
//
// A load_weights{version, source} command names its source as a URI:
//   file:DIR (or a bare DIR)   a Hugging Face model directory (config.json,
//                              *.safetensors): the actor's durable copy, a
//                              checkpoint, another model of the same shapes;
//   ipc:, shm:, nccl:          the exchange transports (issue #15): refused
//                              as InvalidArgument until they exist.
// LoadInto copies every parameter into the model's existing buffers (same
// addresses: captured CUDA graphs and tagged-memory pools stay valid),
// converting dtypes, with model::LoadWeights' rules (every tensor present with
// its exact shape, nothing else). Errors name the source and the tensor; a
// failed load may leave the parameters partly written, and the caller
// keeps the previous version number (Generator::LoadWeights).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "workers/model/transformer.h"

namespace tandem::weights {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual Status LoadInto(model::Transformer& model) = 0;
  virtual std::string Describe() const = 0;  // for logs: "file:/runs/x/weights/v3"
};

// InvalidArgument for an empty or malformed source, and for a transport
// this build does not have.
StatusOr<std::unique_ptr<WeightSource>> OpenWeightSource(std::string_view source);

}  // namespace tandem::weights
