// Picks the instantiation for a call's (dtype, head dim), after the append kernel when the call
// brings new tokens. Includes no kernel code: see instantiations/*.cu and flash_decode_append.cu.
#include <cutlass/numeric_types.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "flash_decode/flash_decode.h"

namespace cute_ops {

template <typename Element, int kHeadDim>
void run_flash_decode_(const FlashDecodeParams& p, cudaStream_t stream);
void run_flash_decode_append(const FlashDecodeParams& p, cudaStream_t stream);

extern template void run_flash_decode_<cutlass::bfloat16_t, 64>(const FlashDecodeParams&, cudaStream_t);
extern template void run_flash_decode_<cutlass::bfloat16_t, 128>(const FlashDecodeParams&, cudaStream_t);
extern template void run_flash_decode_<cutlass::half_t, 64>(const FlashDecodeParams&, cudaStream_t);
extern template void run_flash_decode_<cutlass::half_t, 128>(const FlashDecodeParams&, cudaStream_t);

bool flash_decode_supports_head_dim(int d) { return d == 64 || d == 128; }

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
  if (p.seqlen_new > 0) run_flash_decode_append(p, stream);
  if (p.is_bf16 && p.d == 64) return run_flash_decode_<cutlass::bfloat16_t, 64>(p, stream);
  if (p.is_bf16 && p.d == 128) return run_flash_decode_<cutlass::bfloat16_t, 128>(p, stream);
  if (!p.is_bf16 && p.d == 64) return run_flash_decode_<cutlass::half_t, 64>(p, stream);
  if (!p.is_bf16 && p.d == 128) return run_flash_decode_<cutlass::half_t, 128>(p, stream);
  throw std::invalid_argument("flash_decode: no kernel for head dim " + std::to_string(p.d));
}

}  // namespace cute_ops
