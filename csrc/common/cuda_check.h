#pragma once
// Launch errors become C++ exceptions, which PyTorch turns into Python RuntimeErrors.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace cute_ops {

inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("cute_ops: ") + what + ": " + cudaGetErrorString(err));
  }
}

}  // namespace cute_ops

// After a launch: reports configuration errors at once without synchronising the device.
#define CUTE_OPS_CHECK_LAUNCH(what) ::cute_ops::check_cuda(cudaGetLastError(), what)
