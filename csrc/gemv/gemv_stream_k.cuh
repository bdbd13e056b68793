#pragma once
// Stream-K gemv (CUTE_OPS_GEMV_STREAM_K, on by default since session 45; docs/perf-notes.md,
// sessions 44-45). The plain kernel gives each CTA whole units, the same number each: a projection of
// 384 units on 264 CTA slots runs 192 CTAs of 2, and the H200's gemv rate follows the copies in
// flight, so 72 slots' worth of streaming is lost. Here CTA r streams the pairs (unit, k step)
// [r * total / ctas, (r + 1) * total / ctas) of the unit-major order, every slot the same share.
//
// A unit cut between CTAs. Its first piece (steps from 0) is the last piece of some CTA r; the rest
// are the first pieces of CTAs r + 1, r + 2, ... Such a first piece, once summed, is stored as
// words (float bits | 1 << 32) in the CTA's part slot, without a fence or a count: each 8-byte
// word says by itself whether it has landed. CTA r, at its end, adds its own piece's sums and
// then the others' in CTA order (the same bits every call: they depend on n, k and the device
// only), zeroes the words it read (the slots are zero at every launch: common/arrival_counters.h)
// and runs the epilogue. So the CTA that waits is at its end and the pieces it waits for were a
// neighbour's first work: the wait is short, and no streaming warp waits at a fence mid-stream
// (the k-splits experiment's loss, session 44).
//
// Ranges go to CTAs in reverse blockIdx order (r = gridDim.x - 1 - blockIdx.x), so a CTA waits only
// on CTAs of lower blockIdx, which the hardware starts no later than it (gemv.cu launches no more
// CTAs than fit at once, so that order matters only when other work holds SMs).
//
// Bits: a row's result depends on where its unit is cut, so on n, k and the device's CTA slots
// (never on m or timing); with a norm, a row's inv_rms may differ in its last bits from one unit to
// the next (the plain kernel sums x^2 in the same order for every unit).
//
// Names: as gemv_kernel.cuh's; a piece is unit `unit`'s steps [s0, s1) in this CTA.
//
// The step's mma and the epilogue repeat gemv_body's lines on purpose: moving them into shared
// helpers changed the SASS of 12 of the plain kernels (session 44), which still run every o, down
// and one-wave projection; sharing them waits for an A/B of the plain kernels with the helpers.
#include <cstdint>
#include <cstdio>

#include "common/peer_wait.h"
#include "gemv/gemv_kernel.cuh"

namespace cute_ops::gemv {

// A CTA's part slot: 32 lanes x 4 sums, then 8 rows' sums of x^2 (GemvParams' norm).
constexpr int kPartSqWord = 32 * 4;
static_assert(kGemvPartWords == kPartSqWord + kGemvMaxRows, "gemv.h's part slot size");

__device__ __forceinline__ uint64_t landed_word(float v) { return (uint64_t{1} << 32) | __float_as_uint(v); }

__device__ __forceinline__ void store_words(uint64_t* p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

// Two words of another CTA's part, once both have landed.
__device__ __forceinline__ float2 wait_words(const uint64_t* p) {
  const uint64_t start = global_ns();
  while (true) {
    uint64_t a, b;
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
    if ((a >> 32) != 0 && (b >> 32) != 0) {
      return make_float2(__uint_as_float(static_cast<uint32_t>(a)), __uint_as_float(static_cast<uint32_t>(b)));
    }
    if (global_ns() - start > kPeerWaitTimeoutNs) {
      printf("cute_ops gemv stream-K: CTA %d waited 30 s for a neighbour's piece\n", static_cast<int>(blockIdx.x));
      __trap();
    }
  }
}

template <typename T, bool kNorm, bool kResidual, bool kSwiGLU>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm) gemv_stream_k_kernel(const GemvParams p,
                                                                                const GemvStreamKParams sk) {
  using Mma = typename MmaAtom<T>::type;
  extern __shared__ uint4 ring[];  // kStages x kSlots x kThreads chunks of W
  __shared__ float s_sum_sq[2][kWarps][kGemvMaxRows];
  __shared__ float4 s_partial[2][kWarps][32];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int n_steps = (p.k + kStepK - 1) / kStepK;
  const int64_t total = num_units(p) * n_steps, ctas = gridDim.x;
  const int64_t r = ctas - 1 - blockIdx.x;
  const int64_t begin = r * total / ctas, end = (r + 1) * total / ctas;  // gemv.cu: at least kWarps steps
  const int64_t first_unit = begin / n_steps, last_unit = (end - 1) / n_steps;
  const T* w = static_cast<const T*>(p.weight);
  const int token = g < p.m ? g : p.m - 1;  // rows of x past m repeat the last one (not stored)
  const T* x_row = static_cast<const T*>(p.x) + token * p.x_row_stride;
  const T* norm_weight = static_cast<const T*>(p.norm_weight);
  auto piece_s0 = [&](int64_t unit) { return begin > unit * n_steps ? static_cast<int>(begin - unit * n_steps) : 0; };
  auto piece_s1 = [&](int64_t unit) { return end < (unit + 1) * n_steps ? static_cast<int>(end - unit * n_steps) : n_steps; };

  // The copies run kStages - 1 of this warp's steps ahead of the mma, across pieces: a cursor over
  // the warp's steps s0 + warp, s0 + warp + kWarps, ... < s1 of each piece in turn. One copy
  // group a call, empty past the last step.
  int64_t copy_unit = first_unit;
  int copy_step = piece_s0(first_unit) + warp, copy_s1 = piece_s1(first_unit), copy_stage = 0;
#if CUTE_OPS_GEMV_COPY_CURSOR
  // The unit's row pointers, set where the cursor enters a unit (gemv_kernel.cuh's knob).
  const T *copy_lo = w, *copy_hi = w;
  auto set_copy_rows = [&] {
    const UnitRows rows = unit_rows<kSwiGLU>(p, copy_unit, g);
    copy_lo = w + rows.lo * p.k;
    copy_hi = w + rows.hi * p.k;
  };
  set_copy_rows();  // (first_unit <= last_unit: gemv.cu gives every CTA steps)
  auto copy_next = [&] {
    while (copy_unit <= last_unit && copy_step >= copy_s1) {
      if (++copy_unit <= last_unit) copy_step = piece_s0(copy_unit) + warp, copy_s1 = piece_s1(copy_unit), set_copy_rows();
    }
    if (copy_unit <= last_unit) {
      copy_weight_rows(ring, copy_stage, copy_lo, copy_hi, p.k, copy_step, c);
      copy_step += kWarps;
    }
#else
  auto copy_next = [&] {
    while (copy_unit <= last_unit && copy_step >= copy_s1) {
      if (++copy_unit <= last_unit) copy_step = piece_s0(copy_unit) + warp, copy_s1 = piece_s1(copy_unit);
    }
    if (copy_unit <= last_unit) {
      copy_weight_step(ring, copy_stage, w, unit_rows<kSwiGLU>(p, copy_unit, g), p.k, copy_step, c);
      copy_step += kWarps;
    }
#endif
    copy_stage = copy_stage + 1 == kStages ? 0 : copy_stage + 1;
    cute::cp_async_fence();
  };
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) copy_next();

  wait_for_previous_grid();  // x and residual come from the previous kernel
  allow_dependent_launch();
#if CUTE_OPS_GEMV_L2_AHEAD > 0
  // A second cursor, CUTE_OPS_GEMV_L2_AHEAD steps ahead of the copies' (gemv_kernel.cuh's knob).
  int64_t pf_unit = copy_unit;
  int pf_step = copy_step, pf_s1 = copy_s1;
  auto prefetch_next = [&] {
    while (pf_unit <= last_unit && pf_step >= pf_s1) {
      if (++pf_unit <= last_unit) pf_step = piece_s0(pf_unit) + warp, pf_s1 = piece_s1(pf_unit);
    }
    if (pf_unit <= last_unit) {
      prefetch_weight_step(w, unit_rows<kSwiGLU>(p, pf_unit, g), p.k, pf_step, c);
      pf_step += kWarps;
    }
  };
  for (int t = 0; t < CUTE_OPS_GEMV_L2_AHEAD; ++t) prefetch_next();
#endif

  int stage = 0, buffer = 0;
#if CUTE_OPS_GEMV_ASYNC_REDUCE >= 2
  int64_t local = 0;  // this CTA's pieces before the current one
#endif
  for (int64_t unit = first_unit; unit <= last_unit; ++unit) {
    const int s0 = piece_s0(unit), s1 = piece_s1(unit);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#if CUTE_OPS_GEMV_NORM_MMA
    float sq_frag[4] = {0.f, 0.f, 0.f, 0.f};  // kNorm: the warp's x x^T in this piece (add_squares_mma)
#else
    float sum_sq = 0.f;  // kNorm: of this lane's columns of x's row `token`, in this piece
#endif
    for (int step = s0 + warp; step < s1; step += kWarps) {
      copy_next();
#if CUTE_OPS_GEMV_L2_AHEAD > 0
      prefetch_next();
#endif
      uint4 x[kChunks], norm_w[kChunks];
      load_x_step<T, kNorm>(x, norm_w, x_row, norm_weight, p.k, step, c);
      cute::cp_async_wait<kStages - 1>();  // this lane's copies of this step have landed
      asm volatile("" ::: "memory");
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        uint4 b = x[i];
        if constexpr (kNorm) {
#if CUTE_OPS_GEMV_NORM_MMA
          add_squares_mma<T>(sq_frag, b);
          b = times_weight_packed<T>(b, norm_w[i]);
#else
          sum_sq += sum_of_squares<T>(b);
          b = times_weight<T>(b, norm_w[i]);
#endif
        }
        const uint4 lo = *ring_slot(ring, stage, i), hi = *ring_slot(ring, stage, kChunks + i);
        Mma::fma(acc[0], acc[1], acc[2], acc[3], lo.x, hi.x, lo.y, hi.y, b.x, b.y, acc[0], acc[1], acc[2], acc[3]);
        Mma::fma(acc[0], acc[1], acc[2], acc[3], lo.z, hi.z, lo.w, hi.w, b.z, b.w, acc[0], acc[1], acc[2], acc[3]);
      }
      stage = stage + 1 == kStages ? 0 : stage + 1;
    }
#if CUTE_OPS_GEMV_ASYNC_REDUCE >= 2
    // Piece `local`'s partials go to warp local % kWarps through named barriers, as gemv_body's
    // units do (its comment says how); the others stream on into the next piece meanwhile.
    const int reducer = kAsyncReduceHere ? static_cast<int>(local % kWarps) : 0;
    if (kAsyncReduceHere && local >= 2 && warp != static_cast<int>((local - 2) % kWarps)) {
      named_sync(kEmptyBarrier + buffer);
    }
    __syncwarp();  // the reducer of piece local - 2 (no wait above): its lanes' reads of the buffer first
#endif
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
#if CUTE_OPS_GEMV_ASYNC_REDUCE >= 2
    if (!kAsyncReduceHere) {
      __syncthreads();
    } else if (warp != reducer) {
      named_arrive(kFullBarrier + buffer);
    } else {
      named_sync(kFullBarrier + buffer);
    }
    if (warp == reducer) {
#else
    __syncthreads();
    if (warp == 0) {
#endif
      // The piece's sums: the warps' partials in warp order; lane (g, c) holds rows g and g + 8 of
      // the unit for rows 2c and 2c + 1 of x (as in gemv_body), and the sums of x^2 of those rows.
      float v[4] = {0.f, 0.f, 0.f, 0.f}, sq[2] = {0.f, 0.f};
#pragma unroll
      for (int w_i = 0; w_i < kWarps; ++w_i) {
        const float4 part = s_partial[buffer][w_i][lane];
        v[0] += part.x;
        v[1] += part.y;
        v[2] += part.z;
        v[3] += part.w;
        if constexpr (kNorm) {
          sq[0] += s_sum_sq[buffer][w_i][2 * c];
          sq[1] += s_sum_sq[buffer][w_i][2 * c + 1];
        }
      }
#if CUTE_OPS_GEMV_ASYNC_REDUCE >= 2
      if (kAsyncReduceHere && local + 2 <= last_unit - first_unit) named_arrive(kEmptyBarrier + buffer);
#endif
      uint64_t* mine = sk.parts + r * kGemvPartWords;
      if (s0 > 0) {
        // Not the unit's first piece: leave it for the CTA that has that one.
        store_words(mine + 4 * lane, landed_word(v[0]), landed_word(v[1]));
        store_words(mine + 4 * lane + 2, landed_word(v[2]), landed_word(v[3]));
        if (kNorm && g == 0) store_words(mine + kPartSqWord + 2 * c, landed_word(sq[0]), landed_word(sq[1]));
      } else {
        if (s1 < n_steps) {
          // The unit's first piece, cut: the later CTAs' pieces of it, in CTA order.
          for (int64_t o = r + 1; o < ctas && o * total / ctas < (unit + 1) * n_steps; ++o) {
            uint64_t* theirs = sk.parts + o * kGemvPartWords;
            const float2 a = wait_words(theirs + 4 * lane), b = wait_words(theirs + 4 * lane + 2);
            v[0] += a.x;
            v[1] += a.y;
            v[2] += b.x;
            v[3] += b.y;
            if constexpr (kNorm) {
              const float2 q = wait_words(theirs + kPartSqWord + 2 * c);
              sq[0] += q.x;
              sq[1] += q.y;
            }
            __syncwarp();  // every lane has read the words of x^2 (8 lanes share each) before they go
            store_words(theirs + 4 * lane, 0, 0);
            store_words(theirs + 4 * lane + 2, 0, 0);
            if (kNorm && g == 0) store_words(theirs + kPartSqWord + 2 * c, 0, 0);
          }
        }
        const UnitRows out_rows = unit_rows<kSwiGLU>(p, unit, g);
        T* out = static_cast<T*>(p.out);
        const T* residual = static_cast<const T*>(p.residual);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int row = 2 * c + j;
          if (row >= p.m) continue;
          const float scale = kNorm ? rsqrtf(sq[j] / static_cast<float>(p.k) + p.eps) : 1.f;  // inv_rms
#pragma unroll
          for (int half = 0; half < (kSwiGLU ? 1 : 2); ++half) {
            const int col = half == 0 ? out_rows.col_lo : out_rows.col_hi;
            if (col < 0) continue;
            float y = kSwiGLU ? silu_times(scale * v[j], scale * v[2 + j]) : scale * v[2 * half + j];
            if constexpr (kResidual) {
              y = to_float(from_float<T>(y)) + to_float(residual[row * p.residual_row_stride + col]);
            }
            out[static_cast<int64_t>(row) * p.out_cols + col] = from_float<T>(y);
          }
        }
      }
    }
#if CUTE_OPS_GEMV_ASYNC_REDUCE >= 2
    ++local;
#endif
    buffer ^= 1;
  }
}

}  // namespace cute_ops::gemv
