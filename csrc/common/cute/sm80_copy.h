#pragma once
// Global -> shared copies of the SM80 path (cp.async): a raw 16-byte copy with zero fill, a CuTe
// copy atom for cp.async.cg with an L2 prefetch hint, and the predicated tile copy that zero-fills
// what lies outside a tensor.
#include <cute/tensor.hpp>

#include <cstdint>

namespace cute_ops::sm80 {

using namespace cute;

// 16 bytes global -> shared, or 16 zero bytes when !valid (the source is not read then).
// kL2Prefetch 256: an L2 prefetch of the 256 bytes around the chunk, for streams read 64 bytes of a
// row at a time by each access (gemv's weight): one DRAM burst brings the row's next 192 bytes too.
template <int kL2Prefetch = 0>
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  static_assert(kL2Prefetch == 0 || kL2Prefetch == 256);
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  if constexpr (kL2Prefetch == 256) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
  }
}

// An L2 cache policy for cp_async_16_hinted: lines it brings are the first to go when L2 needs room.
// For a stream read once (gemv's weights), so that it does not push out what is read again soon.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// cp_async_16 with an L2 cache policy (createpolicy) on the lines it brings.
template <int kL2Prefetch = 0>
__device__ __forceinline__ void cp_async_16_hinted(void* smem, const void* gmem, bool valid, uint64_t policy) {
  static_assert(kL2Prefetch == 0 || kL2Prefetch == 256);
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  if constexpr (kL2Prefetch == 256) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;\n" ::"r"(s), "l"(gmem),
                 "r"(src_bytes), "l"(policy));
  } else {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(s), "l"(gmem),
                 "r"(src_bytes), "l"(policy));
  }
}

// cp.async.cg (L2 only, never L1: data other CTAs write during the launch must not be served
// stale from L1) with an L2 prefetch of kPrefetch (128 or 256) bytes around each 16-byte chunk.
// Reading a row 128 bytes at a time, a 256-byte prefetch makes every other tile an L2 hit and
// doubles the run of a DRAM page read at once.
template <int kPrefetch>
struct CpAsyncCg {
  static_assert(kPrefetch == 128 || kPrefetch == 256);
  using SRegisters = cute::uint128_t[1];
  using DRegisters = cute::uint128_t[1];
  CUTE_HOST_DEVICE static void copy(cute::uint128_t const& gmem_src, cute::uint128_t& smem_dst) {
#if defined(CUTE_ARCH_CP_ASYNC_SM80_ENABLED)
    const uint32_t smem = cute::cast_smem_ptr_to_uint(&smem_dst);
    if constexpr (kPrefetch == 256) {
      asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(smem), "l"(&gmem_src));
    } else {
      asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(smem), "l"(&gmem_src));
    }
#endif
  }
};

// Copies the chunks of a (CPY, CPY_M, CPY_K) partition whose coordinates (from the identity
// partition `coords`) lie inside the tensor, zero-filling the others, so that a partial tile holds
// zeros rather than stale shared memory (0 * NaN would poison an accumulator where the other
// operand is 0). Rows are checked against `rows`; with kCheckCols also columns against `cols`
// (chunk by chunk), otherwise a row's chunks are all in or all out.
template <bool kCheckCols, typename TiledCopy, typename TensorS, typename TensorD, typename TensorC>
__device__ __forceinline__ void copy_predicated(const TiledCopy& tiled_copy, const TensorS& src, TensorD&& dst,
                                                const TensorC& coords, int rows, int cols = 0) {
#pragma unroll
  for (int m = 0; m < size<1>(src); ++m) {
    if constexpr (kCheckCols) {
#pragma unroll
      for (int k = 0; k < size<2>(src); ++k) {
        if (get<0>(coords(0, m, k)) < rows && get<1>(coords(0, m, k)) < cols) {
          copy(tiled_copy, src(_, m, k), dst(_, m, k));
        } else {
          clear(dst(_, m, k));
        }
      }
    } else {
      if (get<0>(coords(0, m, 0)) < rows) {
        copy(tiled_copy, src(_, m, _), dst(_, m, _));
      } else {
        clear(dst(_, m, _));
      }
    }
  }
}

}  // namespace cute_ops::sm80

namespace cute {
template <int kPrefetch>
struct Copy_Traits<cute_ops::sm80::CpAsyncCg<kPrefetch>> {
  using ThrID = Layout<_1>;
  using SrcLayout = Layout<Shape<_1, _128>>;  // one 128-bit chunk
  using DstLayout = Layout<Shape<_1, _128>>;
  using RefLayout = SrcLayout;
};
}  // namespace cute
