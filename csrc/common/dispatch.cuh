#pragma once
// Turn run-time choices into template arguments (the static_switch idiom of FlashAttention-2).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "common/dtype.h"

// DTYPE_SWITCH(dtype, T, ...): runs the body with `T` bound to the CUDA element type.
#define CUTE_OPS_DTYPE_SWITCH(DTYPE, T, ...)                                           \
  [&] {                                                                                \
    switch (DTYPE) {                                                                   \
      case ::cute_ops::DType::kFloat16: { using T = __half; return __VA_ARGS__(); }    \
      case ::cute_ops::DType::kBFloat16: { using T = __nv_bfloat16; return __VA_ARGS__(); } \
      case ::cute_ops::DType::kFloat32: { using T = float; return __VA_ARGS__(); }     \
    }                                                                                  \
    throw std::invalid_argument("cute_ops: unsupported dtype");                       \
  }()

#define CUTE_OPS_BOOL_SWITCH(COND, NAME, ...)      \
  [&] {                                            \
    if (COND) {                                    \
      constexpr static bool NAME = true;           \
      return __VA_ARGS__();                        \
    } else {                                       \
      constexpr static bool NAME = false;          \
      return __VA_ARGS__();                        \
    }                                              \
  }()
