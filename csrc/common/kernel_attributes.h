#pragma once
// A kernel that uses more than 48 KB of dynamic shared memory must opt in, per device, with
// cudaFuncSetAttribute(MaxDynamicSharedMemorySize). That is a driver call, not free on every
// launch, and the attribute belongs to (kernel, device): a launcher keeps one DynamicSmemOptIn per
// kernel (a function-local static in the launcher template, so one per instantiation) and it sets
// the attribute the first time the kernel launches on each device.
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "common/per_device.h"

namespace cute_ops {

class DynamicSmemOptIn {
 public:
  // Lets `kernel` launch with `bytes` of dynamic shared memory on the current device. `bytes` must
  // be the same on every call for a device (a launcher's constant, or a device property).
  template <typename Kernel>
  void apply(Kernel* kernel, int bytes, const char* what) {
    int device = -1;
    check_cuda(cudaGetDevice(&device), what);
    set_on_.get(device, [&] {
      check_cuda(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                 what);
      return 1;
    });
  }

 private:
  PerDeviceInt set_on_;  // 1 once the attribute is set on that device
};

}  // namespace cute_ops
