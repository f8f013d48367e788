// The actor's tagged memory (docs/handoff.md "The actor's memory"; issue
// #17 item 6): the optimizer's state on the device as the handoff's
// `optimizer` tag.
//
//   hello       declares {"optimizer", resident_bytes(), backup: native}
//               (a native state is copied to the host on release; a staged
//               one is there already and only its buffers go)
//   release     Optimizer::Release: the device memory is freed (LibTorch's
//               cache emptied on a GPU), so tandemd's reading falls by it
//   resume      Optimizer::Resume (a step resumes by itself too)
//   residency   {"optimizer": device_bytes()} and the worker's own
//               accounting of it ("pool"; total 0: no capacity of its own)
//
// A tag other than "optimizer" is NotFound (the actor's parameters,
// gradients and activations are not tagged). The optimizer may be stepped
// on another thread than the one answering tandemd (a replica's): both
// hold lock() while they touch it.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "common/control/control_messages.h"
#include "common/status.h"
#include "workers/runtime/control_client.h"
#include "workers/train/optimizer.h"

namespace tandem::roles {

class OptimizerTag {
 public:
  OptimizerTag(train::Optimizer& optimizer, bool staged) : optimizer_(optimizer), staged_(staged) {}

  // The tag in the hello and the residency, before the client is built.
  void Declare(control::ControlClient::Options& options);
  // release and resume on `client`.
  void Serve(control::ControlClient& client);
  std::unique_lock<std::mutex> lock() const { return std::unique_lock<std::mutex>(mu_); }

 private:
  control::Residency Residency() const;
  StatusOr<nlohmann::json> Move(const control::Command& c, bool release);
  train::Optimizer& optimizer_;
  bool staged_;
  mutable std::mutex mu_;
};

}  // namespace tandem::roles
