#pragma once
// gemm_pair: the torch-free interface between the op glue (gemm_pair_op.cpp) and the kernel
// translation units (one per tile config and dtype under instantiations/). make_params
// (params.h) fills GemmPairParams for a call; the op and perf/tools/gemm_pair_timeline.cu both
// use it.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gemm_pair/tile_order.h"

namespace cute_ops {

// The fields of the two GEMMs have the same names, suffixed 0 for GEMM0 (act(a b0^T) -> h) and 1
// for GEMM1 (h b1^T -> out). A GEMM split along K writes one float32 partial per split; the split
// that arrives last at its tile's counter sums them (epilogue.h).
//
// The members keep the byte offsets the kernels were tuned with. The compiler's code for the
// kernels depends on them (which fields it loads as pairs): one struct per GEMM (gemm[0],
// gemm[1]) changed every kernel's SASS and took block_m 64 with GEMM0's K-split from 85 to 106
// registers, and even an array of two per field changed the code. Compare the kernels' SASS
// (cuobjdump -sass) before and after moving or adding fields.
struct GemmPairParams {
  const void* a;      // [m, k], row stride lda
  const void* b0;     // [n0, k] contiguous (gated: gate and up rows interleaved by pack_gate_up)
  const void* b1;     // [n1, h_width] contiguous
  void* h;            // [m, h_width] contiguous: GEMM0's output, GEMM1's input
  void* out;          // [m, n1] contiguous
  float* partials0;   // [splits0, m, n0] float32 when GEMM0 is split along K, else nullptr
  float* partials1;   // [splits1, m, n1] float32 when GEMM1 is split along K (or the SM90 kernel's
                      // folded running sum: Epilogue::running_tile), else nullptr
  const int4* order;  // [num_tiles] (gemm, m block, n tile, K-split), by ticket
  int* ticket;        // zero at the launch, like every counter, and left zero by it (params.h)
  int* ready;         // [m_blocks * (tile_sync ? splits1 : 1)] GEMM0 tiles finished, per dependency
  int* arrived0;      // [m_blocks * tiles0] GEMM0 splits finished, per tile (split only, else nullptr)
  int* arrived1;      // [m_blocks * tiles1] GEMM1 splits finished, per tile (split only, else nullptr;
                      // SM90 folded splits count folds: Epilogue::fold_split)
  int64_t lda;
  int m, k, n0, n1, h_width;
  int num_tiles;      // tickets; the SM80 kernel's grid (one CTA per ticket)
  int tiles0, tiles1;     // output tiles a row block: of h's columns (GEMM0), of out's (GEMM1)
  int splits0, split_k0;  // GEMM0's K-splits and the K columns each reads (k when not split)
  int splits1, split_k1;  // GEMM1's K-splits and the h columns each reads (h_width when not split)
  int activation;  // gemm_pair::Activation
  bool tile_sync;  // wait per (row block, GEMM1 K-split) rather than per row block
  bool wait;       // false when stream order already guarantees h (the two-launch control)
  bool is_bf16;
};

// A launch counts its finished CTAs in the counter this far after its ticket (params.h's layout):
// the last one resets the counters for the next launch (tile_sync.h, retire).
constexpr int kExitedAfterTicket = 2;

// The counters from `ready` on, which params.h lays out back to back: the ready counters, then
// each K-split GEMM's per-tile arrivals.
__host__ __device__ inline int counters_after_ticket(const GemmPairParams& p, int m_blocks) {
  return m_blocks * ((p.tile_sync ? p.splits1 : 1) + (p.splits0 > 1 ? p.tiles0 : 0) + (p.splits1 > 1 ? p.tiles1 : 0));
}

// Tile configs, chosen by the op from M: the kernel's block_m and the order table must agree. The
// tile width, kGemmPairBlockN, is in tile_order.h (the CPU build's checks need it too).
bool gemm_pair_supports_block_m(int block_m);

// The kind of kernel (gemm_pair::Arch, not kAuto) that a call of this tile config runs on the
// current device when it asks for `arch`; throws when there is none (a forced kind the device
// cannot run or the build lacks, a block_m that kind has no kernel for).
gemm_pair::Arch gemm_pair_resolve_arch(int block_m, bool is_bf16, gemm_pair::Arch arch);
// `arch` resolved (gemm_pair_resolve_arch), not kAuto.
void run_gemm_pair(const GemmPairParams& params, int block_m, gemm_pair::Arch arch, cudaStream_t stream);
// CTAs of the (block_m, dtype) config of kind `arch` (resolved) that fit on one SM of the current device.
int gemm_pair_ctas_per_sm(int block_m, bool is_bf16, gemm_pair::Arch arch);

}  // namespace cute_ops
