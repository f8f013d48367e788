// libFuzzer target: the safetensors header parser (ParseSafetensorsHeader)
// and the index parser (ParseSafetensorsIndex) on any bytes, as they come
// from a checkpoint file (issue #13 point 3). Nothing may crash, throw, leak
// or trip a sanitizer; an accepted header must describe tensors that lie
// inside the input, and what was accepted, written again by the writer
// (SafetensorsHeaderBytes + the data in its order), must parse to the same
// tensors and metadata. Seeds: tests/fuzz/safetensors/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "workers/model/safetensors_header.h"
#include "workers/model/safetensors_index.h"
#include "workers/model/safetensors_writer.h"

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

    std::vector<tandem::model::TensorToWrite> ts;
    for (const auto& t : h->tensors)
      ts.push_back({t.name, t.dtype, t.shape, data + h->data_offset + t.begin, t.end - t.begin});
    std::vector<size_t> order;
    auto head = tandem::model::SafetensorsHeaderBytes(ts, h->metadata, &order);
    if (!head.ok()) std::abort();  // anything the reader accepts, the writer writes
    std::string file = *head;
    for (const size_t i : order) file.append(static_cast<const char*>(ts[i].data), ts[i].nbytes);
    auto again = tandem::model::ParseSafetensorsHeader(
        std::span(reinterpret_cast<const std::byte*>(file.data()), file.size()), "rewritten.safetensors");
    if (!again.ok() || again->metadata != h->metadata || again->tensors.size() != ts.size()) std::abort();
    if (again->data_offset % 8 != 0) std::abort();
    std::map<std::string, const tandem::model::SafetensorsEntry*> by_name;
    for (const auto& t : again->tensors) by_name[t.name] = &t;
    for (const auto& t : ts) {
      const auto it = by_name.find(t.name);
      if (it == by_name.end() || it->second->dtype != t.dtype || it->second->shape != t.shape) std::abort();
      const auto* e = it->second;
      if ((again->data_offset + e->begin) % tandem::model::DTypeSize(e->dtype) != 0) std::abort();  // aligned
      if (file.compare(again->data_offset + e->begin, t.nbytes, static_cast<const char*>(t.data), t.nbytes) != 0)
        std::abort();
    }
  }
  (void)tandem::model::ParseSafetensorsIndex(std::string_view(reinterpret_cast<const char*>(data), size),
                                             "fuzz.index.json");
  return 0;
}
