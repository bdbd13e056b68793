#pragma once
// An fp8 (e4m3) KV cache in the decode kernel: how its slabs sit in shared memory, how a warp turns
// them into MMA operands, and how new keys and values are quantized.
//
// The cache holds round(k / k_scale) and round(v / v_scale) in e4m3, one float32 scale per kv head
// (or one for all). The kernel reads half the bytes of a 16-bit cache and dequantizes in
// registers: e4m3 -> half is exact (one cvt per two values), and the scales never touch the
// elements, since a CTA attends one kv head: k_scale joins the softmax scale, v_scale the output.
// The MMAs are fp16 whatever q's dtype. A bf16 query row is scaled by a power of two that puts its
// largest |q| in [2^14, 2^15) (exact: half has more mantissa than bf16, and the row's range now
// fits), and its scores are scaled back in float32. P in [0, 1] loses nothing in half either.
//
// No ldmatrix: it moves 16-bit elements, and a transposed fp8 V would come out in byte pairs.
// Instead each lane loads 16-byte chunks whose bytes are whole MMA operands once the head-dim order
// inside the dot products is permuted, which the sums allow:
// - S = Q K^T (m16n8k16): lane (g, t) = (lane / 4, lane % 4) supplies key g of each 8-key block.
//   For k-chunk c its logical dims {2t, 2t+1, 2t+8, 2t+9} are taken as the physical dims
//   32t + 4c + {0, 1, 2, 3}: one lane reads 32 contiguous bytes of one key for all 8 chunks. Q's
//   fragments, loaded once, follow the same order.
// - O += P V: lane (g, t) supplies keys {2t, 2t+1, 2t+8, 2t+9} (P's columns, as S's accumulators
//   leave them) of output column g in each n8 block nb; that column is taken as physical dim
//   16g + nb, so the lane reads 16 contiguous bytes of each of its 4 keys, and byte nb of the
//   four is block nb's operand (two byte permutes per 4 blocks). The output columns come out in
//   that order; the warps' merge puts them back (o_column).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cfloat>

#include <cute/arch/mma_sm80.hpp>
#include <cute/tensor.hpp>

#include "flash_decode/flash_decode_limits.h"

namespace cute_ops::decode::fp8 {

constexpr int kHeadDim = kDecodeFp8HeadDim;  // the one head dim with an fp8 path
constexpr int kChunks = kHeadDim / 16;  // 16-byte chunks of one key row

// Byte offset of 16-byte chunk `chunk` of slab row `row` ([keys][128 bytes]). Chunk c of row r
// sits at chunk c ^ (r % 8): the K loads (one key's chunks 2t, 2t+1 a lane, keys g and g + 1 in one
// phase) and the V loads (chunk g of keys 2t, one phase: keys 0, 2, 4, 6) then hit 32 banks a phase.
__device__ __forceinline__ int slab_offset(int row, int chunk) { return row * kHeadDim + ((chunk ^ (row & 7)) << 4); }

// Two e4m3 values (low byte first) as a half2 register (first value in the low half).
__device__ __forceinline__ uint32_t e4m3x2_to_half2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// 16 values (as 16-bit Element, 32 bytes) quantized to 16 e4m3 bytes: x * inv_scale, saturated to
// +-448 (NaN stays NaN).
template <typename Element>
__device__ __forceinline__ uint4 quantize16(const Element* src, float inv_scale) {
  const uint4 a = *reinterpret_cast<const uint4*>(src);
  const uint4 b = *reinterpret_cast<const uint4*>(src + 8);
  const Element* x0 = reinterpret_cast<const Element*>(&a);
  const Element* x1 = reinterpret_cast<const Element*>(&b);
  uint32_t words[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const Element* x = w < 2 ? x0 + 4 * w : x1 + 4 * (w - 2);
    uint32_t word = 0;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float2 f = make_float2(static_cast<float>(x[2 * j]) * inv_scale, static_cast<float>(x[2 * j + 1]) * inv_scale);
      word |= static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3)) << (16 * j);
    }
    words[w] = word;
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// Q's A fragments for S = Q K^T, in the permuted head-dim order (above): frag[c] holds k-chunk c,
// registers {row g, row g + 8} x {dims 32t + 4c + {0,1}, + {2,3}} in the PTX order (row g lo, row
// g + 8 lo, row g hi, row g + 8 hi). unscale[i]: the power of two that row g + 8i's scores are
// multiplied by. `sign` (+-1) negates q (a negative softmax scale).
template <typename SQ>
__device__ __forceinline__ void load_q(const SQ& sQ, int lane, float sign, uint32_t (&frag)[kChunks][4],
                                       float (&unscale)[2]) {
  using Element = typename SQ::value_type;
  const int g = lane / 4, t = lane % 4;
  // The lane's 64 values as read (two adjacent dims a word), scaled and rounded in place below:
  // one copy in registers, as the kernel's O and the ring's addresses are live here too.
  float m[2] = {0.f, 0.f};
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = k % 2, d = 32 * t + 4 * c + 2 * (k / 2);
      frag[c][k] = *reinterpret_cast<const uint32_t*>(&sQ(g + 8 * i, d));
      const Element* x = reinterpret_cast<const Element*>(&frag[c][k]);
      m[i] = fmaxf(m[i], fmaxf(fabsf(static_cast<float>(x[0])), fabsf(static_cast<float>(x[1]))));
    }
  }
  float scale[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    m[i] = fmaxf(m[i], __shfl_xor_sync(0xffffffffu, m[i], 1));
    m[i] = fmaxf(m[i], __shfl_xor_sync(0xffffffffu, m[i], 2));
    // A zero (or infinite) row keeps its scale; tiny rows stop at 2^100, far below any score that
    // moves a softmax.
    const int e = (m[i] > 0.f && m[i] <= FLT_MAX) ? max(-100, min(100, ilogbf(m[i]) - 14)) : 0;
    scale[i] = sign * ldexpf(1.f, -e);
    unscale[i] = ldexpf(1.f, e);
  }
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const Element* x = reinterpret_cast<const Element*>(&frag[c][k]);
      frag[c][k] = pack_half2(static_cast<float>(x[0]) * scale[k % 2], static_cast<float>(x[1]) * scale[k % 2]);
    }
  }
}

// S (16 rows x kKeys keys, n8 blocks j: acc_s elements 4j .. 4j + 3 are block j's C registers) +=
// Q K^T over this warp's K slab.
template <int kKeys, typename AccS>
__device__ __forceinline__ void scores(AccS& acc_s, const char* k_slab, const uint32_t (&q)[kChunks][4], int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < kKeys / 8; ++j) {
    const int key = 8 * j + g;
    const uint4 lo = *reinterpret_cast<const uint4*>(k_slab + slab_offset(key, 2 * t));
    const uint4 hi = *reinterpret_cast<const uint4*>(k_slab + slab_offset(key, 2 * t + 1));
    const uint32_t words[kChunks] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const uint32_t b0 = e4m3x2_to_half2(words[c]), b1 = e4m3x2_to_half2(words[c] >> 16);
      cute::SM80_16x8x16_F32F16F16F32_TN::fma(acc_s(4 * j), acc_s(4 * j + 1), acc_s(4 * j + 2), acc_s(4 * j + 3),
                                              q[c][0], q[c][1], q[c][2], q[c][3], b0, b1, acc_s(4 * j),
                                              acc_s(4 * j + 1), acc_s(4 * j + 2), acc_s(4 * j + 3));
    }
  }
}

// One k16 step of accumulate_pv: keys [key0, key0 + 16) of the slab, P from acc_s elements
// [s0, s0 + 8) (two n8 blocks of S).
template <typename AccO, typename AccS>
__device__ __forceinline__ void accumulate_pv16(AccO& acc_o, const AccS& acc_s, int s0, const char* v_slab, int key0,
                                                int lane) {
  const int g = lane / 4, t = lane % 4;
  const uint32_t a0 = pack_half2(acc_s(s0), acc_s(s0 + 1)), a1 = pack_half2(acc_s(s0 + 2), acc_s(s0 + 3));
  const uint32_t a2 = pack_half2(acc_s(s0 + 4), acc_s(s0 + 5)), a3 = pack_half2(acc_s(s0 + 6), acc_s(s0 + 7));
  const uint4 v0 = *reinterpret_cast<const uint4*>(v_slab + slab_offset(key0 + 2 * t, g));
  const uint4 v1 = *reinterpret_cast<const uint4*>(v_slab + slab_offset(key0 + 2 * t + 1, g));
  const uint4 v2 = *reinterpret_cast<const uint4*>(v_slab + slab_offset(key0 + 2 * t + 8, g));
  const uint4 v3 = *reinterpret_cast<const uint4*>(v_slab + slab_offset(key0 + 2 * t + 9, g));
  const uint32_t w0[4] = {v0.x, v0.y, v0.z, v0.w}, w1[4] = {v1.x, v1.y, v1.z, v1.w};
  const uint32_t w2[4] = {v2.x, v2.y, v2.z, v2.w}, w3[4] = {v3.x, v3.y, v3.z, v3.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // Bytes (2h, 2h + 1) of keys (2t, 2t + 1) and (2t + 8, 2t + 9), interleaved: two key pairs of
      // columns nb = 4w + 2h and nb + 1.
      const uint32_t sel = half == 0 ? 0x5140u : 0x7362u;
      const uint32_t lo = __byte_perm(w0[w], w1[w], sel), hi = __byte_perm(w2[w], w3[w], sel);
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int nb = 4 * w + 2 * half + k;
        const uint32_t b0 = e4m3x2_to_half2(lo >> (16 * k)), b1 = e4m3x2_to_half2(hi >> (16 * k));
        cute::SM80_16x8x16_F32F16F16F32_TN::fma(acc_o(4 * nb), acc_o(4 * nb + 1), acc_o(4 * nb + 2), acc_o(4 * nb + 3),
                                                a0, a1, a2, a3, b0, b1, acc_o(4 * nb), acc_o(4 * nb + 1),
                                                acc_o(4 * nb + 2), acc_o(4 * nb + 3));
      }
    }
  }
}

// O (16 rows x 128 columns in the permuted order, 16 n8 blocks: acc_o elements 4nb .. 4nb + 3) +=
// P V over this warp's V slab of kKeys keys, one k16 step at a time; P is acc_s (already
// exponentiated), rounded to half.
template <int kKeys, typename AccO, typename AccS>
__device__ __forceinline__ void accumulate_pv(AccO& acc_o, const AccS& acc_s, const char* v_slab, int lane) {
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) accumulate_pv16(acc_o, acc_s, 8 * kk, v_slab, 16 * kk, lane);
}

// The head dim of O's column `col` (as the MMA's n index: block col / 8, column col % 8).
__device__ __forceinline__ int o_column(int col) { return 16 * (col % 8) + col / 8; }

}  // namespace cute_ops::decode::fp8
