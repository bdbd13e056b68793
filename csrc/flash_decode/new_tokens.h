#pragma once
// This step's new tokens inside the attention kernel: rotate-half RoPE of q and k_new at their
// positions, and where their keys and values go. The kernel itself does the append (there is no
// separate append launch): every CTA takes the new tokens' keys and values from k_new / v_new
// (rotated in registers) instead of the cache, and one CTA per (sequence, kv head) writes them
// into the cache for the calls that follow. The new rows are a few KB; a kernel of their own
// cost a launch and a dependency wait per layer of a model (~8 us), more than the bytes.
#include "flash_decode/cache_access.h"
#include "flash_decode/flash_decode.h"

namespace cute_ops::decode {

// Element j of the head vector x rotated at position pos: pairs (j, j + rotary_dim / 2) for
// j < rotary_dim / 2; dims past rotary_dim, or no table, unchanged. Computed in float32 and
// rounded once to the element type by the caller, as the cache stores it.
template <typename Element>
__device__ __forceinline__ float rope_element(const FlashDecodeParams& p, const Element* x, int j, int pos) {
  const float v = static_cast<float>(x[j]);
  if (p.rotary_cos == nullptr || j >= p.rotary_dim) return v;
  const int half = p.rotary_dim / 2;
  const int f = j < half ? j : j - half;
  const index_t at = static_cast<index_t>(pos) * p.rotary_stride + f;
  float c, s;
  if (p.rotary_fp32) {
    c = static_cast<const float*>(p.rotary_cos)[at], s = static_cast<const float*>(p.rotary_sin)[at];
  } else {
    c = static_cast<float>(static_cast<const Element*>(p.rotary_cos)[at]);
    s = static_cast<float>(static_cast<const Element*>(p.rotary_sin)[at]);
  }
  return j < half ? v * c - static_cast<float>(x[j + half]) * s : v * c + static_cast<float>(x[j - half]) * s;
}

// Head kv_head of new token i of sequence b: the key (rotated) or the value.
template <typename Element>
__device__ __forceinline__ const Element* new_key_row(const FlashDecodeParams& p, int b, int i, int kv_head) {
  return static_cast<const Element*>(p.k_new) + b * p.knew_batch_stride + i * p.knew_row_stride +
         kv_head * p.knew_head_stride;
}
template <typename Element>
__device__ __forceinline__ const Element* new_value_row(const FlashDecodeParams& p, int b, int i, int kv_head) {
  return static_cast<const Element*>(p.v_new) + b * p.vnew_batch_stride + i * p.vnew_row_stride +
         kv_head * p.vnew_head_stride;
}

// Writes the sq new keys (rotated) and values of one kv head into the cache at positions
// cached + i, with all threads of the CTA. A block table entry that is no page leaves its row
// unwritten; the CTAs that attend that key find the same entry and poison the sequence.
template <typename Element>
__device__ __forceinline__ void append_new_tokens(const FlashDecodeParams& p, int b, int kv_head, int cached,
                                                  int tid, int n_threads) {
  const int units = p.seqlen_new * 2 * p.d;
  for (int u = tid; u < units; u += n_threads) {
    const int i = u / (2 * p.d), is_value = (u / p.d) % 2, j = u % p.d;
    int page, row;
    if (!locate_key(p, b, cached + i, page, row, /*report=*/false)) continue;
    if (is_value) {
      Element* dst = static_cast<Element*>(p.v_cache) + page * p.v_page_stride + row * p.v_row_stride +
                     kv_head * p.v_head_stride;
      dst[j] = new_value_row<Element>(p, b, i, kv_head)[j];
    } else {
      Element* dst = static_cast<Element*>(p.k_cache) + page * p.k_page_stride + row * p.k_row_stride +
                     kv_head * p.k_head_stride;
      dst[j] = static_cast<Element>(rope_element(p, new_key_row<Element>(p, b, i, kv_head), j, cached + i));
    }
  }
}

}  // namespace cute_ops::decode
