#pragma once
// Membership in a generated supported set (csrc/<family>/<family>_supported.h, written by
// csrc/generate_instantiations.py). Header-only, no CUDA or torch: the CPU-only build uses it.
#include <cstddef>

namespace cute_ops::supported {

template <typename T, std::size_t N>
constexpr bool contains(const T (&values)[N], T value) {
  for (const T& v : values) {
    if (v == value) return true;
  }
  return false;
}

}  // namespace cute_ops::supported
