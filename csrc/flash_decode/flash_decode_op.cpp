// Torch glue for flash_decode: checks, output and workspace allocation, split count, launch,
// registration. Values that live on the device (cache_seqlens, block_table entries, positions)
// are checked by the kernels and reported through common/device_errors.h; everything about
// shapes, dtypes and devices is checked here.
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "common/arrival_counters.h"
#include "common/attention_checks.h"
#include "common/device_errors.h"
#include "common/device_info.h"
#include "common/torch_utils.h"
#include "flash_decode/flash_decode.h"
#include "flash_decode/flash_decode_checks.h"

namespace cute_ops {

namespace {

constexpr const char* kOp = "flash_decode";
std::tuple<at::Tensor, at::Tensor> flash_decode(const at::Tensor& q, at::Tensor& k_cache, at::Tensor& v_cache,
                                                const at::Tensor& cache_seqlens,
                                                const std::optional<at::Tensor>& k_new,
                                                const std::optional<at::Tensor>& v_new,
                                                const std::optional<at::Tensor>& block_table,
                                                const std::optional<at::Tensor>& rotary_cos,
                                                const std::optional<at::Tensor>& rotary_sin,
                                                std::optional<double> softmax_scale, bool causal,
                                                int64_t num_splits, const std::optional<at::Tensor>& k_scale,
                                                const std::optional<at::Tensor>& v_scale) {
  check_flash_decode(q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table, rotary_cos, rotary_sin,
                     softmax_scale, num_splits, k_scale, v_scale);  // flash_decode_checks.cpp
  const int64_t b = q.size(0), sq = q.size(1), h = q.size(2), d = q.size(3), hk = k_cache.size(2);
  const c10::cuda::CUDAGuard guard(q.device());
  FlashDecodeParams p{};
  p.b = static_cast<int>(b), p.sq = static_cast<int>(sq), p.h = static_cast<int>(h), p.h_k = static_cast<int>(hk);
  p.d = static_cast<int>(d);
  p.is_bf16 = q.scalar_type() == at::kBFloat16;
  p.causal = causal;
  const AttentionScale scale = attention_scale(kOp, softmax_scale, d);
  p.scale_softmax = scale.scale, p.scale_softmax_log2 = scale.scale_log2, p.negate_q = scale.negate_q;

  int max_seqlen;  // the most keys a sequence can have: the heuristic's bound
  if (block_table) {
    const int64_t page_size = k_cache.size(1);
    p.block_table = block_table->data_ptr<int>();
    p.block_table_stride = block_table->stride(0);
    p.max_pages = static_cast<int>(block_table->size(1));
    p.page_size = static_cast<int>(page_size);
    p.num_pages = static_cast<int>(k_cache.size(0));
    max_seqlen = static_cast<int>(std::min<int64_t>(page_size * block_table->size(1), INT32_MAX));
  } else {
    p.max_pages = 1;
    p.page_size = static_cast<int>(k_cache.size(1));
    p.num_pages = static_cast<int>(b);
    max_seqlen = p.page_size;
  }
  p.k_cache = k_cache.data_ptr(), p.v_cache = v_cache.data_ptr();
  if (k_scale) {
    p.kv_fp8 = true;
    p.k_scale = k_scale->data_ptr<float>(), p.v_scale = v_scale->data_ptr<float>();
    p.kv_scale_stride = k_scale->numel() == 1 ? 0 : 1;
  }
  p.k_page_stride = k_cache.stride(0), p.k_row_stride = k_cache.stride(1), p.k_head_stride = k_cache.stride(2);
  p.v_page_stride = v_cache.stride(0), p.v_row_stride = v_cache.stride(1), p.v_head_stride = v_cache.stride(2);
  p.cache_seqlens = cache_seqlens.data_ptr<int>();
  p.errors = device_error_sink(q.device().index());

  p.q = q.data_ptr();
  p.q_batch_stride = q.stride(0), p.q_row_stride = q.stride(1), p.q_head_stride = q.stride(2);
  if (k_new) {
    p.seqlen_new = static_cast<int>(sq);
    p.k_new = k_new->data_ptr(), p.v_new = v_new->data_ptr();
    p.knew_batch_stride = k_new->stride(0), p.knew_row_stride = k_new->stride(1), p.knew_head_stride = k_new->stride(2);
    p.vnew_batch_stride = v_new->stride(0), p.vnew_row_stride = v_new->stride(1), p.vnew_head_stride = v_new->stride(2);
  }
  if (rotary_cos) {
    const at::Tensor& cos = *rotary_cos;
    const at::Tensor& sin = *rotary_sin;
    p.rotary_cos = cos.data_ptr(), p.rotary_sin = sin.data_ptr();
    p.rotary_stride = cos.stride(0);
    p.rotary_dim = static_cast<int>(2 * cos.size(1));
    p.rotary_rows = static_cast<int>(cos.size(0));
    p.rotary_fp32 = cos.scalar_type() == at::kFloat;
  }

  at::Tensor out = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({b, h, sq}, q.options().dtype(at::kFloat));
  if (b == 0) return {out, lse};
  p.o = out.data_ptr();
  p.o_batch_stride = out.stride(0), p.o_row_stride = out.stride(1), p.o_head_stride = out.stride(2);
  p.lse = lse.data_ptr<float>();
  const DeviceInfo info = device_info(q.device().index());
  p.pdl = info.major >= 9;
  if (num_splits > 0) {
    p.num_splits = static_cast<int>(num_splits);
  } else {
    // -1: the count the default picks for a batch of one, whatever the batch. A sequence's keys
    // then split at the same tiles in any batch (the kernel splits each sequence by its own
    // length), and the merge runs in split order, so its rows are the same bits batched or alone.
    FlashDecodeParams shape = p;
    if (num_splits < 0) shape.b = 1;
    p.num_splits = flash_decode_default_splits(shape, info.sms, max_seqlen);
  }
  const cudaStream_t stream = current_stream(q);
  at::Tensor o_partial, lse_partial;
  if (p.num_splits > 1) {
    o_partial = at::empty({p.num_splits, b * h * sq, d}, q.options().dtype(at::kFloat));
    lse_partial = at::empty({p.num_splits, b * h * sq}, q.options().dtype(at::kFloat));
    p.o_partial = o_partial.data_ptr<float>();
    p.lse_partial = lse_partial.data_ptr<float>();
    const int64_t row_blocks = (flash_decode_rows(p) + kDecodeBlockM - 1) / kDecodeBlockM;
    p.split_counters = arrival_counters(q.device().index(), stream, static_cast<size_t>(b * hk * row_blocks));
  }
  run_flash_decode(p, stream);
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) { m.impl("flash_decode", &flash_decode); }

}  // namespace cute_ops
