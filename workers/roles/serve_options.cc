// The serving roles' common flags (serve_options.h).
#include "workers/roles/serve_options.h"

#include <CLI/CLI.hpp>

#include "common/log.h"

namespace tandem::roles {

void AddServeFlags(CLI::App& s, ServeOptions& o) {
  s.add_option("--model", o.model_dir, "Hugging Face model directory (config.json, *.safetensors, tokenizer.json)")
      ->required();
  s.add_option("--device", o.device, "cpu (fp32) or cuda (bf16)")->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  s.add_option("--host", o.host, "listen address (loopback unless you mean otherwise)")->capture_default_str();
  s.add_option("--port", o.port, "listen port (default: the first of $TANDEM_PORTS, else any free port)");
  s.add_option("--threads", o.threads, "LibTorch intra-op threads (0: its default)");
  s.add_option("--port-file", o.port_file, "write the bound port here once listening ({rank}: $TANDEM_RANK)");
  s.add_option("--control", o.control, "tandemd's control channel, unix:PATH or tcp:HOST:PORT (default: $TANDEM_CONTROL)");
  s.add_option("--reconnect-window-s", o.reconnect_window_s, "reconnect to a restarted tandemd for this long")
      ->capture_default_str();
  s.add_option("--wait-for-model", o.wait_for_model_s, "wait up to this many seconds for --model to appear (0: it must exist)");
  s.add_flag("--start-released", o.start_released,
             "with a control channel: release every tag once loaded, before joining tandemd");
  s.add_flag("--frozen-weights", o.frozen_weights,
             "keep --model's weights: load_weights is acknowledged without loading (a simulated user's model)");
}

int ServeExitStatus(const std::string& component, const Status& st) {
  if (st.ok()) return 0;
  log::Error(component, "{}", st.ToString());
  return st.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace tandem::roles
