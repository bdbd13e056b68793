#pragma once
// Where key j of sequence b lives in the KV cache (contiguous or paged), the 16-byte cp.async
// with zero fill used to stage it, and the device-side checks of lengths and pages that the host
// cannot make without a sync.
#include <cstdio>

#include "flash_decode/flash_decode.h"

namespace cute_ops::decode {

using index_t = FlashDecodeParams::index_t;

// An error in device-resident data (lengths, block table): report it and stop the kernel, as
// PyTorch's own index checks do; the next synchronising CUDA call raises.
#define CUTE_OPS_DEVICE_FAIL(...) \
  do {                            \
    printf(__VA_ARGS__);          \
    __trap();                     \
  } while (0)

// A page number read from the block table must be a page of the cache.
__device__ __forceinline__ void check_page(const FlashDecodeParams& p, int bidb, int key, int page) {
  if (p.block_table != nullptr && (page < 0 || page >= p.num_pages)) {
    CUTE_OPS_DEVICE_FAIL("cute_ops.flash_decode: block_table[%d][%d] = %d is not a page of the cache (%d pages)\n",
                         bidb, key / p.page_size, page, p.num_pages);
  }
}

// Page (or batch index) and row within it; checks the page number against the cache.
__device__ __forceinline__ void locate_key(const FlashDecodeParams& p, int bidb, int key, int& page, int& row) {
  if (p.block_table == nullptr) {
    page = bidb;
    row = key;
    return;
  }
  const int slot = key / p.page_size;
  page = p.block_table[bidb * p.block_table_stride + slot];
  row = key - slot * p.page_size;
  check_page(p, bidb, key, page);
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

// Sequence bidb will hold `needed` keys: they must fit the cache (contiguous) or the block
// table's pages (paged).
__device__ __forceinline__ void check_capacity(const FlashDecodeParams& p, int bidb, int needed) {
  const long long capacity = static_cast<long long>(p.max_pages) * p.page_size;
  if (needed > capacity) {
    CUTE_OPS_DEVICE_FAIL(
        "cute_ops.flash_decode: sequence %d needs %d cache rows (cache_seqlens + new tokens) but its %s holds %lld\n",
        bidb, needed, p.block_table ? "block_table row" : "cache", capacity);
  }
  if (needed < 0) CUTE_OPS_DEVICE_FAIL("cute_ops.flash_decode: cache_seqlens[%d] is negative\n", bidb);
}

// 16 bytes global -> shared, or 16 zero bytes when !valid (the source is not read).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}

}  // namespace cute_ops::decode
