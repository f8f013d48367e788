// The `file` weight transport (transport.h; docs/weights.md "file"): the
// durable source. Each published version is a Hugging Face model directory
// DIR/v<version> (config.json and model.safetensors, HF names, the
// publisher's dtype; loadable by transformers and by LoadPretrained),
// given to readers as "file:DIR/v<version>" and read by OpenFileSource
// (any HF directory of the reader's shapes: weight_source.h's rules).
//
// Publish writes the directory under a temporary name DIR/.v<version>.tmp
// (the safetensors checkpoint writer, then config.json, each file fsync'd),
// fsyncs it, renames it to DIR/v<version> and fsyncs DIR: a reader sees the
// whole version or none, and a publisher killed mid-publish leaves only a
// .tmp directory, which the next Publish removes together with the versions
// older than the one just published. Versions outlive the publisher (a
// restarted reader is sent the last one): ExportedBytes is 0, ReleaseAll and
// the destructor leave them, and acknowledgements change nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "workers/model/config.h"
#include "workers/weights/transport.h"
#include "workers/weights/weight_source.h"

namespace tandem::weights {

struct FileOptions {
  std::string dir;             // created if missing
  model::ModelConfig config;   // written as each version's config.json
};

class FilePublisher final : public WeightPublisher {
 public:
  explicit FilePublisher(FileOptions options) : options_(std::move(options)) {}

  StatusOr<std::string> Publish(int64_t version, const model::ParameterSet& params) override;
  uint64_t ExportedBytes() override { return 0; }
  void ReleaseAll() override {}
  std::string_view kind() const override { return "file"; }

 private:
  FileOptions options_;
  int64_t last_version_ = -1;
};

// The file: reader of directory `dir` (opened at each LoadParameters).
StatusOr<std::unique_ptr<WeightSource>> OpenFileSource(std::string dir);

}  // namespace tandem::weights
