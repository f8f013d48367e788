// libFuzzer target: the checkpoint manifest parser (ParseManifest) on any
// bytes, as they come off a damaged disk (issue #15 item 2). Nothing may
// crash, throw, leak or trip a sanitizer; an accepted manifest, written again
// by ManifestJson, must parse back to an equal manifest.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "workers/checkpoint/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = tandem::checkpoint::ParseManifest(text);
  if (!m.ok()) return 0;
  auto again = tandem::checkpoint::ManifestJson(*m);
  if (!again.ok()) std::abort();  // anything the reader accepts, the writer writes
  auto back = tandem::checkpoint::ParseManifest(*again);
  if (!back.ok()) std::abort();
  // Files come back sorted by path; compare as sets via the sorted writer output.
  auto twice = tandem::checkpoint::ManifestJson(*back);
  if (!twice.ok() || *twice != *again) std::abort();
  return 0;
}
