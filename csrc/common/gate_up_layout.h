#pragma once
// The packed gate/up weight of a SwiGLU MLP, as cute_ops.pack_gate_up lays it out: rows in blocks
// of kGateUpBlock gate rows followed by the same kGateUpBlock up rows, the last block holding the
// remaining r < kGateUpBlock of each. Kernels that produce silu(gate) * up from one pass over this
// weight (gemm_pair's GEMM0 tiles, gemv's row units) find a gate row's up row from it.
#if defined(__CUDACC__)
#define CUTE_OPS_GATE_UP_HD __host__ __device__
#else
#define CUTE_OPS_GATE_UP_HD
#endif

namespace cute_ops {

constexpr int kGateUpBlock = 64;

// Packed row of gate (is_up false) or up row j of an MLP with `inter` gate rows.
CUTE_OPS_GATE_UP_HD constexpr long long gate_up_row(long long j, long long inter, bool is_up) {
  const long long block = j / kGateUpBlock;
  const long long rows = inter - block * kGateUpBlock < kGateUpBlock ? inter - block * kGateUpBlock : kGateUpBlock;
  return block * 2 * kGateUpBlock + (j - block * kGateUpBlock) + (is_up ? rows : 0);
}

}  // namespace cute_ops
