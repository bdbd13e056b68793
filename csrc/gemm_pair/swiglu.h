#pragma once
// silu(gate) * up over a gate/up product whose columns are in pack_gate_up's order
// (common/gate_up_layout.h): the activation of a LLaMA MLP whose gate/up matmul ran elsewhere
// (cuBLAS, at batches above fused_mlp's). Torch-free interface between the op glue
// (swiglu_op.cpp) and the kernel (swiglu.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/dtype.h"

namespace cute_ops {

struct SwigluParams {
  void* out;               // [rows, inter], contiguous
  const void* gate_up;     // [rows, 2 * inter], last dim contiguous, rows 16-byte aligned
  int64_t rows;
  int64_t inter;
  int64_t in_row_stride;   // elements; a multiple of the 16-byte vector width
  DType dtype;             // of out and gate_up alike
};

void run_swiglu(const SwigluParams& params, cudaStream_t stream);

}  // namespace cute_ops
