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
// Fragments without shuffles. Lane (g, c) = (lane / 4, lane % 4) takes 16 bytes of W rows g and
// g + 8 and of x row g at each column k0 + 32 i + 8 c (i < 4): 4 lanes read 64 contiguous bytes
// of a row per access. The mma's k slots {2c, 2c+1, 2c+8, 2c+9} of lane (g, c) are taken to be
// these 8 columns, in either operand alike; a dot product does not depend on the order of its
// terms, so each 16-byte chunk is an mma operand as it is.
//
// Bytes in flight. W's chunks go through a ring of kStages steps in shared memory by cp.async,
// each lane's chunks in its own slots (so a lane waits only on its own copies: no barrier), the
// copies of kStages - 1 steps ahead in flight while a step's mma run, across unit boundaries too.
// Registers would hold one step; the ring holds three at 2 CTAs an SM (192 KB in flight an SM).
// The first steps' copies are issued before the wait on the previous kernel (programmatic
// dependent launch): W does not depend on it. x and the norm weight are small and L1/L2-resident:
// plain loads.
//
// Norm. rms_norm(x) @ W^T = inv_rms * (x * w) @ W^T, inv_rms being one scalar a row of x: the mma
// take x * w (each element rounded to T once) and the sum of squares of x is gathered from the same
// fragments on the way (each unit's steps cover all of k for every row), so the norm needs no
// pass over x before the mainloop and no extra barrier; inv_rms multiplies the float32 sums in the
// epilogue.

// Tensor parallelism (gemv_exchange.h): a push stores its output rows into every rank's exchange
// buffer and raises its flags; a pull waits for the flags after issuing its first weight copies
// (the copies do not depend on x) and reads x as the float32 sum of the ranks' rows, rounded to T
// once, as a two-rank all-reduce of T rounds it.
//
// SwiGLU. A unit then reads 8 gate rows (mma rows g) and their 8 up rows (rows g + 8) of the
// packed weight (common/gate_up_layout.h), so the lane that holds the gate sum of an output also
// holds its up sum.

// 1 (the default): a plain gemv's warps hand a unit's partial sums to one warp through named
// barriers instead of __syncthreads, so only that warp waits for them and the others stream on (see
// gemv_body's unit end): one H200, a B = 1 step of the 8B 4414 -> 4378 us, the same bits
// (docs/perf-notes.md, session 46). 2: the stream-K kernel's pieces too (an experiment, off: on 2 x
// H100 within 0.4% of 1, not measured on an H200). 0: the __syncthreads of before. sm_90 only
// (CUTLASS's named barriers); other targets keep __syncthreads. compute-sanitizer's racecheck
// reports the hand-over's accesses as hazards: it does not model a split barrier (bar.arrive, then
// bar.sync elsewhere), as perf/tools/racecheck_arrive.cu shows on a kernel that is race-free.
#ifndef CUTE_OPS_GEMV_ASYNC_REDUCE
#define CUTE_OPS_GEMV_ASYNC_REDUCE 1
#endif

#include <cute/arch/mma_sm80.hpp>
#if CUTE_OPS_GEMV_ASYNC_REDUCE
#include <cutlass/arch/barrier.h>
#endif

#include <cstdint>

#include "common/activation.cuh"
#include "common/cute/sm80_copy.h"
#include "common/gate_up_layout.h"
#include "common/pdl.h"
#include "common/vec.cuh"
#include "gemv/gemv.h"
#include "gemv/gemv_exchange.cuh"

namespace cute_ops::gemv {

// Tuning knobs, for perf/tools/gemv_variants.sh; the defaults are the measured choice
// (docs/perf-notes.md, gemv).
#ifndef CUTE_OPS_GEMV_WARPS
#define CUTE_OPS_GEMV_WARPS 8
#endif
#ifndef CUTE_OPS_GEMV_STAGES
#define CUTE_OPS_GEMV_STAGES 3
#endif
// 1: W's copies mark their L2 lines evict-first, so that a decode step's weight stream (read once)
// leaves the KV cache, activations and kernel code in L2 from one layer to the next: the step's
// attention then runs ~5 us a layer faster (docs/perf-notes.md, session 43). 0: plain copies.
#ifndef CUTE_OPS_GEMV_EVICT_FIRST
#define CUTE_OPS_GEMV_EVICT_FIRST 1
#endif

// The L2 prefetch of W's copies (cp.async's L2::256B): 256 bytes around each 16-byte chunk, so that
// a row's next 192 bytes come in the same DRAM burst; 0: none (an A/B knob).
#ifndef CUTE_OPS_GEMV_L2_PREFETCH
#define CUTE_OPS_GEMV_L2_PREFETCH 256
#endif

// 1: plain calls whose units load the CTA slots unevenly run the stream-K kernel (gemv_stream_k.cuh,
// gemv_stream_k_ctas): 2 x H200, a B = 1 step of the 8B 4463 -> 4410 us, of the 70B at TP=2
// 19972 -> 19259 us (docs/perf-notes.md, session 45). 0: the plain kernel only.
#ifndef CUTE_OPS_GEMV_STREAM_K
#define CUTE_OPS_GEMV_STREAM_K 1
#endif

// 1 or 2 (experimental, off): plain calls run the tile kernel (gemv_tiles.cuh: many short CTAs, one
// cp.async copy of their W each and no ring, deterministic split-K), 1 for every plain call, 2 only where the
// plain kernel needs more than one wave of CTAs (qkv, gate/up, lm_head of the 8B; the 70B's qkv and
// gate/up at TP=2), which is where a Triton kernel of that design (fire-and-forget atomics, no
// deterministic hand-over) streamed 8-11% faster on the H200. Measured on the H200 (session 51): it
// is right (test_gemv) but slower than the ring everywhere, gate/up 61.6 -> 74.7 us, lm_head 258 ->
// 301, the 8B's B = 1 step 4324 -> 5834 us at 1, the 70B's at TP=2 19.1 -> 24.9 ms.
// CUTE_OPS_GEMV_TILES_REGS=1 loads W into registers after the wait instead: no better (lm_head 343).
// The Triton kernel given this kernel's hand-over loses its lead too (7-13%: gemv_tile_probe.py's
// tile_gemv_det), so the lead was its atomics'.
#ifndef CUTE_OPS_GEMV_TILES
#define CUTE_OPS_GEMV_TILES 0
#endif
#ifndef CUTE_OPS_GEMV_TILES_REGS
#define CUTE_OPS_GEMV_TILES_REGS 0
#endif

// N > 0 (experimental, off): each warp also asks L2 for its step N steps beyond the ring's newest
// copy (prefetch_weight_step), so that more of W is on its way from DRAM than the ring's shared
// memory holds. On the H200 a ring-fed gemv reads 8-11% slower than a kernel of many short CTAs
// with plain loads (docs/perf-notes.md, session 50): the bytes in flight an SM are the suspect.
// On 2 x H100 N = 2 made every projection slower (the 8B's B = 1 step +8%, the 70B's at TP=2 +7%,
// session 50), and on the H200 as well (M = 1: gate/up 62 -> 71 us, lm_head 259 -> 293; session 51).
#ifndef CUTE_OPS_GEMV_L2_AHEAD
#define CUTE_OPS_GEMV_L2_AHEAD 0
#endif

// 1 (the default): the norm's work in the ring kernels' steps (gemv_body, stream-K) on the tensor
// cores and in packed pairs: x's sums of squares as the diagonal of x x^T, two more mma a chunk
// (add_squares_mma), and x * w by packed multiplies (times_weight_packed), about 6 instructions a
// chunk where 0 spends about 50 on conversions and float math. On the H200 (session 67, with
// COPY_CURSOR) the norm kernels got 4-7% faster (gate/up norm + SwiGLU at M = 1 64.2 -> 61.5 us,
// qkv norm 18.2 -> 17.5), the others level (docs/perf-notes.md). The sums come in the tensor
// core's order: other last bits of inv_rms than 0's, the same for every unit and every row alone.
#ifndef CUTE_OPS_GEMV_NORM_MMA
#define CUTE_OPS_GEMV_NORM_MMA 1
#endif

// 1 (the default): the ring kernels' copies follow a cursor (unit, step, stage, the unit's two row
// pointers) advanced by one item a call, where 0 derives each item's unit and stage from its
// index: a 64-bit division and a modulo by 3 a step, then 64-bit row * k products for each of the
// 8 copies, about 110 of the 259 instructions of a plain kernel's step (sm_90a). The same copies
// in the same order: the same bits. Alone it moved little on the H200 (session 67); with
// NORM_MMA it takes the norm kernels' steps from 483 to 282 instructions.
#ifndef CUTE_OPS_GEMV_COPY_CURSOR
#define CUTE_OPS_GEMV_COPY_CURSOR 1
#endif

constexpr int kWarps = CUTE_OPS_GEMV_WARPS;
constexpr int kThreads = kWarps * 32;
constexpr int kMinCtasPerSm = 16 / kWarps;  // 16 warps an SM: the register cap of __launch_bounds__
constexpr int kUnitRows = 16;                // the mma's M
constexpr int kChunks = 4;                   // 16-byte loads of a W row a lane makes per step
constexpr int kElemsPerChunk = 8;            // 16-bit elements
constexpr int kStepK = 4 * kChunks * kElemsPerChunk;  // 128 columns: 4 lanes x 4 chunks x 8
constexpr int kStages = CUTE_OPS_GEMV_STAGES;
constexpr int kSlots = 2 * kChunks;          // a lane's 16-byte W chunks a step: rows lo and hi
constexpr int kSmemBytes = kStages * kSlots * kThreads * 16;  // 96 KB at 8 warps, 3 stages
constexpr bool kStreamK = CUTE_OPS_GEMV_STREAM_K != 0;
#if CUTE_OPS_GEMV_ASYNC_REDUCE
// Where it compiles: CUTLASS's named barriers are sm_90's (other targets keep __syncthreads).
// Barrier ids 0-3 of CUTLASS's user range: full and empty, per buffer.
#if !defined(__CUDA_ARCH__) || (__CUDA_ARCH__ >= 900 && __CUDACC_VER_MAJOR__ >= 12)
constexpr bool kAsyncReduceHere = true;
#else
constexpr bool kAsyncReduceHere = false;
#endif
constexpr uint32_t kFullBarrier = 0, kEmptyBarrier = 2;
// CUTLASS's barrier asm has no memory clobber: the compiler must not move shared-memory accesses
// across it (as after cp_async_wait below).
__device__ __forceinline__ void named_sync(uint32_t id) {
  asm volatile("" ::: "memory");
  cutlass::arch::NamedBarrier::sync(kThreads, id);
  asm volatile("" ::: "memory");
}
__device__ __forceinline__ void named_arrive(uint32_t id) {
  asm volatile("" ::: "memory");
  cutlass::arch::NamedBarrier::arrive(kThreads, id);
  asm volatile("" ::: "memory");
}
#endif
static_assert(kGemvMaxRows == 8, "the B operand of m16n8k16 holds 8 rows of x");

// Units of 16 W rows: plain, or 8 outputs (8 gate + 8 up rows) each for SwiGLU.
__host__ __device__ inline int64_t num_units(const GemvParams& p) {
  if (p.activation == GemvActivation::kSwiGLU) return (static_cast<int64_t>(p.out_cols) + 7) / 8;
  return (static_cast<int64_t>(p.n) + kUnitRows - 1) / kUnitRows;
}

template <typename T> struct MmaAtom;
template <> struct MmaAtom<__nv_bfloat16> { using type = cute::SM80_16x8x16_F32BF16BF16F32_TN; };
template <> struct MmaAtom<__half> { using type = cute::SM80_16x8x16_F32F16F16F32_TN; };

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

__device__ __forceinline__ int chunk_col(int step, int i, int c) { return step * kStepK + 32 * i + 8 * c; }

// Slot j of this thread in ring stage `stage`: [stage][slot][thread], so that a warp's accesses to
// one slot are 512 contiguous bytes (no bank conflicts).
__device__ __forceinline__ uint4* ring_slot(uint4* ring, int stage, int j) {
  return ring + (stage * kSlots + j) * kThreads + threadIdx.x;
}

// Starts the copies of one step's W chunks of two rows, from their first elements (w + lo * k and
// w + hi * k), into a ring stage; chunks past k are zero-filled.
template <typename T>
__device__ __forceinline__ void copy_weight_rows(uint4* ring, int stage, const T* row_lo, const T* row_hi, int k,
                                                 int step, int c) {
#if CUTE_OPS_GEMV_EVICT_FIRST
  const uint64_t policy = sm80::l2_evict_first_policy();
#endif
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int col = chunk_col(step, i, c);
    const bool in = col < k;  // k is a multiple of 8: a chunk is wholly in or out
#if CUTE_OPS_GEMV_EVICT_FIRST
    sm80::cp_async_16_hinted<CUTE_OPS_GEMV_L2_PREFETCH>(ring_slot(ring, stage, i), row_lo + (in ? col : 0), in, policy);
    sm80::cp_async_16_hinted<CUTE_OPS_GEMV_L2_PREFETCH>(ring_slot(ring, stage, kChunks + i), row_hi + (in ? col : 0), in, policy);
#else
    sm80::cp_async_16<CUTE_OPS_GEMV_L2_PREFETCH>(ring_slot(ring, stage, i), row_lo + (in ? col : 0), in);
    sm80::cp_async_16<CUTE_OPS_GEMV_L2_PREFETCH>(ring_slot(ring, stage, kChunks + i), row_hi + (in ? col : 0), in);
#endif
  }
}

// copy_weight_step for the rows of a unit (the cursor of CUTE_OPS_GEMV_COPY_CURSOR keeps the row
// pointers instead).
template <typename T>
__device__ __forceinline__ void copy_weight_step(uint4* ring, int stage, const T* w, const UnitRows& rows, int k,
                                                 int step, int c) {
  copy_weight_rows(ring, stage, w + rows.lo * k, w + rows.hi * k, k, step, c);
}

#if CUTE_OPS_GEMV_L2_AHEAD > 0
// An L2 prefetch of one step's W (16 rows x 256 bytes: two 128-byte lines a row, one line a lane:
// c & 2 picks the row, c & 1 the line). Nothing comes back to the SM, so it holds no shared memory
// and no register while it is in flight; the step's cp.async copies later find the lines in L2.
template <typename T>
__device__ __forceinline__ void prefetch_weight_step(const T* w, const UnitRows& rows, int k, int step, int c) {
  static_assert(sizeof(T) == 2, "a 128-byte line holds 64 16-bit elements");
  const int col = step * kStepK + (c & 1) * 64;
  if (col < k) {
    const T* line = w + ((c & 2) ? rows.hi : rows.lo) * k + col;
    prefetch_l2(line);
  }
}
#endif

template <typename T, bool kNorm>
__device__ __forceinline__ void load_x_step(uint4 (&x)[kChunks], uint4 (&norm_w)[kChunks], const T* x_row,
                                            const T* norm_weight, int k, int step, int c) {
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int col = chunk_col(step, i, c);
    x[i] = col < k ? *reinterpret_cast<const uint4*>(x_row + col) : make_uint4(0, 0, 0, 0);
    if constexpr (kNorm) norm_w[i] = col < k ? *reinterpret_cast<const uint4*>(norm_weight + col) : x[i];
  }
}

// load_x_step for a pull: x's chunks are the sum of the ranks' pushed rows (float32, rounded once).
// Plain loads, cached in L1 like x's (the 8 row groups of a warp read the same row when m = 1): the
// acquire of the flags (wait_for_pushes) invalidated this SM's L1, so no line of an earlier step
// survives, and every line loaded after it holds this step's rows.
template <typename T>
__device__ __forceinline__ void load_pulled_x_step(uint4 (&x)[kChunks], const GemvExchangeParams& e, int token, int k,
                                                   int step, int c) {
  using V = Vec<T, kElemsPerChunk>;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int col = chunk_col(step, i, c);
    if (col >= k) {
      x[i] = make_uint4(0, 0, 0, 0);
      continue;
    }
    float sum[kElemsPerChunk] = {};
    for (int r = 0; r < e.world; ++r) {
      V v;
      *reinterpret_cast<uint4*>(&v) = *reinterpret_cast<const uint4*>(pushed_row<T>(e, k, r, token) + col);
#pragma unroll
      for (int j = 0; j < kElemsPerChunk; ++j) sum[j] += to_float(v.v[j]);
    }
    V out;
#pragma unroll
    for (int j = 0; j < kElemsPerChunk; ++j) out.v[j] = from_float<T>(sum[j]);
    x[i] = *reinterpret_cast<const uint4*>(&out);
  }
}

// x * w, rounded to T, element by element.
template <typename T>
__device__ __forceinline__ uint4 times_weight(uint4 x, uint4 norm_w) {
  using V = Vec<T, kElemsPerChunk>;
  V v, w;
  *reinterpret_cast<uint4*>(&v) = x;
  *reinterpret_cast<uint4*>(&w) = norm_w;
#pragma unroll
  for (int e = 0; e < kElemsPerChunk; ++e) v.v[e] = from_float<T>(to_float(v.v[e]) * to_float(w.v[e]));
  return *reinterpret_cast<const uint4*>(&v);
}

template <typename T>
__device__ __forceinline__ float sum_of_squares(uint4 x) {
  using V = Vec<T, kElemsPerChunk>;
  V v;
  *reinterpret_cast<uint4*>(&v) = x;
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < kElemsPerChunk; ++e) s += to_float(v.v[e]) * to_float(v.v[e]);
  return s;
}

#if CUTE_OPS_GEMV_NORM_MMA
template <typename T> struct Packed2;  // T's pair type, for the packed multiply
template <> struct Packed2<__half> { using type = __half2; };
template <> struct Packed2<__nv_bfloat16> { using type = __nv_bfloat162; };

// times_weight by four packed multiplies (_rn: never fused into an FMA), each product rounded to T
// once, as there. The same bits for half; for bfloat16 too, but where a factor or the product is
// under float's normal range, which --use_fast_math's float multiply flushes to zero and this keeps.
template <typename T>
__device__ __forceinline__ uint4 times_weight_packed(uint4 x, uint4 norm_w) {
  using P = typename Packed2<T>::type;
  uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ws[4] = {norm_w.x, norm_w.y, norm_w.z, norm_w.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const P r = __hmul2_rn(*reinterpret_cast<const P*>(&xs[e]), *reinterpret_cast<const P*>(&ws[e]));
    xs[e] = *reinterpret_cast<const uint32_t*>(&r);
  }
  return make_uint4(xs[0], xs[1], xs[2], xs[3]);
}

// One chunk of x x^T into an mma accumulator fragment `d`: x's chunk is both operands, as the B
// operand it is in the step's mma and as A with rows g and g + 8 both token(g)'s row, so D[g][n]
// gathers x_g . x_n over the chunk's 16 k slots and the diagonal D[g][g] is row g's sum of
// squares, already summed across the quad. Lane (g, c) holds D[g][2c], D[g][2c + 1] (d[0], d[1])
// and row g + 8's copies: D[g][g] is in lane (g, g / 2), d[g % 2] (diagonal_lane, diagonal).
template <typename T>
__device__ __forceinline__ void add_squares_mma(float (&d)[4], uint4 x) {
  using Mma = typename MmaAtom<T>::type;
  Mma::fma(d[0], d[1], d[2], d[3], x.x, x.x, x.y, x.y, x.x, x.y, d[0], d[1], d[2], d[3]);
  Mma::fma(d[0], d[1], d[2], d[3], x.z, x.z, x.w, x.w, x.z, x.w, d[0], d[1], d[2], d[3]);
}
__device__ __forceinline__ bool diagonal_lane(int g, int c) { return c == g / 2; }
__device__ __forceinline__ float diagonal(const float (&d)[4], int g) { return g % 2 ? d[1] : d[0]; }
#endif

__device__ __forceinline__ float silu_times(float gate, float up) { return silu(gate) * up; }

// The kernel's body; `e` is read only by a push or a pull (gemv_exchange_kernel).
template <typename T, bool kNorm, bool kResidual, bool kSwiGLU, GemvExchangeMode kExchange>
__device__ __forceinline__ void gemv_body(const GemvParams& p, const GemvExchangeParams& e) {
  constexpr bool kPush = kExchange == GemvExchangeMode::kPush, kPull = kExchange == GemvExchangeMode::kPull;
  using Mma = typename MmaAtom<T>::type;
  extern __shared__ uint4 ring[];  // kStages x kSlots x kThreads chunks of W
  __shared__ float s_sum_sq[2][kWarps][kGemvMaxRows];  // kNorm: each warp's sums of x^2 a row of x
  __shared__ float4 s_partial[2][kWarps][32];  // two buffers: one barrier per unit

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int n_steps = (p.k + kStepK - 1) / kStepK;
  const int64_t n_units = num_units(p);
  const T* w = static_cast<const T*>(p.weight);
  const int token = g < p.m ? g : p.m - 1;  // rows of x past m repeat the last one (not stored)
  const T* x_row = static_cast<const T*>(p.x) + token * p.x_row_stride;  // (unused by a pull: p.x is null)
  const T* norm_weight = static_cast<const T*>(p.norm_weight);

  // This warp's items, in order: for each of the CTA's units, its steps warp, warp + kWarps, ...
  const int steps_per_unit = warp < n_steps ? (n_steps - warp + kWarps - 1) / kWarps : 0;
  const int64_t cta_units = (n_units - blockIdx.x + gridDim.x - 1) / gridDim.x;
  const int64_t n_items = steps_per_unit * cta_units;
  // Starts item t's copies into stage t % kStages, and closes a copy group: one group an item,
  // empty past the last item, so that waiting for all but kStages - 1 groups is item t's wait.
#if CUTE_OPS_GEMV_COPY_CURSOR
  // The cursor: the next item's unit, step and stage and the unit's row pointers; every call
  // copies the item after the previous call's (t is that item's index, for the bound only).
  int64_t copy_unit = blockIdx.x;
  int copy_step = warp, copy_stage = 0;
  const T *copy_lo = w, *copy_hi = w;
  auto set_copy_rows = [&] {
    const UnitRows rows = unit_rows<kSwiGLU>(p, copy_unit, g);
    copy_lo = w + rows.lo * p.k;
    copy_hi = w + rows.hi * p.k;
  };
  if (n_items > 0) set_copy_rows();
  auto copy_item = [&](int64_t t) {
    if (t < n_items) {
      copy_weight_rows(ring, copy_stage, copy_lo, copy_hi, p.k, copy_step, c);
      copy_step += kWarps;
      if (copy_step >= n_steps) {  // the unit's last step for this warp: on to the CTA's next unit
        copy_step = warp;
        copy_unit += gridDim.x;
        if (t + 1 < n_items) set_copy_rows();
      }
    }
    copy_stage = copy_stage + 1 == kStages ? 0 : copy_stage + 1;
    cute::cp_async_fence();
  };
#else
  auto copy_item = [&](int64_t t) {
    if (t < n_items) {
      const int64_t unit = blockIdx.x + (t / steps_per_unit) * gridDim.x;
      const int step = warp + static_cast<int>(t % steps_per_unit) * kWarps;
      copy_weight_step(ring, static_cast<int>(t % kStages), w, unit_rows<kSwiGLU>(p, unit, g), p.k, step, c);
    }
    cute::cp_async_fence();
  };
#endif
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) copy_item(t);

  wait_for_previous_grid();  // x and residual come from the previous kernel
  allow_dependent_launch();
  if constexpr (kPull) wait_for_pushes<T>(e, p.k);
#if CUTE_OPS_GEMV_L2_AHEAD > 0
  // The items between the ring's and the loop's first prefetch, after the wait: before it, DRAM
  // traffic slows the kernel still running (sessions 47-48).
  auto prefetch_item = [&](int64_t t) {
    if (t < n_items) {
      const int64_t unit = blockIdx.x + (t / steps_per_unit) * gridDim.x;
      const int step = warp + static_cast<int>(t % steps_per_unit) * kWarps;
      prefetch_weight_step(w, unit_rows<kSwiGLU>(p, unit, g), p.k, step, c);
    }
  };
  for (int t = kStages - 1; t < kStages - 1 + CUTE_OPS_GEMV_L2_AHEAD; ++t) prefetch_item(t);
#endif

  int64_t item = 0;
  int buffer = 0;
#if CUTE_OPS_GEMV_COPY_CURSOR
  int read_stage = 0;  // item % kStages
#endif
#if CUTE_OPS_GEMV_ASYNC_REDUCE
  [[maybe_unused]] int64_t local = 0;  // this CTA's units before the current one
#endif
  for (int64_t unit = blockIdx.x; unit < n_units; unit += gridDim.x) {
    const UnitRows out_rows = unit_rows<kSwiGLU>(p, unit, g);
    // kPushLines: the unit's lines' counts, in flight while it streams (gemv_exchange.cuh)
    [[maybe_unused]] const auto push_counts = [&] {
      if constexpr (kExchange == GemvExchangeMode::kPushLines) {
        return load_push_line_counts(e, p, out_rows.col_lo, out_rows.col_hi, g, c);
      } else {
        return 0;
      }
    }();
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#if CUTE_OPS_GEMV_NORM_MMA
    float sq_frag[4] = {0.f, 0.f, 0.f, 0.f};  // kNorm: the warp's x x^T (add_squares_mma)
#else
    float sum_sq = 0.f;  // kNorm: of this lane's columns of x's row `token`
#endif
    for (int s = 0; s < steps_per_unit; ++s, ++item) {
      const int step = warp + s * kWarps;
      copy_item(item + kStages - 1);  // into the stage this lane emptied last item
#if CUTE_OPS_GEMV_L2_AHEAD > 0
      prefetch_item(item + kStages - 1 + CUTE_OPS_GEMV_L2_AHEAD);
#endif
      uint4 x[kChunks], norm_w[kChunks];
      if constexpr (kPull) {
        load_pulled_x_step<T>(x, e, token, p.k, step, c);
        if constexpr (kNorm) {
#pragma unroll
          for (int i = 0; i < kChunks; ++i) {
            const int col = chunk_col(step, i, c);
            norm_w[i] = col < p.k ? *reinterpret_cast<const uint4*>(norm_weight + col) : x[i];
          }
        }
        // CTA 0's first unit covers every column of x once: it keeps the sum (the residual stream).
        if (e.x_sum != nullptr && blockIdx.x == 0 && unit == 0 && g < p.m) {
#pragma unroll
          for (int i = 0; i < kChunks; ++i) {
            const int col = chunk_col(step, i, c);
            if (col < p.k) *reinterpret_cast<uint4*>(static_cast<T*>(e.x_sum) + g * p.k + col) = x[i];
          }
        }
      } else {
        load_x_step<T, kNorm>(x, norm_w, x_row, norm_weight, p.k, step, c);
      }
      cute::cp_async_wait<kStages - 1>();  // this lane's copies of `item` have landed
      asm volatile("" ::: "memory");       // (cp_async_wait has no memory clobber: keep the reads after it)
#if CUTE_OPS_GEMV_COPY_CURSOR
      const int stage = read_stage;
      read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;
#else
      const int stage = static_cast<int>(item % kStages);
#endif
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        uint4 b = x[i];
        if constexpr (kNorm) {
#if CUTE_OPS_GEMV_NORM_MMA
          add_squares_mma<T>(sq_frag, b);
          b = times_weight_packed<T>(b, norm_w[i]);  // zeros stay zeros
#else
          sum_sq += sum_of_squares<T>(b);
          b = times_weight<T>(b, norm_w[i]);  // zeros stay zeros
#endif
        }
        const uint4 lo = *ring_slot(ring, stage, i), hi = *ring_slot(ring, stage, kChunks + i);
        Mma::fma(acc[0], acc[1], acc[2], acc[3], lo.x, hi.x, lo.y, hi.y, b.x, b.y, acc[0], acc[1], acc[2], acc[3]);
        Mma::fma(acc[0], acc[1], acc[2], acc[3], lo.z, hi.z, lo.w, hi.w, b.z, b.w, acc[0], acc[1], acc[2], acc[3]);
      }
    }
#if CUTE_OPS_GEMV_ASYNC_REDUCE  // (under #if: with 0 the kernels' code is byte for byte that of before)
    if constexpr (kAsyncReduceHere && kExchange == GemvExchangeMode::kNone) {
      // Unit `local`'s partials go through buffer local % 2 to warp local % kWarps, the unit's
      // reducer, by named barriers: the reducer waits for every warp's partial (full), reads them,
      // frees the buffer (empty) and runs the epilogue; the others only arrive and stream on into
      // the next unit meanwhile. A warp writes the buffer of unit `local` once unit local - 2's
      // reducer has read it (that reducer itself needs no wait). The sums are added in warp order,
      // as below: the same bits. Repeats the lines of the __syncthreads path below on purpose: that
      // path still runs the push and pull kernels and pre-sm_90 targets, and their code stays as it
      // was measured (ptxas moves it for as little as an unused constant; session 45).
      const int reducer = static_cast<int>(local % kWarps);
      if (local >= 2 && warp != static_cast<int>((local - 2) % kWarps)) named_sync(kEmptyBarrier + buffer);
      __syncwarp();  // the reducer of unit local - 2 (no wait above): its lanes' reads of the buffer first
      s_partial[buffer][warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      if constexpr (kNorm) {
#if CUTE_OPS_GEMV_NORM_MMA
        if (diagonal_lane(g, c)) s_sum_sq[buffer][warp][g] = diagonal(sq_frag, g);
#else
        sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, 1);
        sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, 2);
        if (c == 0) s_sum_sq[buffer][warp][g] = sum_sq;
#endif
      }
      if (warp != reducer) {
        named_arrive(kFullBarrier + buffer);
      } else {
        named_sync(kFullBarrier + buffer);
        float v[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int w_i = 0; w_i < kWarps; ++w_i) {
          const float4 part = s_partial[buffer][w_i][lane];
          v[0] += part.x;
          v[1] += part.y;
          v[2] += part.z;
          v[3] += part.w;
        }
        float scale[2] = {1.f, 1.f};  // inv_rms of x's rows 2c and 2c + 1
        if constexpr (kNorm) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            float total = 0.f;
#pragma unroll
            for (int w_i = 0; w_i < kWarps; ++w_i) total += s_sum_sq[buffer][w_i][2 * c + j];
            scale[j] = rsqrtf(total / static_cast<float>(p.k) + p.eps);
          }
        }
        if (local + 2 < cta_units) named_arrive(kEmptyBarrier + buffer);
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
            float y = kSwiGLU ? silu_times(scale[j] * v[j], scale[j] * v[2 + j]) : scale[j] * v[2 * half + j];
            if constexpr (kResidual) {
              y = to_float(from_float<T>(y)) + to_float(residual[row * p.residual_row_stride + col]);
            }
            out[static_cast<int64_t>(row) * p.out_cols + col] = from_float<T>(y);
          }
        }
      }
      ++local;
      buffer ^= 1;
      continue;  // the next unit
    }
#endif
    s_partial[buffer][warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    if constexpr (kNorm) {
#if CUTE_OPS_GEMV_NORM_MMA
      if (diagonal_lane(g, c)) s_sum_sq[buffer][warp][g] = diagonal(sq_frag, g);
#else
      sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, 1);  // the 4 lanes of row g of x
      sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, 2);
      if (c == 0) s_sum_sq[buffer][warp][g] = sum_sq;
#endif
    }
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
        float scale = 1.f;  // inv_rms of x's row `row`
        if constexpr (kNorm) {
          float total = 0.f;
#pragma unroll
          for (int w_i = 0; w_i < kWarps; ++w_i) total += s_sum_sq[buffer][w_i][row];
          scale = rsqrtf(total / static_cast<float>(p.k) + p.eps);
        }
#pragma unroll
        for (int half = 0; half < (kSwiGLU ? 1 : 2); ++half) {
          const int col = half == 0 ? out_rows.col_lo : out_rows.col_hi;
          if (col < 0) continue;
          float y = kSwiGLU ? silu_times(scale * v[j], scale * v[2 + j]) : scale * v[2 * half + j];
          if constexpr (kResidual) {
            y = to_float(from_float<T>(y)) + to_float(residual[row * p.residual_row_stride + col]);
          }
          if constexpr (kPush) {
            for (int dest = 0; dest < e.world; ++dest) {
              *push_target<T>(e, p.out_cols, dest, row, col) = from_float<T>(y);
            }
          } else {
            out[static_cast<int64_t>(row) * p.out_cols + col] = from_float<T>(y);
          }
        }
      }
      // (no kPushLines constant: an unused one in the other kernels moved their code)
      if constexpr (kExchange == GemvExchangeMode::kPushLines) {
        push_unit_lines<T, kResidual>(e, p, out_rows.col_lo, out_rows.col_hi, v, g, c, push_counts);
      }
    }
    buffer ^= 1;
  }
  if constexpr (kPush) raise_push_flags<T>(e, p.out_cols);
}

template <typename T, bool kNorm, bool kResidual, bool kSwiGLU>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm) gemv_kernel(const GemvParams p) {
  gemv_body<T, kNorm, kResidual, kSwiGLU, GemvExchangeMode::kNone>(p, GemvExchangeParams{});
}

// A push or a pull: the exchange's parameters in a second argument, so that the plain kernel's
// parameters stay as they were (its code nearly: 8 of the 16 plain kernels compile with 3
// instructions in another order than before the exchange; same speed, perf-notes). The exchange's
// parameters are __grid_constant__: read where they are, even at a run-time rank's index, instead of
// copied to the stack first (96 bytes a thread, session 47).
template <typename T, bool kNorm, bool kResidual, bool kSwiGLU, GemvExchangeMode kExchange>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm) gemv_exchange_kernel(const GemvParams p,
                                                                                const __grid_constant__ GemvExchangeParams e) {
  gemv_body<T, kNorm, kResidual, kSwiGLU, kExchange>(p, e);
}

}  // namespace cute_ops::gemv
