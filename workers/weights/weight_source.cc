// The weight sources (weight_source.h): the scheme picks the transport's
// reader (file_transport.h, shm_transport.h, ipc_transport.h, nccl_transport.h).
#include "workers/weights/weight_source.h"

#include "workers/weights/file_transport.h"
#include "workers/weights/ipc_transport.h"
#include "workers/weights/nccl_transport.h"
#include "workers/weights/shm_transport.h"

namespace tandem::weights {

StatusOr<std::unique_ptr<WeightSource>> OpenWeightSource(std::string_view source) {
  if (source.empty()) return InvalidArgument("load_weights.source: empty");
  std::string_view path = source;
  if (const size_t colon = source.find(':'); colon != std::string_view::npos && source[0] != '/') {
    const std::string_view scheme = source.substr(0, colon);
    if (scheme == "shm") return OpenShmSource(source.substr(colon + 1));
    if (scheme == "ipc") return OpenIpcSource(source.substr(colon + 1));
    if (scheme == "nccl") return OpenNcclSource(source.substr(colon + 1));
    if (scheme != "file")
      return InvalidArgument("load_weights.source: unknown scheme '" + std::string(scheme) + "' in '" +
                             std::string(source) + "' (expected file:DIR, shm:/NAME, ipc:@NAME#vVERSION or nccl:HOST:PORT/eEPOCH/nREADERS#vVERSION)");
    path = source.substr(colon + 1);
  }
  if (path.empty()) return InvalidArgument("load_weights.source: '" + std::string(source) + "' names no directory");
  return OpenFileSource(std::string(path));
}

}  // namespace tandem::weights
