// The `shm` weight transport (transport.h; docs/weights.md "shm"): each
// published version is one POSIX shared-memory segment (shm_segment.h),
// named /tandem-<job>-<task>-v<version> and given to readers as
// "shm:/tandem-<job>-<task>-v<version>". For readers on the same host; the
// CPU path CI runs.
//
// ShmPublisher::Publish copies every parameter buffer into a new segment
// (one memcpy per buffer for host buffers, hashed in the same pass; device
// buffers are copied to it by LibTorch and then hashed), seals it, then
// unlinks every other segment of its prefix: the version it replaces and any
// leftover of a publisher of the same task that died mid-publish. The
// segment is freed when `expected_readers` readers acknowledged (the last
// one unlinks it), or by the next Publish, ReleaseAll, the destructor, or
// RemoveSegments("/tandem-<job>-") when the job ends (a publisher killed with
// SIGKILL runs no destructor).
//
// OpenShmSource("/name") maps and validates the segment (ShmSegment::Open);
// its LoadInto checks the reader's model against the manifest
// (CheckReaderMatches), verifies the buffers' digest, and only then copies
// (CopyIntoParameters). Acknowledge counts the reader's ack (once).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "workers/weights/transport.h"
#include "workers/weights/weight_source.h"

namespace tandem::weights {

struct ShmOptions {
  std::string job;   // TANDEM_JOB_ID
  std::string task;  // TANDEM_TASK_ID
  uint32_t expected_readers = 1;  // acks that free a version; 0: never by acks
};

class ShmPublisher final : public WeightPublisher {
 public:
  explicit ShmPublisher(ShmOptions options);
  ~ShmPublisher() override;
  ShmPublisher(const ShmPublisher&) = delete;
  ShmPublisher& operator=(const ShmPublisher&) = delete;

  StatusOr<std::string> Publish(int64_t version, const model::ParameterSet& params) override;
  uint64_t ExportedBytes() override;  // the current version's segment, 0 once freed
  void ReleaseAll() override;
  std::string_view kind() const override { return "shm"; }

  const std::string& prefix() const { return prefix_; }

 private:
  ShmOptions options_;
  std::string prefix_;
  std::string current_;  // the name of the last version published, "" if none
  int64_t last_version_ = -1;
};

// `name` is the part after "shm:" ("/tandem-j-t-v3").
StatusOr<std::unique_ptr<WeightSource>> OpenShmSource(std::string_view name);

}  // namespace tandem::weights
