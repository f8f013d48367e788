// The element types of tensors in checkpoints, with the safetensors names
// (huggingface/safetensors, "Dtype": F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL).
//
// Contract: DTypeName and ParseDType are inverse on the ten names below
// (case-sensitive, as the format is); ParseDType returns nullopt for any
// other string, including the safetensors types tandem does not load
// (U16/U32/U64, the F8/F6/F4 families, C64). DTypeSize is the element size in
// bytes (BOOL is one byte). Torch-free: the model maps these to at::ScalarType.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace tandem::model {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// Every DType, in declaration order.
inline constexpr std::array<DType, 10> kAllDTypes = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16,
                                                     DType::kI64, DType::kI32, DType::kI16, DType::kI8,
                                                     DType::kU8,  DType::kBool};

constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 2;
    case DType::kI8: case DType::kU8: case DType::kBool: return 1;
  }
  return 0;
}

constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF64: return "F64";
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kI16: return "I16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

constexpr std::optional<DType> ParseDType(std::string_view name) {
  for (const DType t : kAllDTypes)
    if (DTypeName(t) == name) return t;
  return std::nullopt;
}

}  // namespace tandem::model
