// Picks the instantiation for a call's (dtype, head dim) on the current device. Includes no
// kernel code: the instantiations are compiled in their own translation units
// (instantiations/*.cu), and the generated flash_decode_dispatch.h declares them and holds the
// table (csrc/generate_instantiations.py writes both).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "flash_decode/flash_decode.h"
#include "flash_decode/flash_decode_dispatch.h"
#include "flash_decode/flash_decode_supported.h"

namespace cute_ops {

bool flash_decode_supports_head_dim(int d) {
  return supported::flash_decode::contains(supported::flash_decode::kHeadDims, d);
}

namespace {

// The smallest split count whose last wave fills at least 95% of `slots` CTAs (or the fullest
// there is), at most max_splits. An empty slot is bytes not in flight: at 85% (the rule until
// session 27), B = 1 x 128k on an H200, at two CTAs an SM then, ran 29 splits (232 CTAs of 264
// slots) in 132.8 us, against 124.6-125.8 us at a forced 33 (all 264).
int fill_slots(long long ctas, long long slots, int max_splits) {
  int best = 1;
  double best_eff = 0.0;
  for (int s = 1; s <= max_splits; ++s) {
    const double waves = static_cast<double>(ctas * s) / slots;
    const double eff = waves / std::ceil(waves);
    if (eff >= 0.95) return s;
    if (eff > best_eff + 1e-9) best = s, best_eff = eff;
  }
  return best;
}

}  // namespace

// Tiles of keys a split takes at least. 1: short caches split finer. At B = 1 over LLaMA-3's 8 kv
// heads (4 on a tensor-parallel rank) and ~520 keys (9 tiles), 2 left 32 (16) CTAs of two tiles on
// 132 SMs, and a layer's attention is its longest fixed cost; 1 runs 72 (36) of one tile. A/B on
// one 2 x H200 machine (session 44, graph-replayed 8B step, B = 1 x 512): one GPU 4550 -> 4464 us
// (attention 15.2 -> 12.9 us a layer), TP=2 2807 -> 2731 (14.8 -> 12.6). Batches that fill the SMs
// without splits are unchanged.
#ifndef CUTE_OPS_DECODE_MIN_SPLIT_TILES
#define CUTE_OPS_DECODE_MIN_SPLIT_TILES 1
#endif

int flash_decode_default_splits(const FlashDecodeParams& p, int num_sms, int max_seqlen) {
  const int m_blocks = (flash_decode_rows(p) + kDecodeBlockM - 1) / kDecodeBlockM;
  const long long ctas = static_cast<long long>(p.b) * p.h_k * m_blocks;
  const int tiles = (max_seqlen + kDecodeBlockN - 1) / kDecodeBlockN;
  const int max_splits = std::clamp(tiles / CUTE_OPS_DECODE_MIN_SPLIT_TILES, 1, kDecodeMaxSplits);
  // One CTA an SM, on an H200 too. Until session 28 the H200 (36 GB/s of DRAM an SM) got two, for
  // bytes in flight; once the block-table lookup was taken off the warps' critical path
  // (flash_decode_kernel.h, locate_slab), one did as well or better for contiguous and paged
  // caches alike (same-session A/B over the benchmark grid: B = 16 x 8k paged 127.8 -> 124.5 us,
  // B = 1 x 128k paged 129.7 -> 126.7, cuDNN 122.3 and 126.7).
  // An fp8 cache: two CTAs an SM. Its tiles take about three times the instructions a byte of a
  // 16-bit cache's (fp8_cache.h), and one warp a scheduler cannot hide their latencies: at one CTA
  // an SM it read 2.7-2.9 TB/s, at two 3.6-3.9 (H200, session 30, forced split counts). Registers
  // (255 a thread) allow no third.
  const int ctas_per_sm = p.kv_fp8 ? 2 : 1;
  return fill_slots(ctas, static_cast<long long>(num_sms) * ctas_per_sm, max_splits);
}

void run_flash_decode(const FlashDecodeParams& p, cudaStream_t stream) {
  const DType dtype = p.is_bf16 ? DType::kBFloat16 : DType::kFloat16;
  const int major = flash_decode_dispatch::current_major();
  void (*run)(const FlashDecodeParams&, cudaStream_t) = nullptr;
  flash_decode_dispatch::dispatch(major, dtype, p.d, [&](auto kernel) { run = &decltype(kernel)::run; });
  if (run == nullptr) {
    // The op checked the head dim against the supported set, so this is a build that left the
    // instantiation out (CUTE_OPS_OMIT_*), or a device older than every architecture built.
    throw std::invalid_argument(std::string("flash_decode: this build has no kernel for ") + dtype_name(dtype) +
                                ", head dim " + std::to_string(p.d) + " on a device of compute capability " +
                                std::to_string(major) + ".x");
  }
  run(p, stream);
}

}  // namespace cute_ops
