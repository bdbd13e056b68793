// One instantiation a file, so that builds run in parallel.
#include "gemm_pair/gemm_pair_launch.h"

namespace cute_ops {
template void run_gemm_pair_<cutlass::bfloat16_t, 128>(const GemmPairParams& params, cudaStream_t stream);
template int gemm_pair_ctas_per_sm_<cutlass::bfloat16_t, 128>();
}  // namespace cute_ops
