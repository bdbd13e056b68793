// gemv's dispatch to its plain kernels (gemv_launch.cuh launches them); a push or a pull goes to
// gemv_exchange.cu.
#include "common/dispatch.cuh"
#include "gemv/gemv_launch.cuh"

namespace cute_ops {

void run_gemv(const GemvParams& p, cudaStream_t stream, const GemvExchangeParams& e) {
  if (p.m == 0 || p.out_cols == 0) return;
  if (e.mode != GemvExchangeMode::kNone) return gemv::run_gemv_exchange(p, e, stream);
  const bool norm = p.norm_weight != nullptr, residual = p.residual != nullptr;
  const bool swiglu = p.activation == GemvActivation::kSwiGLU;
  auto by_flags = [&](auto tag) {
    using T = decltype(tag);
    CUTE_OPS_BOOL_SWITCH(norm, kNorm, [&] {
      CUTE_OPS_BOOL_SWITCH(residual, kResidual, [&] {
        CUTE_OPS_BOOL_SWITCH(swiglu, kSwiGLU, [&] { gemv::launch<T, kNorm, kResidual, kSwiGLU>(p, e, stream); });
      });
    });
  };
  if (p.dtype == DType::kBFloat16) by_flags(__nv_bfloat16{});
  else if (p.dtype == DType::kFloat16) by_flags(__half{});
  else throw std::invalid_argument("gemv: float16 or bfloat16 only");
}

}  // namespace cute_ops
