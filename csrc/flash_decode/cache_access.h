#pragma once
// Where key j of sequence b lives in the KV cache (contiguous or paged), and the device-side checks of lengths, pages and positions
// that the host cannot make without a sync (reported through common/device_errors.h).
#include "common/device_errors.h"
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

// A page number read from the block table must be a page of the cache.
__device__ __forceinline__ bool page_ok(const FlashDecodeParams& p, int page) {
  return p.block_table == nullptr || (page >= 0 && page < p.num_pages);
}

__device__ __forceinline__ void report_bad_page(const FlashDecodeParams& p, int bidb, int key, int page) {
  report_device_error(p.errors, DeviceErrorOp::kFlashDecode, DeviceErrorCode::kBadPage, bidb, page, p.num_pages,
                      key / p.page_size);
}

// Page (or batch index) and row within it; false (reported if `report`) when the block table names
// a page the cache does not have.
__device__ __forceinline__ bool locate_key(const FlashDecodeParams& p, int bidb, int key, int& page, int& row,
                                           bool report) {
  if (p.block_table == nullptr) {
    page = bidb;
    row = key;
    return true;
  }
  const int slot = key / p.page_size;
  page = p.block_table[bidb * p.block_table_stride + slot];
  row = key - slot * p.page_size;
  if (page_ok(p, page)) return true;
  if (report) report_bad_page(p, bidb, key, page);
  return false;
}

// Where the keys of one tile live, a 16-key group at a time (page_size is a multiple of 16, so a
// group never straddles pages): the group's page and the row of its first key. The attention
// kernel reads them a tile ahead of the tile's loads, so that the block-table latency hides
// behind a tile of compute instead of stalling the loads (with one CTA an SM nothing else would
// cover it).
template <int kGroups>
struct TilePages {
  int page[kGroups];
  int row[kGroups];
};

template <int kGroups>
__device__ __forceinline__ void fetch_tile_pages(const FlashDecodeParams& p, int bidb, int first_key, int seqlen,
                                                 TilePages<kGroups>& t) {
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int key = first_key + g * 16;
    if (p.block_table == nullptr) {
      t.page[g] = bidb, t.row[g] = key;
    } else {
      const int slot = key / p.page_size;
      t.page[g] = key < seqlen ? p.block_table[bidb * p.block_table_stride + slot] : 0;
      t.row[g] = key - slot * p.page_size;
    }
  }
}

}  // namespace cute_ops::decode
