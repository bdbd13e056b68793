// Appends this step's k_new / v_new to the cache at cache_seqlens[b] + i (rotating k_new, and q
// into a scratch copy, by rotate-half RoPE at that position when cos/sin are given), before the
// attention kernel reads them. A small separate launch: the new tokens are a few KB, and keeping
// them out of the attention kernel keeps its loads uniform.
#include <cutlass/numeric_types.h>

#include "common/cuda_check.h"
#include "flash_decode/cache_access.h"
#include "flash_decode/flash_decode.h"

namespace cute_ops {

namespace decode {

template <typename Element, typename CosT>
__global__ void __launch_bounds__(256) flash_decode_append_kernel(const __grid_constant__ FlashDecodeParams p) {
  const int i = blockIdx.x, bidb = blockIdx.y;
  // A bad sequence is skipped whole: no cache row of it is written, and the attention kernel,
  // which checks it the same way, gives it NaN outputs whatever its rotated q holds.
  const SequenceExtent seq = check_sequence(p, bidb, /*report=*/threadIdx.x == 0 && i == 0);
  if (!seq.ok) return;
  const int pos = seq.cached + i;
  const bool rotate = p.rotary_cos != nullptr;
  // A block table entry that is no page: this token's cache rows are not written (the attention
  // kernel finds the same entry and poisons the sequence); its rotated q still is.
  int page, row;
  const bool write_cache = locate_key(p, bidb, pos, page, row, /*report=*/threadIdx.x == 0);
  const int half = p.rotary_dim / 2;
  const CosT* cos = static_cast<const CosT*>(p.rotary_cos) + pos * p.rotary_stride;
  const CosT* sin = static_cast<const CosT*>(p.rotary_sin) + pos * p.rotary_stride;

  // Element j of x rotated: pairs (j, j + half) for j < half; dims past rotary_dim unchanged.
  auto rotated = [&](const Element* x, int j) -> float {
    const float v = static_cast<float>(x[j]);
    if (!rotate || j >= p.rotary_dim) return v;
    const int f = j < half ? j : j - half;
    const float c = static_cast<float>(cos[f]), s = static_cast<float>(sin[f]);
    return j < half ? v * c - static_cast<float>(x[j + half]) * s : v * c + static_cast<float>(x[j - half]) * s;
  };

  const int q_heads = rotate ? p.h : 0;  // q is copied only to rotate it
  const int units = (q_heads + (write_cache ? 2 * p.h_k : 0)) * p.d;
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    const int head_slot = u / p.d, j = u % p.d;
    if (head_slot < q_heads) {
      const Element* x = static_cast<const Element*>(p.q_in) + bidb * p.qin_batch_stride + i * p.qin_row_stride +
                         head_slot * p.qin_head_stride;
      Element* y = static_cast<Element*>(const_cast<void*>(p.q)) + bidb * p.q_batch_stride + i * p.q_row_stride +
                   head_slot * p.q_head_stride;
      y[j] = static_cast<Element>(rotated(x, j));
    } else if (head_slot < q_heads + p.h_k) {
      const int hk = head_slot - q_heads;
      const Element* x = static_cast<const Element*>(p.k_new) + bidb * p.knew_batch_stride + i * p.knew_row_stride +
                         hk * p.knew_head_stride;
      Element* y = static_cast<Element*>(p.k_cache) + page * p.k_page_stride + row * p.k_row_stride +
                   hk * p.k_head_stride;
      y[j] = static_cast<Element>(rotated(x, j));
    } else {
      const int hk = head_slot - q_heads - p.h_k;
      const Element* x = static_cast<const Element*>(p.v_new) + bidb * p.vnew_batch_stride + i * p.vnew_row_stride +
                         hk * p.vnew_head_stride;
      Element* y = static_cast<Element*>(p.v_cache) + page * p.v_page_stride + row * p.v_row_stride +
                   hk * p.v_head_stride;
      y[j] = x[j];
    }
  }
}

template <typename Element>
void launch_append(const FlashDecodeParams& p, cudaStream_t stream) {
  const dim3 grid(p.sq, p.b);
  if (p.rotary_cos == nullptr || p.rotary_fp32) {
    flash_decode_append_kernel<Element, float><<<grid, 256, 0, stream>>>(p);
  } else {
    flash_decode_append_kernel<Element, Element><<<grid, 256, 0, stream>>>(p);
  }
  CUTE_OPS_CHECK_LAUNCH("flash_decode append launch");
}

}  // namespace decode

void run_flash_decode_append(const FlashDecodeParams& p, cudaStream_t stream) {
  if (p.is_bf16) {
    decode::launch_append<cutlass::bfloat16_t>(p, stream);
  } else {
    decode::launch_append<cutlass::half_t>(p, stream);
  }
}

}  // namespace cute_ops
