#pragma once
// gemv: out = act(norm(x) @ weight^T) (+ residual) for the few rows of a decode batch. Torch-free
// interface between the op glue (gemv_op.cpp) and the kernel translation unit (gemv.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/dtype.h"
#include "gemv/gemv_exchange.h"
#include "gemv/gemv_limits.h"

namespace cute_ops {

enum class GemvActivation : int8_t { kNone, kSwiGLU };

struct GemvParams {
  void* out;                  // [m, out_cols], contiguous
  const void* x;              // [m, k]
  const void* weight;         // [n, k], contiguous; for kSwiGLU packed by pack_gate_up, n = 2 * out_cols
  const void* norm_weight;    // [k]: x is rms-normalised first; nullptr: x as is
  const void* residual;       // [m, out_cols]: added after rounding; nullptr: none
  int m;                      // 1 .. kGemvMaxRows
  int k;                      // a multiple of 8
  int n;                      // rows of weight
  int out_cols;               // n, or n / 2 for kSwiGLU
  int64_t x_row_stride;       // in elements, a multiple of 8
  int64_t residual_row_stride;
  float eps;
  GemvActivation activation;
  DType dtype;                // of every tensor (float16 or bfloat16)
};

// Stream-K (gemv_stream_k.cuh; CUTE_OPS_GEMV_STREAM_K=0 builds without it): every CTA streams an
// equal share of the projection's (unit, k step) pairs, so a unit may be cut between neighbouring
// CTAs; the CTA holding a cut unit's first steps adds the other pieces' float32 sums, in CTA order.
// A second kernel argument, so that the plain kernel's parameters (and code) stay as they are.
struct GemvStreamKParams {
  int64_t ctas = 0;           // 0: the plain kernel; else stream-K on at most this many CTAs
  uint64_t* parts = nullptr;  // [ctas][kGemvPartWords]: zero at the launch and left zero
};
constexpr int64_t kGemvPartWords = 32 * 4 + 8;  // a CTA's piece: 4 sums a lane, 8 rows' sums of x^2

// Tile gemv (gemv_tiles.cuh; built with CUTE_OPS_GEMV_TILES, experimental): one short CTA a
// (unit, 512-column k tile), the tiles of a unit summed in k order by the last to finish. A third
// kernel argument, so that the other kernels' parameters stay as they are.
struct GemvTileParams {
  int n_kt = 0;                // k tiles a unit; 0: not the tile kernel
  float* partials = nullptr;   // [units][n_kt][kGemvTileSlotFloats] (n_kt > 1): any contents
  int* counters = nullptr;     // [units] (n_kt > 1): zero at the launch and left zero
};
constexpr int64_t kGemvTileSlotFloats = 32 * 4 + 8;  // a tile's sums: 4 a lane, 8 rows' sums of x^2

// The tile kernel's k tiles a unit for these params, 0 where it does not run (the build's
// CUTE_OPS_GEMV_TILES and the shape decide; never m). The caller provides the partials and the
// counters when it is more than 1.
int64_t gemv_tiles_n_kt(const GemvParams& params, int device);
// Its units (16 rows of W each): the counters a call needs, and units x n_kt slots of partials.
int64_t gemv_tiles_units(const GemvParams& params);

// The CTAs for stream-K on these params (GemvStreamKParams::ctas), 0 for the plain kernel: plain
// calls of a stream-K build only, where it saves at least a step for every warp of the busiest CTA.
int64_t gemv_stream_k_ctas(const GemvParams& params, int device);

// exchange.mode kNone: the plain gemv. Tensor parallelism (gemv_exchange.h): kPush sends the
// output rows to every rank's exchange buffer instead of `out`; kPull reads x as the sum of the
// ranks' pushed rows instead of `x`. stream_k.ctas > 0 (a plain call): the stream-K kernel;
// tiles.n_kt > 0 (a plain call): the tile kernel.
void run_gemv(const GemvParams& params, cudaStream_t stream, const GemvExchangeParams& exchange = {},
              const GemvStreamKParams& stream_k = {}, const GemvTileParams& tiles = {});

}  // namespace cute_ops
