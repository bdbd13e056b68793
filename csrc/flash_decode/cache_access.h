#pragma once
// Where key j of sequence b lives in the KV cache (contiguous or paged), and the device-side checks of lengths, pages and positions
// that the host cannot make without a sync (reported through common/device_errors.h).
#include "common/device_errors.h"
#include "common/pdl.h"
#include "flash_decode/flash_decode.h"

namespace cute_ops::decode {

using index_t = FlashDecodeParams::index_t;

// A sequence's extent, checked before any use: cache_seqlens[b] >= 0, the appended tokens fit the
// cache (contiguous) or the block table's pages (paged), and their positions have rows in the
// rotary table. Every CTA of the attention kernel checks its sequence this way, so they agree on
// which sequences to skip: a bad one gets no cache writes and NaN outputs (ok = false, seqlen = 0).
struct SequenceExtent {
  bool ok;
  int cached;  // keys in the cache before the append
  int seqlen;  // keys attended: cached + new tokens
};

__device__ __forceinline__ SequenceExtent check_sequence(const FlashDecodeParams& p, int bidb, bool report) {
  const int cached = p.cache_seqlens[bidb];
  const long long seqlen = static_cast<long long>(cached) + p.seqlen_new;
  const long long capacity = static_cast<long long>(p.max_pages) * p.page_size;
  if (cached < 0) {
    if (report) {
      report_device_error(p.errors, DeviceErrorOp::kFlashDecode, DeviceErrorCode::kNegativeLength, bidb, cached);
    }
  } else if (seqlen > capacity) {
    if (report) {
      report_device_error(p.errors, DeviceErrorOp::kFlashDecode, DeviceErrorCode::kCapacity, bidb, seqlen, capacity,
                          p.block_table != nullptr);
    }
  } else if (p.rotary_cos != nullptr && p.seqlen_new > 0 && seqlen > p.rotary_rows) {
    if (report) {  // the first position past the table
      report_device_error(p.errors, DeviceErrorOp::kFlashDecode, DeviceErrorCode::kRotaryPosition, bidb,
                          cached > p.rotary_rows ? cached : p.rotary_rows, p.rotary_rows);
    }
  } else {
    return {true, cached, static_cast<int>(seqlen)};
  }
  return {false, 0, 0};
}

// An L2 prefetch, before the wait on the previous kernel, of the lines this CTA reads first: its
// sequence's length and, for a paged cache, the block-table line holding slot 0 (slots 0-31 when
// the row is 128-byte aligned) and the line a split of a full table starts in (a guess, harmless
// when wrong; skipped below slot 32). Safe before the wait (common/pdl.h, prefetch_l2); it saves
// the DRAM trips of the chain length -> table entry -> first K/V tile, which otherwise start only
// after the wait (docs/perf-notes.md, session 69). Thread 0 of each CTA.
__device__ __forceinline__ void prefetch_sequence_meta(const FlashDecodeParams& p, int bidb, int split,
                                                       int block_n) {
  prefetch_l2(p.cache_seqlens + bidb);
  if (p.block_table == nullptr) return;
  const int* row = p.block_table + bidb * p.block_table_stride;
  prefetch_l2(row);
  // Where split `split` would start if the sequence filled its table.
  const long long tiles = (static_cast<long long>(p.max_pages) * p.page_size + block_n - 1) / block_n;
  const long long slot = split * ((tiles + p.num_splits - 1) / p.num_splits) * block_n / p.page_size;
  if (slot >= 32 && slot < p.max_pages) prefetch_l2(row + slot);
}

// A page number read from the block table must be a page of the cache.
__device__ __forceinline__ bool page_ok(const FlashDecodeParams& p, int page) {
  return p.block_table == nullptr || (page >= 0 && page < p.num_pages);
}

__device__ __forceinline__ void report_bad_page(const FlashDecodeParams& p, int bidb, int key, int page) {
  report_device_error(p.errors, DeviceErrorOp::kFlashDecode, DeviceErrorCode::kBadPage, bidb, page, p.num_pages,
                      key / p.page_size);
}

// The block-table entries a warp walks through, held in registers a warp-wide load at a time: lane
// i holds slot first + i (register `lo`, the entries in use, read by shuffle) and first + 32 + i
// (`hi`, the next 32). Entries are thus loaded 32 slots before they are needed, instead of a tile
// ahead, where a block-table load can wait behind the SM's queue of cache loads (microseconds on
// an H200 at full bandwidth) and hold up the tile's copies. Measured on an H200: paged caches 3%
// faster than with the entries read a tile ahead; the rest of their gap to contiguous caches
// (15% at the same split count) was the ring, which the warp-private slabs closed at two CTAs an
// SM. At one CTA an SM a 9% gap was left, closed by where the loop does the lookup (before its
// wait: flash_decode_kernel.h, locate_slab).
// A contiguous cache has no table: the "page" is the batch index and the row the key.
struct PageWindow {
  int first;  // slot of lane 0's `lo` entry
  int lo, hi;
  int shift;  // log2(page_size) when it is a power of two (a shift, not a division), else -1

  __device__ __forceinline__ static int load(const FlashDecodeParams& p, int bidb, int slot) {
    return slot < p.max_pages ? p.block_table[bidb * p.block_table_stride + slot] : 0;
  }

  // The window starting at the slot of key `first_key`. Called by every lane of a warp.
  __device__ __forceinline__ void start(const FlashDecodeParams& p, int bidb, int first_key, int lane) {
    first = p.block_table == nullptr ? 0 : first_key / p.page_size;
    shift = (p.page_size & (p.page_size - 1)) == 0 ? __ffs(p.page_size) - 1 : -1;
    if (p.block_table != nullptr) {
      lo = load(p, bidb, first + lane);
      hi = load(p, bidb, first + 32 + lane);
    }
  }

  // Where the keys of one 16-key group live (page_size is a multiple of 16, so a group never
  // straddles pages): its page and the row of its first key. Keys are asked for in increasing
  // order, by every lane of the warp with the same key; the window moves on when a slot is past
  // `lo`, and loads the 32 entries after `hi` then. An entry past the table is 0, and is only
  // used for keys the caller zero-fills.
  __device__ __forceinline__ void locate(const FlashDecodeParams& p, int bidb, int key, int lane, int& page,
                                         int& row) {
    if (p.block_table == nullptr) {
      page = bidb, row = key;
      return;
    }
    const int slot = shift >= 0 ? key >> shift : key / p.page_size;
    while (slot >= first + 32) {  // warp-uniform
      first += 32;
      lo = hi;
      hi = load(p, bidb, first + 32 + lane);
    }
    page = __shfl_sync(0xffffffffu, lo, slot - first);
    row = key - slot * p.page_size;
  }
};

}  // namespace cute_ops::decode
