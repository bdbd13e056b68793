#pragma once
// Tile gemv (CUTE_OPS_GEMV_TILES, experimental, off by default; gemv_kernel.cuh's knob says when it
// runs). The same sums as gemv_body, split another way: many short CTAs instead of a ring.
//
// Why. On an H200 a Triton kernel that gives each small program one 16-row x 512-column tile of W,
// loaded into registers, with an atomic add of its sums, streams the large projections
// 8-11% faster than gemv_body's persistent CTAs and their cp.async ring (lm_head 4.48 against 3.99
// TB/s; perf/tools/gemv_tile_probe.py, docs/perf-notes.md session 50). On an H100 the two are within
// 2-5%. This is that design with gemv's fragments, its epilogue and deterministic sums.
// Measured on the H200 (session 51): right, but slower than the ring on every projection, in both
// forms (gemv_kernel.cuh's knob has the numbers; docs/perf-notes.md, session 51).
//
// Work split. CTA b takes unit b / n_kt (16 rows of W, as in gemv_body) and k tile b % n_kt: its
// kTileWarps warps take one 128-column step each (kStepK), so a tile is 512 columns. Every lane
// copies its step's 8 chunks of W (16 bytes each, rows lo and hi, as gemv_body's ring slots) to
// shared memory before the wait on the previous kernel, then loads x's chunks, runs the mma, and the
// CTA adds its warps' sums in warp order. One stage, no ring: a CTA's copies are all it streams, and
// the hardware keeps as many CTAs an SM as registers and shared memory allow (16 KB of W each).
//
// Deterministic split-K. With one k tile the CTA runs the epilogue itself. Otherwise warp 0 stores
// the tile's float32 sums (and x^2 sums, for the norm) into the call's slot [unit][kt], fences and
// counts its arrival on the unit's counter (common/arrival_counters.h); the last tile to arrive
// reads every slot in kt order (its own included), resets the counter to zero and runs the
// epilogue. The bits depend on n and k only (never on m, timing or the device), but they are not
// gemv_body's: its warps add the steps in another order.
//
// tile_epilogue repeats gemv_body's epilogue lines, as gemv_stream_k.cuh does and for its reason:
// sharing them moved the plain kernels' code. If the tile kernel wins, the three should share it
// after an A/B of the plain kernels with the helper.
//
// Names as in gemv_kernel.cuh: lane (g, c) = (lane / 4, lane % 4); v[4] = the sums of W rows g and
// g + 8 for x rows 2c and 2c + 1.
#include <cstdint>

#include "common/pdl.h"
#include "gemv/gemv.h"
#include "gemv/gemv_kernel.cuh"

namespace cute_ops::gemv {

constexpr int kTileWarps = 4;
constexpr int kTileThreads = kTileWarps * 32;
constexpr int kTileK = kTileWarps * kStepK;  // 512 columns of W a CTA
static_assert(kGemvTileSlotFloats == 32 * 4 + kGemvMaxRows, "gemv.h's tile slot size");

// 16 bytes of a stream read once: not kept in L1, an L2 prefetch of the 256 bytes around it.
__device__ __forceinline__ uint4 load_streamed_16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The outputs of one unit from its summed fragments (gemv_body's epilogue, for the tile kernel's
// reducing lanes): inv_rms from the x^2 sums, SwiGLU, the residual after rounding.
template <typename T, bool kNorm, bool kResidual, bool kSwiGLU>
__device__ __forceinline__ void tile_epilogue(const GemvParams& p, const UnitRows& out_rows, const float (&v)[4],
                                              const float (&sum_sq)[2], int c) {
  T* out = static_cast<T*>(p.out);
  const T* residual = static_cast<const T*>(p.residual);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int row = 2 * c + j;
    if (row >= p.m) continue;
    const float scale = kNorm ? rsqrtf(sum_sq[j] / static_cast<float>(p.k) + p.eps) : 1.f;
#pragma unroll
    for (int half = 0; half < (kSwiGLU ? 1 : 2); ++half) {
      const int col = half == 0 ? out_rows.col_lo : out_rows.col_hi;
      if (col < 0) continue;
      float y = kSwiGLU ? silu_times(scale * v[j], scale * v[2 + j]) : scale * v[2 * half + j];
      if constexpr (kResidual) y = to_float(from_float<T>(y)) + to_float(residual[row * p.residual_row_stride + col]);
      out[static_cast<int64_t>(row) * p.out_cols + col] = from_float<T>(y);
    }
  }
}

template <typename T, bool kNorm, bool kResidual, bool kSwiGLU>
__global__ void __launch_bounds__(kTileThreads) gemv_tiles_kernel(const GemvParams p, const GemvTileParams t) {
  using Mma = typename MmaAtom<T>::type;
  __shared__ float4 s_partial[kTileWarps][32];
  __shared__ float s_sum_sq[kTileWarps][kGemvMaxRows];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int64_t unit = blockIdx.x / t.n_kt;
  const int kt = static_cast<int>(blockIdx.x % t.n_kt);
  const int step = kt * kTileWarps + warp;
  const UnitRows rows = unit_rows<kSwiGLU>(p, unit, g);
  const T* w = static_cast<const T*>(p.weight);

#if CUTE_OPS_GEMV_TILES_REGS
  // Probe form (CUTE_OPS_GEMV_TILES_REGS): W straight into registers after the wait, no shared
  // memory for it, as the Triton tile kernel loads it (more CTAs an SM). ptxas still issues the 8
  // loads in two or three groups between the mmas.
  wait_for_previous_grid();  // x and residual come from the previous kernel
  allow_dependent_launch();
  uint4 w_lo[kChunks], w_hi[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int col = chunk_col(step, i, c);
    const bool in = col < p.k;
    w_lo[i] = load_streamed_16(w + rows.lo * p.k + (in ? col : 0));  // unconditional (clamped address)
    w_hi[i] = load_streamed_16(w + rows.hi * p.k + (in ? col : 0));
    if (!in) w_lo[i] = w_hi[i] = make_uint4(0, 0, 0, 0);
  }
#else
  // W does not depend on the previous kernel: its copies go out before the wait. cp.async into
  // shared memory, as gemv_body's ring: ptxas keeps those before griddepcontrol.wait, where it sank
  // plain (ld.global.nc) loads into registers past it. Each lane's 8 chunks in its own slots.
  __shared__ uint4 s_w[kSlots][kTileThreads];
  // No L2 cache policy here (gemv_body's copies carry evict_first): with this kernel's static shared
  // memory, ptxas (CUDA 13.0) puts the shared base and the policy in one uniform register pair
  // (LDGSTS [R+URx], desc[URx]), and the H200 faults on it with an illegal instruction (session 51,
  // compute-sanitizer at this copy; dynamic shared memory compiles to the same pair).
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int col = chunk_col(step, i, c);
    const bool in = col < p.k;  // k is a multiple of 8: a chunk is wholly in or out (zero-filled)
    sm80::cp_async_16<CUTE_OPS_GEMV_L2_PREFETCH>(&s_w[i][threadIdx.x], w + rows.lo * p.k + (in ? col : 0), in);
    sm80::cp_async_16<CUTE_OPS_GEMV_L2_PREFETCH>(&s_w[kChunks + i][threadIdx.x], w + rows.hi * p.k + (in ? col : 0), in);
  }
  cute::cp_async_fence();
  wait_for_previous_grid();  // x and residual come from the previous kernel
  allow_dependent_launch();
#endif

  const int token = g < p.m ? g : p.m - 1;  // rows of x past m repeat the last one (not stored)
  const T* x_row = static_cast<const T*>(p.x) + token * p.x_row_stride;
  uint4 x[kChunks], norm_w[kChunks];
  load_x_step<T, kNorm>(x, norm_w, x_row, static_cast<const T*>(p.norm_weight), p.k, step, c);
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  float sum_sq = 0.f;  // kNorm: of this lane's columns of x's row `token`
#if !CUTE_OPS_GEMV_TILES_REGS
  cute::cp_async_wait<0>();  // this lane's chunks have landed (each lane reads only its own slots)
  asm volatile("" ::: "memory");
#endif
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
#if CUTE_OPS_GEMV_TILES_REGS
    const uint4 lo = w_lo[i], hi = w_hi[i];
#else
    const uint4 lo = s_w[i][threadIdx.x], hi = s_w[kChunks + i][threadIdx.x];
#endif
    uint4 b = x[i];
    if constexpr (kNorm) {
      sum_sq += sum_of_squares<T>(b);
      b = times_weight<T>(b, norm_w[i]);  // zeros stay zeros
    }
    Mma::fma(acc[0], acc[1], acc[2], acc[3], lo.x, hi.x, lo.y, hi.y, b.x, b.y, acc[0], acc[1], acc[2], acc[3]);
    Mma::fma(acc[0], acc[1], acc[2], acc[3], lo.z, hi.z, lo.w, hi.w, b.z, b.w, acc[0], acc[1], acc[2], acc[3]);
  }
  s_partial[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  if constexpr (kNorm) {
    sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, 1);  // the 4 lanes of row g of x
    sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, 2);
    if (c == 0) s_sum_sq[warp][g] = sum_sq;
  }
  __syncthreads();
  if (warp != 0) return;

  // The tile's sums, warps in order; rows 2c and 2c + 1 of x's x^2 sums.
  float v[4] = {0.f, 0.f, 0.f, 0.f}, sq[2] = {0.f, 0.f};
#pragma unroll
  for (int w_i = 0; w_i < kTileWarps; ++w_i) {
    const float4 part = s_partial[w_i][lane];
    v[0] += part.x, v[1] += part.y, v[2] += part.z, v[3] += part.w;
    if constexpr (kNorm) sq[0] += s_sum_sq[w_i][2 * c], sq[1] += s_sum_sq[w_i][2 * c + 1];
  }
  if (t.n_kt == 1) {
    tile_epilogue<T, kNorm, kResidual, kSwiGLU>(p, rows, v, sq, c);
    return;
  }

  // Split-K: this tile's slot, then the count; the last tile of the unit sums the slots in order.
  float* slots = t.partials + unit * t.n_kt * kGemvTileSlotFloats;
  float* mine = slots + kt * kGemvTileSlotFloats;
  const bool rows_used = 2 * c < p.m;  // lanes whose x rows are all past m hold nothing stored
  if (rows_used) *reinterpret_cast<float4*>(mine + 4 * lane) = make_float4(v[0], v[1], v[2], v[3]);
  if (kNorm && g == 0 && rows_used) *reinterpret_cast<float2*>(mine + 32 * 4 + 2 * c) = make_float2(sq[0], sq[1]);
  // The warp's stores, then one fence and the count by lane 0 (the barrier makes the other lanes'
  // stores visible to lane 0 first, so its fence publishes them); the last arriver's fence after
  // the count orders the slots' reads after it, and the barrier passes that to the other lanes.
  __syncwarp();
  int last = 0;
  if (lane == 0) {
    __threadfence();
    last = atomicAdd(t.counters + unit, 1) == t.n_kt - 1;
    if (last) {
      __threadfence();
      t.counters[unit] = 0;  // every tile of the unit has counted: zero again for the next call
    }
  }
  if (!__shfl_sync(0xffffffffu, last, 0)) return;
  __syncwarp();
  if (!rows_used) return;
  float total[4] = {0.f, 0.f, 0.f, 0.f}, total_sq[2] = {0.f, 0.f};
  for (int k_i = 0; k_i < t.n_kt; ++k_i) {
    const float* slot = slots + k_i * kGemvTileSlotFloats;
    const float4 part = __ldcg(reinterpret_cast<const float4*>(slot + 4 * lane));  // L2: not a stale L1 line
    total[0] += part.x, total[1] += part.y, total[2] += part.z, total[3] += part.w;
    if constexpr (kNorm) {
      const float2 s = __ldcg(reinterpret_cast<const float2*>(slot + 32 * 4 + 2 * c));
      total_sq[0] += s.x, total_sq[1] += s.y;
    }
  }
  tile_epilogue<T, kNorm, kResidual, kSwiGLU>(p, rows, total, total_sq, c);
}

}  // namespace cute_ops::gemv
