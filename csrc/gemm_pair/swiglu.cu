// The kernel of swiglu (swiglu.h). Each thread makes one 16-byte vector of outputs: inside
// pack_gate_up's full blocks a vector's gate columns are contiguous and its up columns sit
// kGateUpBlock further on, so the thread reads one vector of each; the columns of the last,
// partial block (and every column, when rows of the output are not whole vectors) go one by one.
// The activation is taken in float32 and rounded once, where PyTorch's F.silu(gate) * up rounds
// twice.
#include <algorithm>

#include "common/activation.cuh"
#include "common/cuda_check.h"
#include "common/device_info.h"
#include "common/dispatch.cuh"
#include "common/gate_up_layout.h"
#include "common/vec.cuh"
#include "gemm_pair/swiglu.h"

namespace cute_ops {

namespace {

constexpr int kThreads = 256;
constexpr int kCtasPerSm = 8;  // a grid-stride loop past this: enough to fill the GPU's DRAM queues

template <typename T>
__global__ void __launch_bounds__(kThreads) swiglu_kernel(const SwigluParams p) {
  constexpr int kVec = kElemsPer16B<T>;
  using V = Vec<T, kVec>;
  const int64_t groups = (p.inter + kVec - 1) / kVec;  // output vectors a row
  const int64_t full = p.inter / kGateUpBlock * kGateUpBlock;
  const bool whole_vectors = p.inter % kVec == 0;      // the output's rows start 16-byte aligned
  const int64_t total = p.rows * groups;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = i / groups;
    const int64_t j0 = (i - row * groups) * kVec;
    const T* in = static_cast<const T*>(p.gate_up) + row * p.in_row_stride;
    T* out = static_cast<T*>(p.out) + row * p.inter;
    if (whole_vectors && j0 + kVec <= full) {
      const int64_t g = gate_up_row(j0, p.inter, false);
      const V gate = V::load(in + g), up = V::load(in + g + kGateUpBlock);
      V y;
#pragma unroll
      for (int e = 0; e < kVec; ++e) y.v[e] = from_float<T>(silu(to_float(gate.v[e])) * to_float(up.v[e]));
      y.store(out + j0);
    } else {
      for (int64_t j = j0; j < j0 + kVec && j < p.inter; ++j) {
        const float gate = to_float(in[gate_up_row(j, p.inter, false)]);
        out[j] = from_float<T>(silu(gate) * to_float(in[gate_up_row(j, p.inter, true)]));
      }
    }
  }
}

}  // namespace

void run_swiglu(const SwigluParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.inter == 0) return;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  CUTE_OPS_DTYPE_SWITCH(p.dtype, T, [&] {
    const int64_t vectors = p.rows * ((p.inter + kElemsPer16B<T> - 1) / kElemsPer16B<T>);
    const int64_t ctas = std::min<int64_t>((vectors + kThreads - 1) / kThreads,
                                           static_cast<int64_t>(device_info(device).sms) * kCtasPerSm);
    swiglu_kernel<T><<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(p);
    CUTE_OPS_CHECK_LAUNCH("swiglu launch");
  });
}

}  // namespace cute_ops
