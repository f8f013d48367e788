// The flags the serving roles share (`tandem-worker rollout` and `teacher`;
// docs/inference.md). Compiled into tandem-worker itself, also in a build
// without LibTorch (the subcommands exist there and say so when run).
#pragma once

#include <string>

#include "common/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tandem::roles {

struct ServeOptions {
  std::string model_dir;        // config.json, *.safetensors, optionally tokenizer.json
  std::string device = "cpu";   // cpu (fp32) or cuda (bf16)
  std::string host = "127.0.0.1";
  int port = 0;                 // 0: the first of $TANDEM_PORTS, else any free port
  int threads = 0;              // LibTorch intra-op threads (0: its default)
  std::string port_file;        // write the bound port here once listening (tests, scripts)
  // The control channel: unix:PATH or tcp:HOST:PORT; empty: $TANDEM_CONTROL;
  // neither: none (the HTTP API only).
  std::string control;
  int reconnect_window_s = 60;  // after a lost connection to tandemd; 0: exit 1 at once
  // With a control channel: release every tag once loaded, before the hello
  // (the weights backed up to host), so that colocated workers start empty
  // and the daemon's first phase brings back what it needs.
  bool start_released = false;
  // Serve --model's weights for the whole job: load_weights is answered
  // without loading or acknowledging the source (a simulated user's or a
  // judge's model, handed off like a rollout but never the actor's).
  bool frozen_weights = false;
  double wait_for_model_s = 0;  // > 0: wait this long for model_dir/config.json (model_wait.h)
};

// --model, --device, --host, --port, --threads, --port-file, --control,
// --reconnect-window-s, --start-released, --frozen-weights, --wait-for-model.
void AddServeFlags(CLI::App& sub, ServeOptions& o);

// A serving role's exit status: 0 for ok, 2 for InvalidArgument (bad
// options or model files), else 1; an error is logged under `component`.
int ServeExitStatus(const std::string& component, const Status& st);

}  // namespace tandem::roles
