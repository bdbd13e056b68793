#pragma once
// Tile choice and launches of one (dtype, head dim): the split-KV attention kernel, then, with
// more than one split, the combine kernel. Compiled one instantiation per file (instantiations/).
#include "common/cuda_check.h"
#include "flash_decode/flash_decode_combine.h"
#include "flash_decode/flash_decode_kernel.h"

namespace cute_ops {

namespace decode {

// 4 warps x 16 keys a tile; the ring is as deep as fits two CTAs an SM with >= 64 KB in flight
// each (head dim 128: 3 stages of 32 KB; 64: 4 of 16 KB).
template <int kHeadDim, typename Element>
using DecodeTraits = FlashDecodeTraits<kHeadDim, kHeadDim == 128 ? 3 : 4, Element>;

template <typename Traits>
void launch_decode(const FlashDecodeParams& p, cudaStream_t stream) {
  constexpr int kSmem = Traits::kSmemBytes;
  auto kernel = &flash_decode_kernel<Traits>;
  if constexpr (kSmem > 48 * 1024) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
               "flash_decode shared memory");
  }
  const int m_blocks = (flash_decode_rows(p) + Traits::kBlockM - 1) / Traits::kBlockM;
  const dim3 grid(p.h_k * m_blocks, p.num_splits, p.b);
  kernel<<<grid, Traits::kNThreads, kSmem, stream>>>(p);
  CUTE_OPS_CHECK_LAUNCH("flash_decode launch");
}

}  // namespace decode

template <typename Element, int kHeadDim>
void run_flash_decode_(const FlashDecodeParams& p, cudaStream_t stream) {
  decode::launch_decode<decode::DecodeTraits<kHeadDim, Element>>(p, stream);
  if (p.num_splits > 1) {
    const long long rows = static_cast<long long>(p.b) * p.h * p.sq;
    decode::flash_decode_combine_kernel<kHeadDim, Element><<<static_cast<unsigned>((rows + 3) / 4), 128, 0, stream>>>(p);
    CUTE_OPS_CHECK_LAUNCH("flash_decode combine launch");
  }
}

}  // namespace cute_ops
