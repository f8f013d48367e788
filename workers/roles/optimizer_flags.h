// The optimizer flags of the training roles (sft, the actor;
// docs/optimizers.md): which optimizer, and where AdamW's state lives. Torch- and CLI11-free (the options structs carry
// it); train::MakeStaging and train::MakeOptimizer check the values. Muon
// in the roles scales its update to AdamW's RMS (Moonlight's recipe), so
// one --lr schedule serves both.
//
// A run's fingerprint names the optimizer when it is not adamw (a resume
// refuses another); the residency is not in it (the same updates).
#pragma once

#include <cstdint>
#include <string>

namespace tandem::roles {

struct OptimizerFlags {
  std::string name = "adamw";        // adamw | muon
  double muon_lr_scale = 1.0;        // muon: its matrices' rate over the step's lr
  std::string residency = "native";  // native | staged
  int64_t slots = 2;                 // staged: device buffers
  int64_t slot_mib = 128;            // staged: MiB each
};

// `App`: CLI::App (a template: this header needs no CLI11).
template <class App>
void AddOptimizerFlags(App* s, OptimizerFlags& f) {
  s->add_option("--optimizer", f.name, "adamw, or muon (Muon on the hidden matrices, AdamW on the rest)")
      ->capture_default_str();
  s->add_option("--muon-lr-scale", f.muon_lr_scale, "muon: its matrices' rate as a multiple of --lr")
      ->capture_default_str();
  s->add_option("--optimizer-residency", f.residency,
                "AdamW's state: native (on the parameters' device) or staged (host, streamed through buffers)")
      ->capture_default_str();
  s->add_option("--optimizer-slots", f.slots, "staged: device buffers the state streams through")->capture_default_str();
  s->add_option("--optimizer-slot-mib", f.slot_mib, "staged: MiB per buffer")->capture_default_str();
}

}  // namespace tandem::roles
