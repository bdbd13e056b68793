#pragma once
// Which kind of kernel a call of a family with several (gemm_pair, flash_fwd) may run: the op's
// own choice for the device and the call, or one kind only, for tests and A/B runs. Host code.
#include <stdexcept>
#include <string>

namespace cute_ops {

// kSm80: mma.sync / cp.async code (8.x and newer); kSm90: wgmma / TMA code (9.x only).
enum class KernelArch : int { kAuto = 0, kSm80 = 80, kSm90 = 90 };

inline const char* kernel_arch_name(KernelArch arch) {
  return arch == KernelArch::kSm90 ? "sm90" : arch == KernelArch::kSm80 ? "sm80" : "auto";
}

// The op's `arch` argument; `op` names the op in the message.
inline KernelArch parse_kernel_arch(const std::string& s, const char* op) {
  if (s == "auto") return KernelArch::kAuto;
  if (s == "sm80") return KernelArch::kSm80;
  if (s == "sm90") return KernelArch::kSm90;
  throw std::invalid_argument(std::string(op) + ": arch must be \"auto\", \"sm80\" or \"sm90\", got \"" + s + "\"");
}

}  // namespace cute_ops
