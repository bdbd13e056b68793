#pragma once
// SM80 tensor-core MMA (mma.sync m16n8k16) as every CuTe family here uses it: the atom for a
// 16-bit element type with float32 accumulation, views of its accumulator fragment, and the
// conversion of a float32 fragment to 16 bits in registers.
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include <type_traits>

namespace cute_ops::sm80 {

using namespace cute;

// m16n8k16 with float32 accumulation, for cutlass::half_t or cutlass::bfloat16_t operands.
template <typename Element>
using MmaAtom = std::conditional_t<std::is_same_v<Element, cutlass::half_t>,
                                   MMA_Atom<SM80_16x8x16_F32F16F16F32_TN>,
                                   MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>>;

// (MMA=4, MMA_M, MMA_N) accumulator layout -> ((2, MMA_M), (2, MMA_N)): rows x columns of this
// thread's elements (each MMA gives a thread two rows of two columns). A row is shared by the 4
// threads of a quad, which is what row reductions (online softmax) rely on.
template <typename Layout>
__device__ __forceinline__ auto acc_rowcol(Layout acc) {
  static_assert(decltype(size<0>(acc))::value == 4 && decltype(rank(acc))::value == 3);
  auto l = logical_divide(acc, Shape<_2>{});  // ((2, 2), MMA_M, MMA_N)
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<2>(l)));
}

// The same accumulator as the A operand of the next m16n8k16 MMA: two adjacent n8 accumulator
// tiles form one k16 A fragment, so a product (attention's P) feeds the next MMA without a trip
// through shared memory.
template <typename Layout>
__device__ __forceinline__ auto acc_as_a_operand(Layout acc) {
  static_assert(decltype(size<0>(acc))::value == 4 && decltype(rank(acc))::value == 3);
  auto l = logical_divide(acc, Shape<Underscore, Underscore, _2>{});  // (4, MMA_M, (2, MMA_N / 2))
  return make_layout(make_layout(get<0>(l), get<2, 0>(l)), get<1>(l), get<2, 1>(l));
}

// A register tensor of To with t's layout, converted element by element (round to nearest).
template <typename To, typename TensorF>
__device__ __forceinline__ auto convert_to(const TensorF& t) {
  Tensor out = make_tensor<To>(t.layout());
#pragma unroll
  for (int i = 0; i < size(t); ++i) out(i) = static_cast<To>(t(i));
  return out;
}

}  // namespace cute_ops::sm80
