// Picks the instantiation for a call's (dtype, head dim, causal). Includes no kernel code: the
// instantiations are compiled in their own translation units (instantiations/*.cu).
#include <cutlass/numeric_types.h>

#include <stdexcept>
#include <string>

#include "flash_fwd/flash_fwd.h"

namespace cute_ops {

template <typename Element, int kHeadDim, bool kIsCausal>
void run_flash_fwd_(const FlashFwdParams& p, cudaStream_t stream);

#define X(IS_BF16, D, CAUSAL, T) \
  extern template void run_flash_fwd_<T, D, CAUSAL>(const FlashFwdParams&, cudaStream_t);
#include "flash_fwd/dispatch.inc"
#undef X

bool flash_fwd_supports_head_dim(int d) { return d == 64 || d == 96 || d == 128 || d == 256; }

void run_flash_fwd(const FlashFwdParams& p, cudaStream_t stream) {
#define X(IS_BF16, D, CAUSAL, T)                                        \
  if (p.is_bf16 == IS_BF16 && p.d == D && p.is_causal == CAUSAL) {      \
    run_flash_fwd_<T, D, CAUSAL>(p, stream);                            \
    return;                                                             \
  }
#include "flash_fwd/dispatch.inc"
#undef X
  throw std::invalid_argument("flash_fwd: no kernel for head dim " + std::to_string(p.d));
}

}  // namespace cute_ops
