#pragma once
// Element types as seen by kernel translation units, which include no PyTorch header (that keeps
// each .cu fast to compile); the torch-side glue maps at::ScalarType onto this.
#include <cstdint>

namespace cute_ops {

enum class DType : int8_t { kFloat16, kBFloat16, kFloat32 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
  }
  return "unknown";
}

}  // namespace cute_ops
