#pragma once
// The launch of one (dtype, head dim): the split-KV attention kernel, a programmatic dependent
// (common/pdl.h) of whatever ran before the op; with more than one split its CTAs also merge the
// splits (split_merge.h), so the op is one launch. Compiled one instantiation per file
// (instantiations/).
#include "common/kernel_attributes.h"
#include "common/pdl.h"
#include "flash_decode/flash_decode_kernel.h"

namespace cute_ops {

namespace decode {

// 4 warps x 16 keys a tile; the ring holds 3 stages of 32 KB at head dim 128 (4 of 16 KB at 64).
// The split heuristic (flash_decode.cu) plans one CTA an SM; two still fit, for grids of more
// than one wave. Deeper rings at one CTA an SM were no faster: twice as deep on an H100 (session
// 3; a deeper prologue delays the first tile), 5 or 6 stages on an H200 (session 28).
template <int kHeadDim, typename Element>
using DecodeTraits = FlashDecodeTraits<kHeadDim, kHeadDim == 128 ? 3 : 4, Element>;
// An fp8 cache (head dim 128): 3 stages of 32 KB (tiles of 128 keys), the 16-bit ring's bytes.
template <typename Element>
using DecodeTraitsFp8 = FlashDecodeTraits<fp8::kHeadDim, 3, Element, cutlass::float_e4m3_t>;

template <typename Traits, bool kNewTokens>
void launch_decode(const FlashDecodeParams& p, cudaStream_t stream) {
  constexpr int kSmem = kNewTokens ? Traits::kSmemBytesNewTokens : Traits::kSmemBytes;
  auto kernel = &flash_decode_kernel<Traits, kNewTokens>;
  if constexpr (kSmem > 48 * 1024) {
    static DynamicSmemOptIn smem_opt_in;  // this instantiation's, set once per device
    smem_opt_in.apply(kernel, kSmem, "flash_decode shared memory");
  }
  const int m_blocks = (flash_decode_rows(p) + Traits::kBlockM - 1) / Traits::kBlockM;
  launch_dependent(p.pdl, kernel, dim3(p.h_k * m_blocks, p.num_splits, p.b), dim3(Traits::kNThreads), kSmem, stream,
                   p);
}

}  // namespace decode

template <typename Traits>
void launch_decode_calls(const FlashDecodeParams& p, cudaStream_t stream) {
  if (p.seqlen_new > 0) {
    decode::launch_decode<Traits, true>(p, stream);
  } else {
    decode::launch_decode<Traits, false>(p, stream);
  }
}

// The instantiation of one (dtype, head dim), with its fp8-cache kernels at head dim 128 (the op
// checked that an fp8 cache comes with that head dim).
template <typename Element, int kHeadDim>
void run_flash_decode_(const FlashDecodeParams& p, cudaStream_t stream) {
  if constexpr (kHeadDim == decode::fp8::kHeadDim) {
    if (p.kv_fp8) return launch_decode_calls<decode::DecodeTraitsFp8<Element>>(p, stream);
  }
  launch_decode_calls<decode::DecodeTraits<kHeadDim, Element>>(p, stream);
}

}  // namespace cute_ops
