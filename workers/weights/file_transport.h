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
#include <memory>
#include <string>
#include <string_view>
#include <thread>

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

// The same versions written behind the caller (docs/weights.md "Written
// behind the ack"): Publish copies the parameters into a host snapshot (one
// copy per buffer, from the device when they are there; the caller may
// change them once it returns), starts writing DIR/v<version> from the
// snapshot on a thread of its own (FilePublisher's steps: a reader sees the
// whole version or none) and returns its file: URI at once. One write at a
// time: Publish first waits for the previous one and returns its error, as
// does Wait; the destructor waits too. Not thread-safe.
class BackgroundFilePublisher {
 public:
  explicit BackgroundFilePublisher(FileOptions options);
  ~BackgroundFilePublisher();
  BackgroundFilePublisher(const BackgroundFilePublisher&) = delete;
  BackgroundFilePublisher& operator=(const BackgroundFilePublisher&) = delete;

  StatusOr<std::string> Publish(int64_t version, const model::ParameterSet& params);
  Status Wait();
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  model::ModelConfig config_;
  FilePublisher file_;
  std::unique_ptr<model::ParameterSet> host_;  // the snapshot, made at the first Publish
  std::thread writer_;
  Status result_;  // the last write's
};

// The file: reader of directory `dir` (opened at each LoadParameters).
// When `dir` is DIR/v<N> and is not there yet while DIR/.v<N>.tmp is (a
// publisher is writing it: a reader restarted right after a SYNC), loading
// waits for it, up to 120 s.
StatusOr<std::unique_ptr<WeightSource>> OpenFileSource(std::string dir);

}  // namespace tandem::weights
