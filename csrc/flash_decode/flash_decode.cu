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

int flash_decode_default_splits(const FlashDecodeParams& p, int num_sms, int max_seqlen) {
  const int m_blocks = (flash_decode_rows(p) + kDecodeBlockM - 1) / kDecodeBlockM;
  const long long ctas = static_cast<long long>(p.b) * p.h_k * m_blocks;
  const int max_splits = std::clamp((max_seqlen + kDecodeBlockN - 1) / kDecodeBlockN / 2, 1, kDecodeMaxSplits);
  // Paged caches: two CTAs an SM. Their tiles jump between pages (and TLB entries), so each load
  // waits longer and one CTA's ring no longer keeps DRAM busy (measured 15-25% slower than
  // contiguous at one CTA an SM, within a few percent at two).
  const long long slots = static_cast<long long>(num_sms) * (p.block_table != nullptr ? 2 : 1);
  // The smallest split count whose last wave fills at least 85% of the slots (or the fullest there is).
  int best = 1;
  double best_eff = 0.0;
  for (int s = 1; s <= max_splits; ++s) {
    const double waves = static_cast<double>(ctas * s) / slots;
    const double eff = waves / std::ceil(waves);
    if (eff >= 0.85) return s;
    if (eff > best_eff + 1e-9) best = s, best_eff = eff;
  }
  return best;
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
