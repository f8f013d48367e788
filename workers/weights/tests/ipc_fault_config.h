// The model of the cuda-ipc fault tests, shared by the test and its peer
// process (ipc_fault_test.cc, ipc_peer_main.cc): one dense layer of the
// suite's tiny config with a vocabulary of `vocab` (60000: ~31 MB fp32).
#pragma once

#include "workers/model/config.h"
#include "workers/model/tests/model_test_util.h"

namespace tandem::weights::testing {

inline model::ModelConfig FaultConfig(int64_t vocab) {
  model::ModelConfig c = model::testing::TinyConfig(/*moe=*/false, /*layers=*/1);
  c.vocab_size = vocab;
  return c;
}

}  // namespace tandem::weights::testing
