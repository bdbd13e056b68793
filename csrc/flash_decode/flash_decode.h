#pragma once
// Flash-Decoding over a KV cache: the torch-free interface between the op glue
// (flash_decode_op.cpp) and the kernel (split-KV attention with the append and the merge of the splits).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/device_errors.h"
#include "flash_decode/flash_decode_limits.h"

namespace cute_ops {

struct FlashDecodeParams {
  using index_t = int64_t;

  // q [b, sq, h, d] as the caller gave it (the attention kernel rotates it), strides in elements.
  const void* q;
  index_t q_batch_stride, q_row_stride, q_head_stride;

  // The cache. Contiguous: [b, capacity, h_k, d], "page" = batch index, page_size = capacity.
  // Paged: [num_pages, page_size, h_k, d]; key j of sequence b lives in page
  // block_table[b * block_table_stride + j / page_size], row j % page_size.
  void* k_cache;
  void* v_cache;
  index_t k_page_stride, k_row_stride, k_head_stride;
  index_t v_page_stride, v_row_stride, v_head_stride;
  // An fp8 (e4m3) cache: the elements are round(k / k_scale[h]), round(v / v_scale[h]) for kv head h
  // (fp8_cache.h); the scales are float32 on the device, kv_scale_stride 0 (one for all heads) or
  // 1 (one a kv head). Otherwise the cache has q's dtype and the scales are unused.
  bool kv_fp8;
  const float* k_scale;
  const float* v_scale;
  int kv_scale_stride;
  const int* block_table;  // nullptr: contiguous
  index_t block_table_stride;
  int max_pages;   // block_table columns (paged) or 1 (contiguous)
  int page_size;   // rows per page (paged) or capacity (contiguous)
  int num_pages;   // pages in the cache tensor (paged) or b (contiguous)

  const int* cache_seqlens;  // [b]: keys in the cache before this call's append
  // Where a bad length, page or position of a sequence is reported (common/device_errors.h).
  // Every kernel of the op checks a sequence the same way (cache_access.h), skips the cache
  // writes of a bad one and gives it NaN outputs; the other sequences are unaffected.
  DeviceErrorSink errors;

  // New tokens, appended at cache_seqlens[b] before attending (seqlen_new = sq), or none (0).
  int seqlen_new;
  const void* k_new;
  const void* v_new;
  index_t knew_batch_stride, knew_row_stride, knew_head_stride;
  index_t vnew_batch_stride, vnew_row_stride, vnew_head_stride;
  // Rotate-half RoPE of q and k_new at positions cache_seqlens[b] + i: cos and sin
  // [rotary_rows, rotary_dim / 2], row stride rotary_stride; nullptr: none.
  const void* rotary_cos;
  const void* rotary_sin;
  index_t rotary_stride;
  int rotary_dim, rotary_rows;
  bool rotary_fp32;

  // Outputs: out [b, sq, h, d] (strides below), lse [b, h, sq] contiguous float32. With
  // num_splits > 1 each split writes float32 partials (rows (b * h + head) * sq + i), and the last
  // split of each (sequence, kv head, row block) to finish merges them (split_merge.h).
  void* o;
  index_t o_batch_stride, o_row_stride, o_head_stride;
  float* lse;
  float* o_partial;    // [num_splits, b * h * sq, d]
  float* lse_partial;  // [num_splits, b * h * sq]
  // [b, h_k, row blocks] arrival counters, zero before the launch and left zero after it
  // (common/arrival_counters.h).
  int* split_counters;

  int b, sq, h, h_k, d;
  int num_splits;
  bool pdl;        // sm_90+: launch as programmatic dependents (common/pdl.h)
  float scale_softmax, scale_softmax_log2;  // as in FlashFwdParams: |scale|, and q negated when < 0
  bool negate_q;
  bool causal;
  bool is_bf16;
};

bool flash_decode_supports_head_dim(int d);

// Packed query rows of one kv head: (sq new tokens) x (h / h_k query heads), taken 16 (one MMA
// row tile) a CTA. A CTA of 32 rows would need Q (64 registers a thread) and O (128) resident
// and spills; more row blocks re-read the same K/V tiles, mostly from L2, as they run together.
inline int flash_decode_rows(const FlashDecodeParams& p) { return p.sq * (p.h / p.h_k); }
constexpr int kDecodeBlockM = 16;
constexpr int kDecodeBlockN = 64;     // keys a CTA stages at a time (4 warps x 16)

// The split count for num_splits = 0: about one CTA an SM, each split covering at least one key
// tile (CUTE_OPS_DECODE_MIN_SPLIT_TILES, flash_decode.cu) of the longest possible sequence
// (max_seqlen).
int flash_decode_default_splits(const FlashDecodeParams& p, int num_sms, int max_seqlen);

void run_flash_decode(const FlashDecodeParams& p, cudaStream_t stream);

}  // namespace cute_ops
