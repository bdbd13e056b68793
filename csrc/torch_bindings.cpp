// Every op's schema, in one place. Each op family registers its CUDA implementation next to its
// launcher (csrc/<family>/*_op.cpp), so a build of a subset of families, or a CPU-only build
// (schemas and fake impls only), needs no conditional code here.
#include <torch/library.h>

#include "common/registration.h"

TORCH_LIBRARY(cute_ops, m) {
  // ---- norm (csrc/norm) -------------------------------------------------------------------
  // out = x / sqrt(mean(x^2) + eps) * weight, over the last dim.
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  // residual += x (in place); out = rms_norm(residual, weight, eps).
  m.def("fused_add_rms_norm(Tensor x, Tensor(a!) residual, Tensor weight, float eps) -> Tensor");

  // ---- rope (csrc/rope) -------------------------------------------------------------------
  // Rotate-half RoPE applied in place to q [..., Hq, D] and k [..., Hkv, D] at `positions`;
  // cos_sin_cache [max_position, rot_dim] holds cos in its first rot_dim/2 columns, sin after.
  m.def("rotary_embedding(Tensor(a!) q, Tensor(b!) k, Tensor positions, Tensor cos_sin_cache) -> ()");
}

CUTE_OPS_REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
