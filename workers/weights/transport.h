// The weight-exchange transport interface (docs/weights.md; issue #15 item
// 1; DESIGN.md "The data flow of one RL step", phase SYNC). A publisher (the
// actor, on publish_weights{version}) makes one version of its parameters
// available under a source URI; readers (rollout, teacher, on
// load_weights{version, source}) open that URI with OpenWeightSource
// (weight_source.h), copy it into their own parameters and acknowledge.
// Every transport runs the one shared suite in tests/transport_suite.h.
//
// The contract of every WeightPublisher:
//   * Publish(version, params) copies `params`' buffers as they are now into
//     the transport and returns the source URI readers are told
//     ("shm:/tandem-<job>-<task>-v3", "file:/runs/x/weights/v3"). Once it
//     returns, the version is whole: a reader never sees part of it, and a
//     publisher killed mid-publish leaves nothing a reader accepts (they
//     refuse it with an error naming the source and why). Versions must grow
//     (FailedPrecondition otherwise). `params` is only read, and may be
//     changed by the caller as soon as Publish returns.
//   * A new version replaces the old: once Publish(v) returned, the previous
//     version's source is gone (shm: a reader that already opened it keeps
//     reading it; file: a reader opens the directory when it loads, and gets
//     NotFound), and leftovers of a publisher that died mid-publish are
//     removed.
//   * Non-durable transports (shm; later cuda-ipc) free a version when every
//     expected reader acknowledged, when it is replaced, on ReleaseAll and in
//     the destructor. ExportedBytes() is what they still hold (the handoff's
//     `ipc_exports` tag accounts for it). A durable transport (file) keeps
//     its latest version on disk past the publisher (the source a restarted
//     reader is sent): ExportedBytes() is 0 and ReleaseAll does nothing.
//   * Not thread-safe: one publisher per actor task, called from its
//     command loop.
// Readers (WeightSource): LoadInto validates before it copies (manifest,
// digest, names and shapes against the reader's model, naming the tensor
// that differs), converts dtypes, then the reader calls Acknowledge once its
// copy is complete (on a GPU: synchronised).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "workers/model/parameter_set.h"

namespace tandem::weights {

class WeightPublisher {
 public:
  virtual ~WeightPublisher() = default;
  virtual StatusOr<std::string> Publish(int64_t version, const model::ParameterSet& params) = 0;
  virtual uint64_t ExportedBytes() = 0;
  virtual void ReleaseAll() = 0;
  virtual std::string_view kind() const = 0;  // "shm", "file": the source URIs' scheme
};

}  // namespace tandem::weights
