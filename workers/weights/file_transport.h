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
// whole version or none (and waits while DIR/.v<version>.pending, which
// Publish holds throughout, says the version is coming), and a publisher killed mid-publish leaves only a
// .tmp directory, which the next Publish removes together with the versions
// older than the one just published. Versions outlive the publisher (a
// restarted reader is sent the last one): ExportedBytes is 0, ReleaseAll and
// the destructor leave them, and acknowledgements change nothing.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
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
// behind the ack"). Publish checks that the version grows, copies the
// parameters into a host snapshot (one copy per buffer, from the device when
// they are there; the caller may change them once it returns), queues it for
// the writer thread (FilePublisher's steps: a reader sees the whole version
// or none) and returns its file: URI. It never waits for a write: while one
// is in flight the new version waits as pending in a second snapshot, and a
// newer Publish replaces it (a version replaced before its write began is
// never written: readers are only sent the latest, and the durable copy
// catches up with it when the disk is slower than the steps).
// DIR/.v<version>.pending marks a queued version until its directory is in
// place; OpenFileSource waits on it. A write's error comes back from the
// next Publish and from Wait, and stays (the job's on_fault decides).
// The destructor waits for what is queued. Not thread-safe (one caller).
class BackgroundFilePublisher {
 public:
  // `before_write` (tests): runs on the writer thread before each write.
  explicit BackgroundFilePublisher(FileOptions options, std::function<void(int64_t version)> before_write = {});
  ~BackgroundFilePublisher();
  BackgroundFilePublisher(const BackgroundFilePublisher&) = delete;
  BackgroundFilePublisher& operator=(const BackgroundFilePublisher&) = delete;

  StatusOr<std::string> Publish(int64_t version, const model::ParameterSet& params);
  Status Wait();  // until nothing is queued or being written; the first write error
  const std::string& dir() const { return dir_; }

 private:
  void WriteLoop();

  const std::string dir_;
  const model::ModelConfig config_;
  const std::function<void(int64_t)> before_write_;
  FilePublisher file_;  // the writer thread's
  std::unique_ptr<model::ParameterSet> snapshots_[2];  // made when first needed
  int64_t last_version_ = -1;
  std::mutex mu_;
  std::condition_variable changed_;
  int writing_ = -1, pending_ = -1;  // snapshot slots, -1: none
  int64_t writing_version_ = -1, pending_version_ = -1;
  bool stop_ = false;
  Status result_;  // the first failed write's
  std::thread writer_;
};

// The file: reader of directory `dir` (opened at each LoadParameters).
// When `dir` is DIR/v<N> and is not there yet while DIR/.v<N>.tmp is (a
// publisher is writing it: a reader restarted right after a SYNC), loading
// waits for it, up to 120 s.
StatusOr<std::unique_ptr<WeightSource>> OpenFileSource(std::string dir);

}  // namespace tandem::weights
