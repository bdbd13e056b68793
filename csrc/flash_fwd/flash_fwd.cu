// Picks the instantiation for a call's (dtype, head dim, causal) on the current device. Includes no
// kernel code: the instantiations are compiled in their own translation units (instantiations/*.cu),
// and the generated flash_fwd_dispatch.h declares them and holds the table
// (csrc/generate_instantiations.py writes all three).
//
// The kinds (`arch`):
//   "sm80": the FlashAttention-2 kernel (mma.sync, cp.async), every head dim, padded and varlen.
//   "sm90": the warp-specialised wgmma/TMA kernel (flash_fwd_kernel_sm90.h), on 9.x devices, for
//           the head dims it has (supported_configs()["flash_fwd"]["by_arch"]["sm90"]), padded and
//           varlen, with strides that TMA encodes (tma_layout.h).
//   "auto": sm90 wherever it applies (a 9.x device, one of its head dims, strides TMA takes), as it
//           outruns the sm80 kernel at every benchmarked shape on an H100 (docs/perf-notes.md,
//           issue 16); sm80 everywhere else.
#include <stdexcept>
#include <string>

#include "flash_fwd/flash_fwd.h"
#include "flash_fwd/flash_fwd_dispatch.h"
#include "flash_fwd/flash_fwd_supported.h"
#include "flash_fwd/tma_layout.h"

namespace cute_ops {

bool flash_fwd_supports_head_dim(int d) { return supported::flash_fwd::contains(supported::flash_fwd::kHeadDims, d); }

void run_flash_fwd(const FlashFwdParams& p, KernelArch arch, cudaStream_t stream) {
  const DType dtype = p.is_bf16 ? DType::kBFloat16 : DType::kFloat16;
  const char* op = p.cu_seqlens_q ? "flash_fwd_varlen" : "flash_fwd";
  const int major = flash_fwd_dispatch::current_major();
  const bool tma_ok = flash::tma_accepts(p);
  // "auto" lets the table pick the newest kind built for the device, unless TMA cannot take the
  // strides (a broadcast view), which only the sm80 kernel reads.
  const KernelArch kind = arch == KernelArch::kAuto && !tma_ok ? KernelArch::kSm80 : arch;
  if (kind == KernelArch::kSm90 && !tma_ok) {
    throw std::invalid_argument(std::string(op) + ": arch \"sm90\" loads q, k, v and out by TMA, which takes no "
                                "broadcast (stride 0) dimension; use \"auto\" or \"sm80\"");
  }
  const bool ran = visit_kernel_of_arch(
      op, kind, major,
      [&](int as_major, auto&& visit) { flash_fwd_dispatch::dispatch(as_major, dtype, p.d, p.is_causal, visit); },
      [&](auto kernel, KernelArch) { decltype(kernel)::run(p, stream); });
  if (ran) return;
  // The op checked the head dim against the supported set (the union over kinds), so this is a
  // head dim that the asked kind lacks, a build that left the instantiation out (CUTE_OPS_OMIT_*),
  // or a device older than every architecture built.
  throw std::invalid_argument(std::string(op) + ": this build has no " + kernel_arch_name(kind) + " kernel for " +
                              dtype_name(dtype) + ", head dim " + std::to_string(p.d) +
                              (p.is_causal ? ", causal" : "") + " on a device of compute capability " +
                              std::to_string(major) + ".x");
}

}  // namespace cute_ops
