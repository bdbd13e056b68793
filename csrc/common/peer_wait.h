#pragma once
// For kernels that spin on memory another GPU writes (the tensor-parallel exchanges): the GPU's
// global nanosecond timer, and how long such a wait goes on before it traps, so that a rank whose
// peer died or took another path fails instead of hanging forever.
#include <cstdint>

namespace cute_ops {

constexpr uint64_t kPeerWaitTimeoutNs = 30ull * 1000 * 1000 * 1000;

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace cute_ops
