// libFuzzer target: the safetensors header parser (ParseSafetensorsHeader)
// and the index parser (ParseSafetensorsIndex) on any bytes, as they come
// from a checkpoint file (issue #13 point 3). Nothing may crash, throw, leak
// or trip a sanitizer; an accepted header must describe tensors that lie
// inside the input. Seeds: tests/fuzz/safetensors/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

#include "workers/model/safetensors_header.h"
#include "workers/model/safetensors_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto h = tandem::model::ParseSafetensorsHeader(bytes, "fuzz.safetensors");
  if (h.ok()) {
    uint64_t cursor = 0;
    for (const auto& t : h->tensors) {
      // Accepted means: tiles the data exactly, each tensor's size matching its shape.
      if (t.begin != cursor || t.end < t.begin || h->data_offset + t.end > size) std::abort();
      uint64_t n = tandem::model::DTypeSize(t.dtype);
      for (const int64_t d : t.shape) n *= static_cast<uint64_t>(d);
      if (n != t.end - t.begin) std::abort();
      cursor = t.end;
    }
    if (h->data_offset + cursor != size) std::abort();
  }
  (void)tandem::model::ParseSafetensorsIndex(std::string_view(reinterpret_cast<const char*>(data), size),
                                             "fuzz.index.json");
  return 0;
}
