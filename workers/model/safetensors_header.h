// The safetensors header parser: a pure function over the bytes of a whole
// file (huggingface/safetensors, docs "Format"), which SafetensorsFile::Open
// runs on the mmap'ed file and tests/fuzz run on any bytes.
//
// Layout: 8 bytes little-endian u64 N, then N bytes of UTF-8 JSON
//   {"__metadata__": {str: str}, NAME: {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// (offsets relative to byte 8 + N), then the data, up to the end of the file.
//
// Contract: ParseSafetensorsHeader accepts what the official library
// accepts (safetensors `read_metadata` + `validate`), for the dtypes tandem
// loads, except three deliberate refusals of nonsense the official parser
// lets through: a key twice in one object, a key other than
// dtype/shape/data_offsets in a tensor entry, an empty tensor name. So:
// N <= 100,000,000 and 8 + N <= file size; the JSON nested at most
// kMaxJsonDepth levels, an object at the top, no NUL byte, no byte-order
// mark; dtype one of DType's names; shape and offsets non-negative integers
// (dims <= INT64_MAX, every partial product of the dims too); prod(shape) *
// DTypeSize == end - begin, computed without overflow; sorted by offsets,
// the tensors tile [0, file size - 8 - N) exactly: the first begins at 0,
// each begins where the previous ended (no hole, no overlap), the last ends
// at the end of the file (no trailing bytes). __metadata__ is an object of
// strings (or null, as the official parser allows). Any other input returns
// an error naming `file` and the tensor or header field; nothing throws.
// Codes: DataLoss when the file is shorter than the header says (a truncated
// file), InvalidArgument for everything else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/model/dtype.h"

namespace tandem::model {

// The largest header the official library reads (MAX_HEADER_SIZE).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// One tensor as the header describes it.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // [] is a 0-d tensor (one element)
  uint64_t begin = 0;          // data_offsets, relative to SafetensorsHeader::data_offset
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;  // N
  uint64_t data_offset = 0;   // 8 + N: where the data begins in the file
  // In data order (by offsets; tensors of zero bytes at one offset by name).
  std::vector<SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Parses and validates the header of the file whose complete contents are
// `file_bytes`; `file` names it in errors ("<file>: tensor \"x\": ...").
StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> file_bytes, std::string_view file);

}  // namespace tandem::model
