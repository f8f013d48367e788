// libFuzzer target: what a weight reader takes from another process (issue
// #15): the manifest parser (ParseWeightManifest) and cuda-ipc's messages
// (ParseOffer, ParseAcked, ParseVersionMessage, ParseError, ParseIpcUri) on
// any bytes. Nothing may crash, throw, leak or trip a sanitizer; an
// accepted manifest passes ValidateWeightManifest and its ToJson parses
// back to the same JSON; an accepted offer's buffers end inside its
// allocation and it encodes and parses back; an accepted acked message
// likewise. Seeds: tests/fuzz/weights_messages/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "workers/weights/ipc_messages.h"
#include "workers/weights/weight_manifest.h"

namespace w = tandem::weights;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto m = w::ParseWeightManifest(text); m.ok()) {
    if (!w::ValidateWeightManifest(*m).ok()) std::abort();
    const std::string json = w::ToJson(*m).dump();
    auto back = w::ParseWeightManifest(json);
    if (!back.ok() || w::ToJson(*back).dump() != json) std::abort();
  }
  if (auto o = w::ipc::ParseOffer(text, 3); o.ok()) {
    uint64_t end = 0;
    w::ipc::IpcBufferOffsets(o->manifest, &end);
    if (o->version != 3 || end > o->allocation_bytes || o->allocation_bytes > w::ipc::kMaxAllocationBytes) std::abort();
    auto back = w::ipc::ParseOffer(w::ipc::EncodeOffer(*o), 3);
    if (!back.ok() || w::ipc::EncodeOffer(*back) != w::ipc::EncodeOffer(*o)) std::abort();
  }
  if (auto a = w::ipc::ParseAcked(text); a.ok()) {
    auto back = w::ipc::ParseAcked(w::ipc::EncodeAcked(*a));
    if (!back.ok() || back->version != a->version || back->acks != a->acks || back->expected != a->expected ||
        back->freed != a->freed)
      std::abort();
  }
  if (auto v = w::ipc::ParseVersionMessage(text, "fuzz"); v.ok()) {
    auto back = w::ipc::ParseVersionMessage(w::ipc::EncodeVersionMessage(*v), "fuzz");
    if (!back.ok() || *back != *v) std::abort();
  }
  (void)w::ipc::ParseError(text);
  if (auto u = w::ipc::ParseIpcUri(text); u.ok()) {
    const std::string uri = w::ipc::FormatIpcUri(*u);
    if (uri.rfind("ipc:", 0) != 0) std::abort();
    auto back = w::ipc::ParseIpcUri(std::string_view(uri).substr(4));
    if (!back.ok() || w::ipc::FormatIpcUri(*back) != uri) std::abort();
  }
  return 0;
}
