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

using gemm_pair::Arch;

DType dtype_of(bool is_bf16) { return is_bf16 ? DType::kBFloat16 : DType::kFloat16; }

// Reached for a block_m outside the supported set (the op accepts 0 or one of them, and picks
// only those), a build that left the instantiation out (CUTE_OPS_OMIT_*), or a device older than
// every architecture built.
[[noreturn]] void no_kernel(int block_m, bool is_bf16, Arch arch, int major) {
  throw std::invalid_argument(std::string("gemm_pair: this build has no ") +
                              (arch == Arch::kAuto ? "" : std::string(kernel_arch_name(arch)) + " ") + "kernel for " +
                              dtype_name(dtype_of(is_bf16)) + ", block_m " + std::to_string(block_m) +
                              " on a device of compute capability " + std::to_string(major) + ".x");
}

// Calls visit(kernel, kind) with the instantiation that a call asking for `arch` runs
// (common/kernel_arch.h's rule).
template <typename Visit>
void visit_kernel(int block_m, bool is_bf16, Arch arch, Visit&& visit) {
  const int major = gemm_pair_dispatch::current_major();
  const bool ran = visit_kernel_of_arch(
      "gemm_pair", arch, major,
      [&](int as_major, auto&& v) { gemm_pair_dispatch::dispatch(as_major, dtype_of(is_bf16), block_m, v); }, visit);
  if (!ran) no_kernel(block_m, is_bf16, arch, major);
}

}  // namespace

bool gemm_pair_supports_block_m(int block_m) {
  return supported::gemm_pair::contains(supported::gemm_pair::kBlockMs, block_m);
}

Arch gemm_pair_resolve_arch(int block_m, bool is_bf16, Arch arch) {
  Arch resolved = Arch::kAuto;
  visit_kernel(block_m, is_bf16, arch, [&](auto, Arch kind) { resolved = kind; });
  return resolved;
}

int gemm_pair_ctas_per_sm(int block_m, bool is_bf16, Arch arch) {
  int ctas = 0;
  visit_kernel(block_m, is_bf16, arch, [&](auto kernel, Arch) { ctas = decltype(kernel)::ctas_per_sm(); });
  return ctas;
}

void run_gemm_pair(const GemmPairParams& p, int block_m, Arch arch, cudaStream_t stream) {
  visit_kernel(block_m, p.is_bf16, arch, [&](auto kernel, Arch) { decltype(kernel)::run(p, stream); });
}

}  // namespace cute_ops
