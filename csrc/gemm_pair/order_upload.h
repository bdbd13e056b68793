#pragma once
// The device copy of gemm_pair's order table for a geometry and policy (order_upload.cpp: built
// and uploaded once per device, geometry and policy, without blocking the caller's stream or
// breaking a CUDA graph capture). Torch-free declaration; the definition uses c10's capture-mode
// guard.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gemm_pair/tile_order.h"

namespace cute_ops::gemm_pair {

// The table of `policy` for geometry g, on `device` (the current device), with `stream` ordered
// after its upload. The pointer stays valid for the life of the process.
const int4* order_table(const Geometry& g, Policy policy, bool tile_sync, int64_t lag, int device,
                        cudaStream_t stream);

}  // namespace cute_ops::gemm_pair
