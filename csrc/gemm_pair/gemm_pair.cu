// Picks the instantiation for a call's (dtype, block_m). Includes no kernel code: the
// instantiations are compiled in their own translation units (instantiations/*.cu).
#include <cutlass/numeric_types.h>

#include <stdexcept>
#include <type_traits>
#include <string>

#include "gemm_pair/gemm_pair.h"

namespace cute_ops {

template <typename Element, int kBlockM>
void run_gemm_pair_(const GemmPairParams& p, cudaStream_t stream);

#define CUTE_OPS_GEMM_PAIR_CONFIGS(X) \
  X(16, cutlass::half_t) X(64, cutlass::half_t) X(128, cutlass::half_t) \
  X(16, cutlass::bfloat16_t) X(64, cutlass::bfloat16_t) X(128, cutlass::bfloat16_t)

template <typename Element, int kBlockM>
int gemm_pair_ctas_per_sm_();

#define X(BM, T)                                                                  \
  extern template void run_gemm_pair_<T, BM>(const GemmPairParams&, cudaStream_t); \
  extern template int gemm_pair_ctas_per_sm_<T, BM>();
CUTE_OPS_GEMM_PAIR_CONFIGS(X)
#undef X

bool gemm_pair_supports_block_m(int block_m) { return block_m == 16 || block_m == 64 || block_m == 128; }

int gemm_pair_ctas_per_sm(int block_m, bool is_bf16) {
#define X(BM, T) \
  if (block_m == BM && is_bf16 == std::is_same_v<T, cutlass::bfloat16_t>) return gemm_pair_ctas_per_sm_<T, BM>();
  CUTE_OPS_GEMM_PAIR_CONFIGS(X)
#undef X
  throw std::invalid_argument("gemm_pair: no kernel for block_m " + std::to_string(block_m));
}

void run_gemm_pair(const GemmPairParams& p, int block_m, cudaStream_t stream) {
#define X(BM, T)                                                                        \
  if (block_m == BM && p.is_bf16 == std::is_same_v<T, cutlass::bfloat16_t>) {           \
    run_gemm_pair_<T, BM>(p, stream);                                                   \
    return;                                                                             \
  }
  CUTE_OPS_GEMM_PAIR_CONFIGS(X)
#undef X
  throw std::invalid_argument("gemm_pair: no kernel for block_m " + std::to_string(block_m));
}

}  // namespace cute_ops
