// Picks the instantiation for a call's (dtype, block_m) on the current device. Includes no kernel
// code: the instantiations are compiled in their own translation units (instantiations/*.cu), and
// the generated gemm_pair_dispatch.h declares them and holds the table
// (csrc/generate_instantiations.py writes all three).
#include <stdexcept>
#include <string>

#include "gemm_pair/gemm_pair.h"
#include "gemm_pair/gemm_pair_dispatch.h"
#include "gemm_pair/gemm_pair_supported.h"

namespace cute_ops {

namespace {

DType dtype_of(bool is_bf16) { return is_bf16 ? DType::kBFloat16 : DType::kFloat16; }

// Reached for a block_m outside the supported set (the op accepts 0 or one of them, and picks
// only those), a build that left the instantiation out (CUTE_OPS_OMIT_*), or a device older than
// every architecture built.
[[noreturn]] void no_kernel(int block_m, bool is_bf16, int major) {
  throw std::invalid_argument(std::string("gemm_pair: this build has no kernel for ") + dtype_name(dtype_of(is_bf16)) +
                              ", block_m " + std::to_string(block_m) + " on a device of compute capability " +
                              std::to_string(major) + ".x");
}

}  // namespace

bool gemm_pair_supports_block_m(int block_m) {
  return supported::gemm_pair::contains(supported::gemm_pair::kBlockMs, block_m);
}

int gemm_pair_ctas_per_sm(int block_m, bool is_bf16) {
  const int major = gemm_pair_dispatch::current_major();
  int ctas = 0;
  if (!gemm_pair_dispatch::dispatch(major, dtype_of(is_bf16), block_m,
                                    [&](auto kernel) { ctas = decltype(kernel)::ctas_per_sm(); })) {
    no_kernel(block_m, is_bf16, major);
  }
  return ctas;
}

void run_gemm_pair(const GemmPairParams& p, int block_m, cudaStream_t stream) {
  const int major = gemm_pair_dispatch::current_major();
  if (!gemm_pair_dispatch::dispatch(major, dtype_of(p.is_bf16), block_m,
                                    [&](auto kernel) { decltype(kernel)::run(p, stream); })) {
    no_kernel(block_m, p.is_bf16, major);
  }
}

}  // namespace cute_ops
