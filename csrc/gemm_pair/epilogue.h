#pragma once
// The epilogues of gemm_pair, reading the float32 tile the kernel staged in shared memory
// ([kBlockM, kBlockN], row stride Traits::kEpilogueLd):
//   - GEMM0: the activation, rounded once to 16 bits, into h. SwiGLU pairs column c of the tile
//     (a gate row of b0) with column half + c (the matching up row): pack_gate_up lays b0 out so.
//   - GEMM1: the output tile.
//   - Either GEMM split along K: a float32 partial per split; the split that finishes a tile last
//     sums all partials in split order (deterministic: the sum does not depend on which split
//     came last) and runs that GEMM's epilogue on the sum.
#include <cute/tensor.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gemm_pair/gemm_pair.h"
#include "gemm_pair/tile_order.h"
#include "gemm_pair/tile_sync.h"

namespace cute_ops::gemm_pair {

__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }
__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }

// 16-bit element type <-> float, for the plain CUDA types the stores use.
template <typename Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<Element, cutlass::half_t>) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

template <typename Element>
__device__ __forceinline__ uint4 pack8(const float (&v)[8]) {
  return make_uint4(pack2<Element>(v[0], v[1]), pack2<Element>(v[2], v[3]), pack2<Element>(v[4], v[5]),
                    pack2<Element>(v[6], v[7]));
}

// Columns of h one GEMM0 tile makes: half its b0 rows when gated (gate and up), else all.
template <typename Traits>
__device__ __forceinline__ int h_cols_per_tile(const GemmPairParams& p) {
  return p.activation == static_cast<int>(Activation::kSwiGLU) ? Traits::kBlockN / 2 : Traits::kBlockN;
}

// h[row0 + r, col0 + c] for the tile's valid rows. Gated: the tile holds `half` gate columns then
// `half` up columns (half = 64, less in the last tile); otherwise `width` plain columns.
template <typename Traits>
__device__ __forceinline__ void store_h(const float* sC, const GemmPairParams& p, int row0, int rows, int tile_n) {
  using Element = typename Traits::Element;
  constexpr int kLd = Traits::kEpilogueLd;
  const Activation act = static_cast<Activation>(p.activation);
  const bool gated = act == Activation::kSwiGLU;
  const int h_per_tile = h_cols_per_tile<Traits>(p);
  const int col0 = tile_n * h_per_tile;
  const int width = min(h_per_tile, p.h_width - col0);  // a multiple of 8 (h_width is)
  const int vecs_per_row = h_per_tile / 8;
  Element* h = static_cast<Element*>(p.h);
  for (int i = threadIdx.x; i < Traits::kBlockM * vecs_per_row; i += Traits::kNThreads) {
    const int r = i / vecs_per_row, c = (i % vecs_per_row) * 8;
    if (r >= rows || c >= width) continue;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float x = sC[r * kLd + c + j];
      v[j] = gated ? silu(x) * sC[r * kLd + width + c + j] : act == Activation::kGeLU ? gelu(x) : x;
    }
    *reinterpret_cast<uint4*>(h + static_cast<int64_t>(row0 + r) * p.h_width + col0 + c) = pack8<Element>(v);
  }
}

template <typename Traits>
__device__ __forceinline__ void store_out(const float* sC, const GemmPairParams& p, int row0, int rows, int tile_n) {
  using Element = typename Traits::Element;
  constexpr int kLd = Traits::kEpilogueLd, kVecs = Traits::kBlockN / 8;
  const int col0 = tile_n * Traits::kBlockN;
  const int width = min(Traits::kBlockN, p.n1 - col0);
  Element* out = static_cast<Element*>(p.out);
  for (int i = threadIdx.x; i < Traits::kBlockM * kVecs; i += Traits::kNThreads) {
    const int r = i / kVecs, c = (i % kVecs) * 8;
    if (r >= rows || c >= width) continue;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = sC[r * kLd + c + j];
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(row0 + r) * p.n1 + col0 + c) = pack8<Element>(v);
  }
}

// Split-K, either GEMM: writes this split's float32 tile ([rows, width] of the staging tile) to
// its slice of `partials` (split-major: split * split_stride + row * ld + col), then counts its
// arrival on `arrived`. Returns true in the CTA whose split arrived last; there every split's
// partial is visible.
template <typename Traits>
__device__ __forceinline__ bool publish_partial(const float* sC, float* partials, int64_t split_stride, int64_t ld,
                                                int row0, int rows, int col0, int width, int split, int* arrived,
                                                int splits) {
  constexpr int kLd = Traits::kEpilogueLd, kVecs = Traits::kBlockN / 4;
  float* dst = partials + split * split_stride + row0 * ld + col0;
  for (int i = threadIdx.x; i < Traits::kBlockM * kVecs; i += Traits::kNThreads) {
    const int r = i / kVecs, c = (i % kVecs) * 4;
    if (r >= rows || c >= width) continue;
    *reinterpret_cast<float4*>(dst + r * ld + c) =
        make_float4(sC[r * kLd + c], sC[r * kLd + c + 1], sC[r * kLd + c + 2], sC[r * kLd + c + 3]);
  }
  __shared__ int is_last;
  __syncthreads();  // every partial store of this CTA is issued
  if (threadIdx.x == 0) {
    // acq_rel: publishes this split's partial (release, cumulative over the barrier) and, for the
    // last split, makes the others' partials visible (acquire).
    is_last = fetch_add_acq_rel(arrived, 1) == splits - 1;
  }
  __syncthreads();
  return is_last;
}

// The last split's reduction: the staging tile becomes the sum of every split's partial, added in
// split order, so the result does not depend on which split came last.
template <typename Traits>
__device__ __forceinline__ void sum_partials(float* sC, const float* partials, int64_t split_stride, int64_t ld,
                                             int row0, int rows, int col0, int width, int splits) {
  constexpr int kLd = Traits::kEpilogueLd, kVecs = Traits::kBlockN / 4;
  const float* base = partials + row0 * ld + col0;
  for (int i = threadIdx.x; i < Traits::kBlockM * kVecs; i += Traits::kNThreads) {
    const int r = i / kVecs, c = (i % kVecs) * 4;
    if (r >= rows || c >= width) continue;
    const float* src = base + r * ld + c;
    // Loads in batches of 8, issued before they are summed: one L2 round trip per batch, not per
    // split (this reduction is on the launch's critical path at decode sizes).
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < splits; s0 += 8) {
      float4 v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (s0 + j < splits) v[j] = __ldcg(reinterpret_cast<const float4*>(src + (s0 + j) * split_stride));
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (s0 + j < splits) sum.x += v[j].x, sum.y += v[j].y, sum.z += v[j].z, sum.w += v[j].w;
      }
    }
    sC[r * kLd + c] = sum.x, sC[r * kLd + c + 1] = sum.y, sC[r * kLd + c + 2] = sum.z, sC[r * kLd + c + 3] = sum.w;
  }
  __syncthreads();
}

}  // namespace cute_ops::gemm_pair
