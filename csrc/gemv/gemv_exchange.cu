// gemv's push and pull (tensor parallelism, gemv_exchange.h), in a translation unit of their own:
// see gemv_launch.cuh.
#include "common/dispatch.cuh"
#include "gemv/gemv_launch.cuh"

namespace cute_ops::gemv {

void run_gemv_exchange(const GemvParams& p, const GemvExchangeParams& e, cudaStream_t stream) {
  const bool norm = p.norm_weight != nullptr, residual = p.residual != nullptr;
  const bool swiglu = p.activation == GemvActivation::kSwiGLU;
  auto by_flags = [&](auto tag) {
    using T = decltype(tag);
    // The exchange's two sides exist in the forms a tensor-parallel layer uses: a push with or
    // without the residual (o and down), a pull with the norm (qkv and the output projection;
    // gate/up with SwiGLU). run_gemv's callers (gemv_op.cpp) check for these.
    if (e.mode == GemvExchangeMode::kPush) {
      if (norm || swiglu) throw std::invalid_argument("gemv: a push takes no norm and no activation");
      CUTE_OPS_BOOL_SWITCH(residual, kResidual, [&] {
        launch<T, false, kResidual, false, GemvExchangeMode::kPush>(p, e, stream);
      });
      return;
    }
    if (e.mode == GemvExchangeMode::kPull) {
      if (!norm || residual) throw std::invalid_argument("gemv: a pull takes a norm and no residual");
      CUTE_OPS_BOOL_SWITCH(swiglu, kSwiGLU, [&] { launch<T, true, false, kSwiGLU, GemvExchangeMode::kPull>(p, e, stream); });
      return;
    }
    throw std::invalid_argument("gemv: unknown exchange mode");
  };
  if (p.dtype == DType::kBFloat16) by_flags(__nv_bfloat16{});
  else if (p.dtype == DType::kFloat16) by_flags(__half{});
  else throw std::invalid_argument("gemv: float16 or bfloat16 only");
}

}  // namespace cute_ops::gemv
