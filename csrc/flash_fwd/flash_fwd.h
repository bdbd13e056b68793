#pragma once
// FlashAttention-2 forward: the torch-free interface between the op glue (flash_fwd_op.cpp) and
// the kernel translation units (flash_fwd.cu dispatches to one instantiation per file).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/device_errors.h"
#include "common/kernel_arch.h"

namespace cute_ops {

struct FlashFwdParams {
  using index_t = int64_t;

  const void* q;  // [b, seqlen_q, h, d] (or [total_q, h, d] when varlen), strides below, in elements
  const void* k;  // [b, seqlen_k, h_k, d]
  const void* v;  // [b, seqlen_k, h_k, d]
  void* o;        // like q
  float* lse;     // [b, h, seqlen_q] (or [h, total_q] when varlen)

  index_t q_batch_stride, q_row_stride, q_head_stride;
  index_t k_batch_stride, k_row_stride, k_head_stride;
  index_t v_batch_stride, v_row_stride, v_head_stride;
  index_t o_batch_stride, o_row_stride, o_head_stride;
  index_t lse_batch_stride, lse_head_stride;  // lse rows are contiguous

  // Varlen: sequence i spans rows cu_seqlens[i] .. cu_seqlens[i + 1]; nullptr for the padded layout.
  // The offsets live on the device and are checked there (seq_info.h) against the rows of q and k
  // (total_q, total_k) and the max_seqlen bounds; a bad sequence is reported through `errors`.
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
  int total_q, total_k;
  DeviceErrorSink errors;

  int b, h, h_k, d;
  int seqlen_q, seqlen_k;  // the lengths, or their upper bounds when varlen

  // From attention_scale() (common/torch_utils.h): the online softmax needs a positive scale, so a
  // negative one is |scale| applied to -q (the SM80 kernel negates Q in shared memory, the SM90 one
  // the scores, which rounds the same), and 0 is 1e-30.
  float scale_softmax;       // |scale| applied to q.k (or to -q.k)
  float scale_softmax_log2;  // scale_softmax * log2(e), at least 1e-30: exp(x * scale) == exp2(x * scale_log2)
  bool negate_q;
  bool is_causal;
  bool is_bf16;
};

bool flash_fwd_supports_head_dim(int d);

// Runs the kernel that `arch` asks for (flash_fwd.cu states the automatic choice and what each
// kind takes); throws std::invalid_argument where that kind has no kernel for the call.
void run_flash_fwd(const FlashFwdParams& params, KernelArch arch, cudaStream_t stream);

}  // namespace cute_ops
