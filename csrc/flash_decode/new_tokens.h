#pragma once
// This step's new tokens inside the attention kernel: rotate-half RoPE of q and k_new at their
// positions, and where their keys and values go. The kernel itself does the append (there is no
// separate append launch): every CTA takes the new tokens' keys and values from k_new / v_new
// instead of the cache, and one CTA per (sequence, kv head) writes them into the cache for the
// calls that follow. The new rows are a few KB; a kernel of their own cost a launch and a
// dependency wait per layer of a model (~8 us), more than the bytes.
//
// Every global load here is issued before the CTA's first cache tiles: k_new / v_new rows by
// cp.async into shared memory (landing with Q and the first tile), the cos / sin values and the
// new tokens' block-table entries into registers. Loaded later, they queue behind the SM's cache
// loads and cost microseconds each; loaded one element at a time, a round trip per element. Both
// showed in the LLaMA model's geometry as 4-13 us a call (H200, sessions 28-29). After the first
// tile's barrier everything is shared-memory work: rotate Q and the new keys in place, write the
// cache rows, and copy the rows into the ring at the tile that holds them.
#include <cute/tensor.hpp>

#include "common/cute/sm80_copy.h"
#include "flash_decode/cache_access.h"
#include "flash_decode/flash_decode.h"
#include "flash_decode/flash_decode_limits.h"
#include "flash_decode/fp8_cache.h"

namespace cute_ops::decode {

// Element: k_new's dtype; CacheElement: the cache's (Element, or e4m3: the rows are quantized on
// their way into the cache and the ring, so this call attends the values later calls will read).
template <typename Element, int kHeadDim, int kNThreads, typename CacheElement = Element>
struct NewTokens {
  static constexpr int kChunk = 16 / sizeof(Element);       // elements a 16-byte copy moves
  static constexpr int kRowChunks = kHeadDim / kChunk;       // chunks of one key (or value) row
  static constexpr bool kFp8 = sizeof(CacheElement) == 1;
  // Elements one 16-byte write into the cache (or a ring slab) holds, and such writes a row.
  static constexpr int kOutChunk = 16 / sizeof(CacheElement);
  static constexpr int kOutRowChunks = kHeadDim / kOutChunk;
  // Shared memory: [token][key, value][head dim] rows, then the tokens' pages.
  static constexpr int kRowsElems = kDecodeMaxNewTokens * 2 * kHeadDim;
  static constexpr int kSmemBytes = kRowsElems * static_cast<int>(sizeof(Element)) + kDecodeMaxNewTokens * 4;
  // (token, rotary pair) units a thread rotates: at most kRotUnits; the cos/sin of the first
  // kHeldUnits are loaded ahead into registers (one token at head dim 128, two at 64, per unit),
  // the rest (steps of more new tokens) read when rotating. Holding all 8 (head dim 128) took
  // unrolled code that slowed every call (see rotate).
  static constexpr int kRotUnits = (kDecodeMaxNewTokens * kHeadDim / 2 + kNThreads - 1) / kNThreads;
  static constexpr int kHeldUnits = kRotUnits < 2 ? kRotUnits : 2;

  Element* rows;  // shared
  int* pages;     // shared: the page each new token's row is in (the batch index for a contiguous cache)
  float cos_[kHeldUnits], sin_[kHeldUnits];  // this thread's units u = tid + k * kNThreads, k < kHeldUnits
  int page_;                               // thread t < sq: new token t's page, as read

  __device__ __forceinline__ explicit NewTokens(char* smem)
      : rows(reinterpret_cast<Element*>(smem)), pages(reinterpret_cast<int*>(smem + kRowsElems * sizeof(Element))) {}

  __device__ __forceinline__ Element* row(int token, int is_value) const {
    return rows + (token * 2 + is_value) * kHeadDim;
  }

  // cos and sin of rotary pair f at position pos.
  __device__ __forceinline__ static void rotary_at(const FlashDecodeParams& p, int pos, int f, float& c, float& s) {
    const index_t at = static_cast<index_t>(pos) * p.rotary_stride + f;
    if (p.rotary_fp32) {
      c = static_cast<const float*>(p.rotary_cos)[at], s = static_cast<const float*>(p.rotary_sin)[at];
    } else {
      c = static_cast<float>(static_cast<const Element*>(p.rotary_cos)[at]);
      s = static_cast<float>(static_cast<const Element*>(p.rotary_sin)[at]);
    }
  }

  // Issues this CTA's loads (before its first cache tiles): the rows when stage_rows (into the
  // current cp.async group), the cos/sin values when rotating, the pages when stage_rows.
  __device__ __forceinline__ void load(const FlashDecodeParams& p, int b, int kv_head, int cached, bool stage_rows,
                                       bool rotate, int tid) {
    if (stage_rows) {
      const Element* k_new = static_cast<const Element*>(p.k_new) + b * p.knew_batch_stride +
                             kv_head * p.knew_head_stride;
      const Element* v_new = static_cast<const Element*>(p.v_new) + b * p.vnew_batch_stride +
                             kv_head * p.vnew_head_stride;
      for (int u = tid; u < p.seqlen_new * 2 * kRowChunks; u += kNThreads) {
        const int i = u / (2 * kRowChunks), is_value = (u / kRowChunks) % 2, col = (u % kRowChunks) * kChunk;
        const Element* src = is_value ? v_new + i * p.vnew_row_stride : k_new + i * p.knew_row_stride;
        sm80::cp_async_16(row(i, is_value) + col, src + col, true);
      }
      if (tid < p.seqlen_new) {
        page_ = p.block_table == nullptr ? b : PageWindow::load(p, b, (cached + tid) / p.page_size);
      }
    }
    if (rotate) {
      const int half = p.rotary_dim / 2;
#pragma unroll
      for (int k = 0; k < kHeldUnits; ++k) {
        const int u = tid + k * kNThreads;
        if (u < p.seqlen_new * half) rotary_at(p, cached + u / half, u % half, cos_[k], sin_[k]);
      }
    }
  }

  // Publishes the pages (after the first tiles are issued: the store waits for the load). New
  // token t's key is poisoned when the CTA attends it and its entry is no page; the append skips it.
  __device__ __forceinline__ void store_pages(const FlashDecodeParams& p, int cached, int first_key, int end_key,
                                              int tid, bool& poisoned, int& bad_page_key, int& bad_page) const {
    if (tid >= p.seqlen_new) return;
    pages[tid] = page_;
    const int key = cached + tid;
    if (!page_ok(p, page_) && key >= first_key && key < end_key) {
      poisoned = true, bad_page_key = key, bad_page = page_;
    }
  }

  // Rotate-half RoPE in place, in float32 and rounded once to Element (as the cache stores keys):
  // the packed Q rows [q_row0, q_row0 + q_rows) of sQ (row r is token r / group) and, with
  // staged rows, the new keys. Pairs (f, f + rotary_dim / 2); dims past rotary_dim unchanged.
  template <typename SQ>
  __device__ __forceinline__ void rotate(const FlashDecodeParams& p, SQ& sQ, int cached, int q_row0, int q_rows,
                                         int group, bool staged_rows, int tid) const {
    const int half = p.rotary_dim / 2;
    auto turn = [&](auto&& x, auto&& y, float c, float s) {
      const float a = static_cast<float>(x), b = static_cast<float>(y);
      x = static_cast<Element>(a * c - b * s);
      y = static_cast<Element>(b * c + a * s);
    };
    // Not unrolled: the body once in the code. Unrolled, it grew the kernel's code from 101 to
    // 148 KB, and short CTAs, which run most of their code once, paid for the instruction fetches
    // (up to 0.3 us at B = 1 x 2k, H200, session 29).
#pragma unroll 1
    for (int k = 0; k < kRotUnits; ++k) {
      const int u = tid + k * kNThreads;
      if (u >= p.seqlen_new * half) break;
      const int i = u / half, f = u % half;
      float c, s;
      if (k < kHeldUnits) {
        c = cos_[0], s = sin_[0];
#pragma unroll
        for (int kk = 1; kk < kHeldUnits; ++kk) {
          if (k == kk) c = cos_[kk], s = sin_[kk];
        }
      } else {
        rotary_at(p, cached + i, f, c, s);
      }
      const int r_begin = max(i * group, q_row0), r_end = min((i + 1) * group, q_row0 + q_rows);
#pragma unroll 1
      for (int r = r_begin; r < r_end; ++r) turn(sQ(r - q_row0, f), sQ(r - q_row0, f + half), c, s);
      if (staged_rows) turn(row(i, 0)[f], row(i, 0)[f + half], c, s);
    }
  }

  // 16 bytes of cache row: the staged row's elements [col, col + kOutChunk), quantized with
  // inv_scale for an fp8 cache.
  __device__ __forceinline__ uint4 cache_chunk(int token, int is_value, int col, float inv_scale) const {
    if constexpr (kFp8) {
      return fp8::quantize16(row(token, is_value) + col, inv_scale);
    } else {
      return *reinterpret_cast<const uint4*>(row(token, is_value) + col);
    }
  }

  // Writes the staged (rotated) rows into the cache at positions cached + i, skipping a token whose
  // block-table entry is no page (the CTAs that attend it poison the sequence). inv_scale: 1 /
  // k_scale, 1 / v_scale (fp8 caches).
  __device__ __forceinline__ void append(const FlashDecodeParams& p, int kv_head, int cached, int tid,
                                         const float (&inv_scale)[2]) const {
    for (int u = tid; u < p.seqlen_new * 2 * kOutRowChunks; u += kNThreads) {
      const int i = u / (2 * kOutRowChunks), is_value = (u / kOutRowChunks) % 2;
      const int col = (u % kOutRowChunks) * kOutChunk;
      const int page = pages[i];
      if (!page_ok(p, page)) continue;
      const int key = cached + i;
      const int row_in_page = p.block_table == nullptr ? key : key % p.page_size;
      CacheElement* dst = is_value ? static_cast<CacheElement*>(p.v_cache) + page * p.v_page_stride +
                                         row_in_page * p.v_row_stride + kv_head * p.v_head_stride
                                   : static_cast<CacheElement*>(p.k_cache) + page * p.k_page_stride +
                                         row_in_page * p.k_row_stride + kv_head * p.k_head_stride;
      *reinterpret_cast<uint4*>(dst + col) = cache_chunk(i, is_value, col, inv_scale[is_value]);
    }
  }

  // The rows of keys [first, last) (all new: first >= cached) into the ring's slabs of the tile
  // whose first key is tile_key0, over the zeros the cache copy left there. slab_base(w, is_value)
  // is warp w's K (0) or V (1) slab of the tile's stage (bytes), slab_offset(row, col) the byte
  // offset there of the 16-byte chunk of slab row `row` that starts at element col.
  template <int kWarpKeys, typename SlabBase, typename SlabOffset>
  __device__ __forceinline__ void put(int cached, int first, int last, int tile_key0, SlabBase slab_base,
                                      SlabOffset slab_offset, int tid, const float (&inv_scale)[2]) const {
    for (int u = tid; u < (last - first) * 2 * kOutRowChunks; u += kNThreads) {
      const int key = first + u / (2 * kOutRowChunks), is_value = (u / kOutRowChunks) % 2;
      const int col = (u % kOutRowChunks) * kOutChunk;
      const int r = key - tile_key0;
      char* dst = slab_base(r / kWarpKeys, is_value) + slab_offset(r % kWarpKeys, col);
      *reinterpret_cast<uint4*>(dst) = cache_chunk(key - cached, is_value, col, inv_scale[is_value]);
    }
  }
};

}  // namespace cute_ops::decode
