#pragma once
// gemm_pair: the torch-free interface between the op glue (gemm_pair_op.cpp) and the kernel
// translation units (one per tile config and dtype under instantiations/).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace cute_ops {

struct GemmPairParams {
  const void* a;   // [m, k], row stride lda
  const void* b0;  // [n0, k] contiguous (gated: gate and up rows interleaved by pack_gate_up)
  const void* b1;  // [n1, h_width] contiguous
  void* h;         // [m, h_width] contiguous: GEMM0's output, GEMM1's input
  void* out;       // [m, n1] contiguous
  float* partials0; // [splits0, m, n0] when GEMM0 is split along K, else nullptr
  float* partials; // [splits, m, n1] when GEMM1 is split along K, else nullptr
  const int4* order;  // [num_tiles] (gemm, m block, n tile, K-split), by ticket
  int* ticket;        // zeroed before the launch, like the counters below
  int* ready;         // [m_blocks * (tile_sync ? splits : 1)] GEMM0 tiles finished, per dependency
  int* arrived0;      // [m_blocks * n0_tiles] GEMM0 splits finished, per tile (split only)
  int* arrived;       // [m_blocks * n1_tiles] GEMM1 splits finished, per output tile (split only)
  int64_t lda;
  int m, k, n0, n1, h_width;
  int num_tiles, n0_tiles, n1_tiles;
  int splits0, split_k0;  // GEMM0's K-splits and the K columns each reads (split_k0 = k when not split)
  int splits, split_k1;   // GEMM1's K-splits and the h columns each reads (split_k1 = h_width when not split)
  int activation;  // gemm_pair::Activation
  bool tile_sync;  // wait per (row block, K-split) rather than per row block
  bool wait;       // false when stream order already guarantees h (the two-launch control)
  bool is_bf16;
};

// Tile configs, chosen by the op from M: the kernel's block_m and the order table must agree.
constexpr int kGemmPairBlockN = 128;       // both GEMMs; a gated GEMM0 tile makes 64 h columns
constexpr int kGemmPairGateBlock = 64;     // pack_gate_up's interleave: 64 gate rows, then 64 up rows
bool gemm_pair_supports_block_m(int block_m);

void run_gemm_pair(const GemmPairParams& params, int block_m, cudaStream_t stream);
// CTAs of the (block_m, dtype) config that fit on one SM of the current device.
int gemm_pair_ctas_per_sm(int block_m, bool is_bf16);

}  // namespace cute_ops
