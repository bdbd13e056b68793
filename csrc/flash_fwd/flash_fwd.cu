// Picks the instantiation for a call's (dtype, head dim, causal) on the current device. Includes no
// kernel code: the instantiations are compiled in their own translation units (instantiations/*.cu),
// and the generated flash_fwd_dispatch.h declares them and holds the table
// (csrc/generate_instantiations.py writes all three).
#include <stdexcept>
#include <string>

#include "flash_fwd/flash_fwd.h"
#include "flash_fwd/flash_fwd_dispatch.h"
#include "flash_fwd/flash_fwd_supported.h"

namespace cute_ops {

bool flash_fwd_supports_head_dim(int d) { return supported::flash_fwd::contains(supported::flash_fwd::kHeadDims, d); }

void run_flash_fwd(const FlashFwdParams& p, cudaStream_t stream) {
  const DType dtype = p.is_bf16 ? DType::kBFloat16 : DType::kFloat16;
  const int major = flash_fwd_dispatch::current_major();
  if (flash_fwd_dispatch::dispatch(major, dtype, p.d, p.is_causal,
                                   [&](auto kernel) { decltype(kernel)::run(p, stream); })) {
    return;
  }
  // The op checked the head dim against the supported set, so this is a build that left the
  // instantiation out (CUTE_OPS_OMIT_*), or a device older than every architecture built.
  throw std::invalid_argument(std::string("flash_fwd: this build has no kernel for ") + dtype_name(dtype) +
                              ", head dim " + std::to_string(p.d) + (p.is_causal ? ", causal" : "") +
                              " on a device of compute capability " + std::to_string(major) + ".x");
}

}  // namespace cute_ops
