#pragma once
// Which kind of kernel a call of a family with several (gemm_pair, flash_fwd) may run: the op's
// own choice for the device and the call, or one kind only, for tests and A/B runs. Host code.
#include <stdexcept>
#include <string>

namespace cute_ops {

// kSm80: mma.sync / cp.async code (8.x and newer); kSm90: wgmma / TMA code (9.x only).
enum class KernelArch : int { kAuto = 0, kSm80 = 80, kSm90 = 90 };
// The op argument's values (the ops' checks: check_choice).
inline constexpr const char* kKernelArchNames[] = {"auto", "sm80", "sm90"};

inline const char* kernel_arch_name(KernelArch arch) {
  return arch == KernelArch::kSm90 ? "sm90" : arch == KernelArch::kSm80 ? "sm80" : "auto";
}

// The op's `arch` argument (the op's checks have refused any other value); `op` names the op.
inline KernelArch parse_kernel_arch(const std::string& s, const char* op) {
  if (s == "auto") return KernelArch::kAuto;
  if (s == "sm80") return KernelArch::kSm80;
  if (s == "sm90") return KernelArch::kSm90;
  throw std::invalid_argument(std::string(op) + ": arch must be one of ('auto', 'sm80', 'sm90'), got '" + s + "'");
}

// Calls run(kernel, kind) with the instantiation that a call asking for `arch` runs on a device
// of compute capability `major`.x, where dispatch(major, visit) is a family's generated table
// (<family>_dispatch.h, architectures newest first): the table sees the device as 8.x when sm80
// is asked for, so it passes the sm90 kernels by, and an asked-for sm90 takes no sm80 kernel in
// its place. Returns whether one ran; throws where sm90 is asked for off 9.x.
template <typename Dispatch, typename Run>
bool visit_kernel_of_arch(const char* op, KernelArch arch, int major, Dispatch&& dispatch, Run&& run) {
  if (arch == KernelArch::kSm90 && major != 9) {
    throw std::invalid_argument(std::string(op) + ": arch \"sm90\" runs on devices of compute capability 9.x only, "
                                "this one is " + std::to_string(major) + ".x");
  }
  bool ran = false;
  dispatch(arch == KernelArch::kSm80 ? 8 : major, [&](auto kernel) {
    const KernelArch kind = std::string(decltype(kernel)::kArch) == "sm90" ? KernelArch::kSm90 : KernelArch::kSm80;
    if (arch != KernelArch::kAuto && kind != arch) return;
    ran = true;
    run(kernel, kind);
  });
  return ran;
}

}  // namespace cute_ops
