#pragma once
// gemv: out = act(norm(x) @ W^T) (+ residual) for m <= 8 rows of x, at the rate W streams from
// memory. A decode step's projections are this shape: every weight byte is read once and used m
// times, so the kernel's whole job is to keep enough of W's bytes in flight.
//
// Work split. W's rows go in units of 16: one mma.sync m16n8k16 takes the unit's 16 rows as its A
// operand and the m rows of x as its B operand (the tokens are the mma's N = 8; rows past m repeat
// row m - 1 and are not stored). A CTA's 8 warps split K in steps of 128 columns (warp w takes
// steps w, w + 8, ...) and sum their partials through shared memory; a CTA takes units
// blockIdx.x, blockIdx.x + gridDim.x, ... and the grid is what fits on the GPU at once.
//
// Fragments straight from global memory. Lane (g, c) = (lane / 4, lane % 4) loads 16 bytes of W
// rows g and g + 8 and of x row g at each column k0 + 32 i + 8 c (i < 4): 4 lanes read 64
// contiguous bytes of a row per load. The mma's k slots {2c, 2c+1, 2c+8, 2c+9} of lane (g, c)
// are taken to be these 8 columns, in either operand alike; a dot product does not depend on the
// order of its terms, so no shuffle or shared-memory staging is needed, and the same 16-byte load
// feeds A and (for x) B. Each lane keeps the next step's W and x loads in flight while the
// current step's mma run, across unit boundaries too; the first step's W loads are issued before
// the wait on the previous kernel (programmatic dependent launch), since W does not depend on it.
//
// Norm. With norm_weight, x is rms-normalised as rms_norm does it (float32 sum of squares, each
// element x * inv_rms * w rounded to the element type): one warp per row of x finds inv_rms at
// the CTA's start, and each x fragment is normalised as it is used.
//
// SwiGLU. A unit then reads 8 gate rows (mma rows g) and their 8 up rows (rows g + 8) of the
// packed weight (common/gate_up_layout.h), so the lane that holds the gate sum of an output also
// holds its up sum.
#include <cute/arch/mma_sm80.hpp>

#include <cstdint>

#include "common/gate_up_layout.h"
#include "common/pdl.h"
#include "common/vec.cuh"
#include "gemv/gemv.h"

namespace cute_ops::gemv {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnitRows = 16;                // the mma's M
constexpr int kChunks = 4;                   // 16-byte loads of a W row a lane makes per step
constexpr int kElemsPerChunk = 8;            // 16-bit elements
constexpr int kStepK = 4 * kChunks * kElemsPerChunk;  // 128 columns: 4 lanes x 4 chunks x 8
static_assert(kGemvMaxRows == 8, "the B operand of m16n8k16 holds 8 rows of x");

// Units of 16 W rows: plain, or 8 outputs (8 gate + 8 up rows) each for SwiGLU.
__host__ __device__ inline int64_t num_units(const GemvParams& p) {
  if (p.activation == GemvActivation::kSwiGLU) return (static_cast<int64_t>(p.out_cols) + 7) / 8;
  return (static_cast<int64_t>(p.n) + kUnitRows - 1) / kUnitRows;
}

template <typename T> struct MmaAtom;
template <> struct MmaAtom<__nv_bfloat16> { using type = cute::SM80_16x8x16_F32BF16BF16F32_TN; };
template <> struct MmaAtom<__half> { using type = cute::SM80_16x8x16_F32F16F16F32_TN; };

// W is read once: no L1 allocation, so x and the norm weight keep L1 to themselves. volatile keeps
// the loads where they are written (the prefetch before the previous grid's wait).
__device__ __forceinline__ uint4 load_weight(const void* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

// The W rows lane g reads for mma rows g and g + 8 of a unit, and the output columns they make
// (-1: past the end; their rows are clamped to row 0 so that every load stays in bounds).
struct UnitRows {
  int64_t lo, hi;
  int col_lo, col_hi;
};

template <bool kSwiGLU>
__device__ __forceinline__ UnitRows unit_rows(const GemvParams& p, int64_t unit, int g) {
  UnitRows r;
  if constexpr (kSwiGLU) {
    const int64_t j = unit * 8 + g;  // the output column: gate row j and up row j
    const bool valid = j < p.out_cols;
    r.lo = valid ? gate_up_row(j, p.out_cols, false) : 0;
    r.hi = valid ? gate_up_row(j, p.out_cols, true) : 0;
    r.col_lo = valid ? static_cast<int>(j) : -1;
    r.col_hi = -1;
  } else {
    const int64_t lo = unit * kUnitRows + g, hi = lo + 8;
    r.lo = lo < p.n ? lo : 0;
    r.hi = hi < p.n ? hi : 0;
    r.col_lo = lo < p.n ? static_cast<int>(lo) : -1;
    r.col_hi = hi < p.n ? static_cast<int>(hi) : -1;
  }
  return r;
}

// One step's operands of a lane: W rows lo and hi and x's row, 4 chunks of 8 elements each.
struct StepFrags {
  uint4 w_lo[kChunks], w_hi[kChunks], x[kChunks];
  uint4 norm_w[kChunks];  // the norm weight at the same columns (kNorm only)
};

__device__ __forceinline__ int chunk_col(int step, int i, int c) { return step * kStepK + 32 * i + 8 * c; }

// Chunk i of a step's operands, into f: W rows lo and hi, x's row, and the norm weight.
template <typename T, bool kNorm>
__device__ __forceinline__ void load_weight_chunk(StepFrags& f, int i, const T* w, const UnitRows& rows, int k,
                                                  int step, int c) {
  const int col = chunk_col(step, i, c);
  const bool in = col < k;  // k is a multiple of 8: a chunk is wholly in or out
  f.w_lo[i] = in ? load_weight(w + rows.lo * k + col) : make_uint4(0, 0, 0, 0);
  f.w_hi[i] = in ? load_weight(w + rows.hi * k + col) : make_uint4(0, 0, 0, 0);
}

template <typename T, bool kNorm>
__device__ __forceinline__ void load_x_chunk(StepFrags& f, int i, const T* x_row, const T* norm_weight, int k,
                                             int step, int c) {
  const int col = chunk_col(step, i, c);
  f.x[i] = col < k ? *reinterpret_cast<const uint4*>(x_row + col) : make_uint4(0, 0, 0, 0);
  if constexpr (kNorm) f.norm_w[i] = col < k ? *reinterpret_cast<const uint4*>(norm_weight + col) : f.x[i];
}

// x * inv_rms * w, rounded to T: rms_norm's formula, element by element.
template <typename T>
__device__ __forceinline__ uint4 normalise(uint4 x, uint4 norm_w, float inv_rms) {
  using V = Vec<T, kElemsPerChunk>;
  V v, w;
  *reinterpret_cast<uint4*>(&v) = x;
  *reinterpret_cast<uint4*>(&w) = norm_w;
#pragma unroll
  for (int e = 0; e < kElemsPerChunk; ++e) v.v[e] = from_float<T>(to_float(v.v[e]) * inv_rms * to_float(w.v[e]));
  return *reinterpret_cast<const uint4*>(&v);
}

__device__ __forceinline__ float silu_times(float gate, float up) {
  return gate / (1.f + __expf(-gate)) * up;
}

template <typename T, bool kNorm, bool kResidual, bool kSwiGLU>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const GemvParams p) {
  using Mma = typename MmaAtom<T>::type;
  __shared__ float s_inv_rms[kGemvMaxRows];
  __shared__ float4 s_partial[2][kWarps][32];  // two buffers: one barrier per unit

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int n_steps = (p.k + kStepK - 1) / kStepK;
  const int64_t n_units = num_units(p);
  const T* w = static_cast<const T*>(p.weight);
  const int token = g < p.m ? g : p.m - 1;  // rows of x past m repeat the last one (not stored)
  const T* x_row = static_cast<const T*>(p.x) + token * p.x_row_stride;

  // A lane's operands for one step. Chunk i of the next step is loaded into f as soon as chunk i
  // of the current one has gone into its mma: one step of loads in flight in one set of registers.
  StepFrags f;
  UnitRows rows = unit_rows<kSwiGLU>(p, blockIdx.x, g);
  if (warp < n_steps) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) load_weight_chunk<T, kNorm>(f, i, w, rows, p.k, warp, c);
  }

  wait_for_previous_grid();  // x and residual come from the previous kernel
  allow_dependent_launch();

  float inv_rms = 1.f;
  if constexpr (kNorm) {
    if (warp < p.m) {
      const T* row = static_cast<const T*>(p.x) + warp * p.x_row_stride;
      using V = Vec<T, kElemsPerChunk>;
      float sum_sq = 0.f;
      for (int col = lane * kElemsPerChunk; col < p.k; col += 32 * kElemsPerChunk) {
        const V v = V::load(row + col);
#pragma unroll
        for (int e = 0; e < kElemsPerChunk; ++e) sum_sq += to_float(v.v[e]) * to_float(v.v[e]);
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
      if (lane == 0) s_inv_rms[warp] = rsqrtf(sum_sq / static_cast<float>(p.k) + p.eps);
    }
    __syncthreads();
    inv_rms = s_inv_rms[token];
  }
  const T* norm_weight = static_cast<const T*>(p.norm_weight);
  if (warp < n_steps) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) load_x_chunk<T, kNorm>(f, i, x_row, norm_weight, p.k, warp, c);
  }

  int buffer = 0;
  for (int64_t unit = blockIdx.x; unit < n_units; unit += gridDim.x) {
    const UnitRows out_rows = rows;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int step = warp; step < n_steps; step += kWarps) {
      // The next item: this unit's next step, else the first step of the CTA's next unit.
      int next_step = step + kWarps;
      int64_t next_unit = unit;
      if (next_step >= n_steps) {
        next_step = warp;
        next_unit = unit + gridDim.x;
        if (next_unit < n_units) rows = unit_rows<kSwiGLU>(p, next_unit, g);
      }
      const bool more = next_unit < n_units;
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        uint4 b = f.x[i];
        if constexpr (kNorm) b = normalise<T>(b, f.norm_w[i], inv_rms);  // zeros stay zeros
        const uint4 lo = f.w_lo[i], hi = f.w_hi[i];
        Mma::fma(acc[0], acc[1], acc[2], acc[3], lo.x, hi.x, lo.y, hi.y, b.x, b.y, acc[0], acc[1], acc[2], acc[3]);
        Mma::fma(acc[0], acc[1], acc[2], acc[3], lo.z, hi.z, lo.w, hi.w, b.z, b.w, acc[0], acc[1], acc[2], acc[3]);
        if (more) {
          load_weight_chunk<T, kNorm>(f, i, w, rows, p.k, next_step, c);
          load_x_chunk<T, kNorm>(f, i, x_row, norm_weight, p.k, next_step, c);
        }
      }
    }
    s_partial[buffer][warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();
    if (warp == 0) {
      // The warps' partials in warp order (deterministic); lane (g, c) then holds rows g and
      // g + 8 of the unit for rows 2c and 2c + 1 of x.
      float v[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int w_i = 0; w_i < kWarps; ++w_i) {
        const float4 part = s_partial[buffer][w_i][lane];
        v[0] += part.x;
        v[1] += part.y;
        v[2] += part.z;
        v[3] += part.w;
      }
      T* out = static_cast<T*>(p.out);
      const T* residual = static_cast<const T*>(p.residual);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int row = 2 * c + j;
        if (row >= p.m) continue;
#pragma unroll
        for (int half = 0; half < (kSwiGLU ? 1 : 2); ++half) {
          const int col = half == 0 ? out_rows.col_lo : out_rows.col_hi;
          if (col < 0) continue;
          float y = kSwiGLU ? silu_times(v[j], v[2 + j]) : v[2 * half + j];
          if constexpr (kResidual) {
            y = to_float(from_float<T>(y)) + to_float(residual[row * p.residual_row_stride + col]);
          }
          out[static_cast<int64_t>(row) * p.out_cols + col] = from_float<T>(y);
        }
      }
    }
    buffer ^= 1;
  }
}

}  // namespace cute_ops::gemv
