// The input rules of flash_decode and its Meta impl (shape inference for meta and fake tensors);
// compiled into every build. The CPU impl runs the same checks, so a CPU tensor gets this op's
// message rather than the dispatcher's. The supported head dims come from the generated
// flash_decode_supported.h, the other limits from flash_decode_limits.h.
#include <torch/library.h>

#include <tuple>

#include "common/attention_checks.h"
#include "flash_decode/flash_decode_checks.h"
#include "flash_decode/flash_decode_limits.h"
#include "flash_decode/flash_decode_supported.h"

namespace cute_ops {

namespace {

constexpr const char* kOp = "flash_decode";
namespace sets = supported::flash_decode;

std::tuple<at::Tensor, at::Tensor> flash_decode_meta(
    const at::Tensor& q, at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cache_seqlens,
    const std::optional<at::Tensor>& k_new, const std::optional<at::Tensor>& v_new,
    const std::optional<at::Tensor>& block_table, const std::optional<at::Tensor>& rotary_cos,
    const std::optional<at::Tensor>& rotary_sin, std::optional<double> softmax_scale, bool causal, int64_t num_splits,
    const std::optional<at::Tensor>& k_scale, const std::optional<at::Tensor>& v_scale) {
  check_flash_decode(q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table, rotary_cos, rotary_sin,
                     softmax_scale, num_splits, k_scale, v_scale);
  return {at::empty_symint(q.sym_sizes(), q.options()),
          at::empty_symint({q.sym_size(0), q.sym_size(2), q.sym_size(1)}, q.options().dtype(at::kFloat))};
}

}  // namespace

void check_flash_decode(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& cache_seqlens, const std::optional<at::Tensor>& k_new,
                        const std::optional<at::Tensor>& v_new, const std::optional<at::Tensor>& block_table,
                        const std::optional<at::Tensor>& rotary_cos, const std::optional<at::Tensor>& rotary_sin,
                        std::optional<double> softmax_scale, int64_t num_splits,
                        const std::optional<at::Tensor>& k_scale, const std::optional<at::Tensor>& v_scale) {
  check_attention_operand(q, q, kOp, "q", {"batch", "tokens", "heads_q", "head_dim"});
  const c10::SymInt batch = q.sym_size(0), tokens = q.sym_size(1), heads_q = q.sym_size(2);
  const int64_t d = q.sym_size(3).guard_int(__FILE__, __LINE__);  // picks the kernel: specialised when traced
  TORCH_CHECK_VALUE(sets::contains(sets::kHeadDims, static_cast<int>(d)), kOp, ": head_dim must be one of (",
                    join_values(sets::kHeadDims), "), got q of shape ", shape_str(q));
  TORCH_CHECK_VALUE(tokens >= 1 && tokens <= kDecodeMaxNewTokens, kOp, ": q must hold 1 to ", kDecodeMaxNewTokens,
                    " new tokens a sequence ([batch, tokens, heads, head_dim]), got shape ", shape_str(q));
  // The cache holds q's dtype, or float8_e4m3fn with a float32 scale a kv head (or one for all).
  const bool fp8 = k_cache.scalar_type() == at::kFloat8_e4m3fn;
  const std::optional<at::ScalarType> cache_dtype =
      fp8 ? std::optional<at::ScalarType>(at::kFloat8_e4m3fn) : std::nullopt;
  check_attention_operand(k_cache, q, kOp, "k_cache", {"pages or batch", "page_size or capacity", "heads_kv", "head_dim"},
                          cache_dtype);
  check_attention_operand(v_cache, q, kOp, "v_cache", {"pages or batch", "page_size or capacity", "heads_kv", "head_dim"},
                          cache_dtype);
  TORCH_CHECK_VALUE(v_cache.sym_sizes() == k_cache.sym_sizes(), kOp, ": v_cache must have k_cache's shape ",
                    shape_str(k_cache), ", got ", shape_str(v_cache));
  const c10::SymInt heads_kv = k_cache.sym_size(2);
  TORCH_CHECK_VALUE(k_cache.sym_size(3) == d, kOp, ": the cache's head_dim (", k_cache.sym_size(3), ") differs from ",
                    "q's (", d, ")");
  TORCH_CHECK_VALUE(heads_kv >= 1 && heads_q % heads_kv == 0 && heads_q <= kDecodeMaxGroup * heads_kv, kOp,
                    ": q's head count (", heads_q, ") must be a multiple of the cache's (", heads_kv, "), at most ",
                    kDecodeMaxGroup, " times it");
  TORCH_CHECK_VALUE(k_scale.has_value() == fp8 && v_scale.has_value() == fp8, kOp,
                    fp8 ? ": an fp8 cache needs k_scale and v_scale" : ": k_scale and v_scale go with an fp8 cache "
                                                                       "(float8_e4m3fn k_cache and v_cache)");
  if (fp8) {
    TORCH_CHECK_VALUE(d == kDecodeFp8HeadDim, kOp, ": an fp8 cache needs head_dim ", kDecodeFp8HeadDim, ", got ", d);
    for (auto [t, name] : {std::pair{&*k_scale, "k_scale"}, {&*v_scale, "v_scale"}}) {
      check_device(*t, q, kOp, name, "q");
      check_dtype_in(*t, {at::kFloat}, kOp, name);
      TORCH_CHECK_VALUE(t->dim() <= 1 && (t->sym_numel() == 1 || t->sym_numel() == heads_kv) && t->is_contiguous(),
                        kOp, ": ", name, " must hold one scale, or one a kv head (", heads_kv, "), contiguous; got ",
                        "shape ", shape_str(*t));
    }
    TORCH_CHECK_VALUE(k_scale->sym_numel() == v_scale->sym_numel(), kOp, ": k_scale and v_scale must have the same ",
                      "size, got ", shape_str(*k_scale), " and ", shape_str(*v_scale));
  }
  check_int32_operand(cache_seqlens, q, kOp, "cache_seqlens", 1);
  TORCH_CHECK_VALUE(cache_seqlens.sym_size(0) == batch && cache_seqlens.is_contiguous(), kOp,
                    ": cache_seqlens must be contiguous with one length per sequence (", batch, "), got shape ",
                    shape_str(cache_seqlens));
  if (block_table) {
    check_int32_operand(*block_table, q, kOp, "block_table", 2);
    TORCH_CHECK_VALUE(block_table->sym_size(0) == batch &&
                          (block_table->sym_size(1) <= 1 || block_table->sym_stride(1) == 1),
                      kOp, ": block_table must be [batch (", batch, "), max_pages] with contiguous rows, got shape ",
                      shape_str(*block_table), " strides ", strides_str(*block_table));
    TORCH_CHECK_VALUE(k_cache.sym_size(0) >= 1 && k_cache.sym_size(1) % 16 == 0, kOp,
                      ": a paged cache is [num_pages, page_size, heads_kv, head_dim] with at least one page and ",
                      "page_size a multiple of 16, got ", shape_str(k_cache));
  } else {
    TORCH_CHECK_VALUE(k_cache.sym_size(0) == batch, kOp, ": a contiguous cache is [batch (", batch,
                      "), capacity, heads_kv, head_dim], got ", shape_str(k_cache),
                      " (a paged cache needs block_table)");
  }
  TORCH_CHECK_VALUE(k_new.has_value() == v_new.has_value(), kOp, ": k_new and v_new go together");
  for (auto [t, name] : {std::pair{&k_new, "k_new"}, {&v_new, "v_new"}}) {
    if (!t->has_value()) continue;
    check_attention_operand(**t, q, kOp, name, {"batch", "tokens", "heads_kv", "head_dim"});
    TORCH_CHECK_VALUE((*t)->sym_size(0) == batch && (*t)->sym_size(1) == tokens && (*t)->sym_size(2) == heads_kv &&
                          (*t)->sym_size(3) == d,
                      kOp, ": ", name, " must have shape (", batch, ", ", tokens, ", ", heads_kv, ", ", d,
                      ") ([batch, new tokens, heads_kv, head_dim]), got ", shape_str(**t));
  }
  TORCH_CHECK_VALUE(rotary_cos.has_value() == rotary_sin.has_value(), kOp, ": rotary_cos and rotary_sin go together");
  if (rotary_cos) {
    TORCH_CHECK_VALUE(k_new.has_value(), kOp,
                      ": rotary_cos/rotary_sin rotate the new tokens, so they need k_new and v_new");
    for (auto [t, name] : {std::pair{&*rotary_cos, "rotary_cos"}, {&*rotary_sin, "rotary_sin"}}) {
      check_device(*t, q, kOp, name, "q");
      TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat || t->scalar_type() == q.scalar_type(), kOp, ": ", name,
                       " must have dtype in (float32, ", dtype_name(q.scalar_type()).substr(6), "), got ",
                       dtype_name(t->scalar_type()));
      check_dims(*t, 2, kOp, name);
      check_last_dim_contiguous(*t, kOp, name);
    }
    TORCH_CHECK_VALUE(rotary_cos->sym_sizes() == rotary_sin->sym_sizes() &&
                          rotary_cos->sym_strides() == rotary_sin->sym_strides() &&
                          rotary_cos->scalar_type() == rotary_sin->scalar_type(),
                      kOp, ": rotary_cos and rotary_sin must match in shape, strides and dtype");
    TORCH_CHECK_VALUE(rotary_cos->sym_size(1) >= 1 && 2 * rotary_cos->sym_size(1) <= d, kOp,
                      ": rotary_cos is [positions, rotary_dim / 2] with rotary_dim <= head_dim (", d, "), got shape ",
                      shape_str(*rotary_cos));
  }
  check_softmax_scale(softmax_scale, kOp);
  TORCH_CHECK_VALUE(num_splits >= -1 && num_splits <= kDecodeMaxSplits, kOp, ": num_splits must be -1 (batch-invariant), ",
                    "0 (automatic) or 1 to ", kDecodeMaxSplits, ", got ", num_splits);
}

TORCH_LIBRARY_IMPL(cute_ops, Meta, m) { m.impl("flash_decode", &flash_decode_meta); }
TORCH_LIBRARY_IMPL(cute_ops, CPU, m) { m.impl("flash_decode", &flash_decode_meta); }

}  // namespace cute_ops
