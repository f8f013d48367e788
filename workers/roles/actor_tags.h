// The actor's tagged memory (docs/handoff.md "The actor's memory"; issue
// #17 item 6, issue #15's `ipc_exports`):
//
// `optimizer`: the optimizer's state on the device.
//   hello       declares {"optimizer", resident_bytes(), backup: native}
//               (a native state is copied to the host on release; a staged
//               one is there already and only its buffers go)
//   release     Optimizer::Release: the device memory is freed (LibTorch's
//               cache emptied on a GPU), so tandemd's reading falls by it
//   resume      Optimizer::Resume (a step resumes by itself too)
// `ipc_exports` (rank 0 publishing over cuda-ipc only: `exports` given):
// the version a cuda-ipc publisher holds on the GPU until its readers ack.
//   hello       declares {"ipc_exports", 0, backup: none}
//   release     WeightPublisher::ReleaseAll (tandemd sends it after every
//               rollout loaded: ordering rule H8); what a reader that had
//               not acked yet holds stays mapped in that reader
//   resume      nothing to bring back (the next publish exports anew)
// residency: each tag's bytes on the device, and the worker's own
// accounting of their sum ("pool"; total 0: no capacity of its own).
//
// Any other tag is NotFound (the actor's parameters, gradients and
// activations are not tagged). The optimizer may be stepped on another
// thread than the one answering tandemd (a replica's): both hold lock()
// while they touch it. The exports are touched on the control thread only
// (publish_weights, release, residency).
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "common/control/control_messages.h"
#include "common/status.h"
#include "workers/runtime/control_client.h"
#include "workers/train/optimizer.h"
#include "workers/weights/transport.h"

namespace tandem::roles {

class ActorTags {
 public:
  ActorTags(train::Optimizer& optimizer, bool staged, weights::WeightPublisher* exports = nullptr)
      : optimizer_(optimizer), staged_(staged), exports_(exports) {}

  // The tags in the hello and the residency, before the client is built.
  void Declare(control::ControlClient::Options& options);
  // release and resume on `client`.
  void Serve(control::ControlClient& client);
  std::unique_lock<std::mutex> lock() const { return std::unique_lock<std::mutex>(mu_); }

  // What Serve's handlers do: `tags` (none: all of them) released or
  // resumed; {"freed_bytes" | "mapped_bytes": n}. NotFound naming a tag the
  // actor does not have.
  StatusOr<nlohmann::json> Move(const std::vector<std::string>& tags, bool release);
  control::Residency Residency() const;

 private:
  train::Optimizer& optimizer_;
  bool staged_;
  weights::WeightPublisher* exports_;
  mutable std::mutex mu_;
};

}  // namespace tandem::roles
