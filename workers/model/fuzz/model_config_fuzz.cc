// libFuzzer target: the config.json parser (ParseModelConfig) on any bytes,
// as they come in a model directory (issue #13 point 1). Nothing may crash,
// throw, leak or trip a sanitizer; an accepted config must pass
// ValidateModelConfig, and written again for transformers (ToHfJson) must
// parse back to a config that writes the same JSON. Seeds:
// tests/fuzz/model_config/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "workers/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = tandem::model::ParseModelConfig(text, "fuzz/config.json");
  if (!c.ok()) return 0;
  if (!tandem::model::ValidateModelConfig(*c).ok()) std::abort();
  const nlohmann::json written = tandem::model::ToHfJson(*c);
  auto back = tandem::model::ModelConfigFromJson(written, "rewritten config.json");
  if (!back.ok() || tandem::model::ToHfJson(*back) != written) std::abort();
  return 0;
}
