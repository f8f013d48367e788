// The optimizer's residency flags of the training roles (sft, the actor;
// docs/optimizers.md). Torch- and CLI11-free (the options structs carry
// it); train::MakeStaging checks the values.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::roles {

struct OptimizerFlags {
  std::string residency = "native";  // native | staged
  int64_t slots = 2;                 // staged: device buffers
  int64_t slot_mib = 128;            // staged: MiB each
};

// `App`: CLI::App (a template: this header needs no CLI11).
template <class App>
void AddOptimizerFlags(App* s, OptimizerFlags& f) {
  s->add_option("--optimizer-residency", f.residency,
                "AdamW's state: native (on the parameters' device) or staged (host, streamed through buffers)")
      ->capture_default_str();
  s->add_option("--optimizer-slots", f.slots, "staged: device buffers the state streams through")->capture_default_str();
  s->add_option("--optimizer-slot-mib", f.slot_mib, "staged: MiB per buffer")->capture_default_str();
}

}  // namespace tandem::roles
