#pragma once
// The building blocks of the ops' input rules. Each family states its rules once, in a
// <family>_checks.cpp that every build compiles (the CPU-only one too): its CUDA impl calls them
// before launching, and its Meta impl, registered there, calls them for meta tensors and for
// torch.compile's fake tensors, then allocates the outputs. So the rules are one piece of C++,
// tested on the CPU through meta tensors, and a bad input fails the same way when traced and when
// run. Sizes and strides are read with the sym_* accessors, so dynamic shapes under torch.compile
// work: a comparison of symbolic sizes installs a guard.
//
// Errors become Python ValueError (TORCH_CHECK_VALUE) or TypeError (TORCH_CHECK_TYPE) and name
// the op, the argument, what was expected and what was given. ATen only: no CUDA header.
#include <ATen/ATen.h>

#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace cute_ops {

// Elements of `dtype` in one 16-byte vector: the memory-bound kernels' unit of access, so rows
// and their strides must be whole multiples of it.
inline int elems_per_16_bytes(at::ScalarType dtype) { return static_cast<int>(16 / c10::elementSize(dtype)); }

// torch.float16 etc., as a Python user writes dtypes.
inline std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    default: return std::string("torch.") + c10::toString(t);
  }
}

// "2, 3, 4": sizes separated by commas.
inline std::string join_sizes(c10::SymIntArrayRef sizes) {
  std::ostringstream s;
  for (size_t i = 0; i < sizes.size(); ++i) s << (i ? ", " : "") << sizes[i];
  return s.str();
}

// (2, 3, 4): a shape as Python prints it.
inline std::string shape_str(c10::SymIntArrayRef sizes) {
  return "(" + join_sizes(sizes) + (sizes.size() == 1 ? ",)" : ")");
}
inline std::string shape_str(const at::Tensor& t) { return shape_str(t.sym_sizes()); }
inline std::string strides_str(const at::Tensor& t) { return shape_str(t.sym_strides()); }

// "64, 96, 128, 256": a generated supported set, for messages.
template <typename T, size_t N>
std::string join_values(const T (&values)[N]) {
  std::string s;
  for (const T& v : values) s += (s.empty() ? "" : ", ") + std::to_string(v);
  return s;
}

// On a CUDA device (or meta: shape inference), and on ref's device.
inline void check_device(const at::Tensor& t, const at::Tensor& ref, const char* op, const char* name,
                         const char* ref_name) {
  TORCH_CHECK_VALUE(t.is_cuda() || t.is_meta(), op, ": ", name, " must be a CUDA tensor, got device ", t.device());
  TORCH_CHECK_VALUE(t.device() == ref.device(), op, ": ", name, " is on ", t.device(), " but ", ref_name, " is on ",
                    ref.device());
}

inline void check_dtype_in(const at::Tensor& t, c10::ArrayRef<at::ScalarType> allowed, const char* op,
                           const char* name) {
  for (at::ScalarType a : allowed) {
    if (t.scalar_type() == a) return;
  }
  std::string names;
  for (at::ScalarType a : allowed) names += (names.empty() ? "" : ", ") + dtype_name(a).substr(6);
  TORCH_CHECK_TYPE(false, op, ": ", name, " must have dtype in (", names, "), got ", dtype_name(t.scalar_type()));
}

// A generated supported set (csrc/<family>/<family>_supported.h) as ScalarTypes, for check_dtype_in.
inline at::ScalarType scalar_type_of(DType d) {
  switch (d) {
    case DType::kFloat16: return at::kHalf;
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kFloat32: return at::kFloat;
  }
  return at::kFloat;
}

template <size_t N>
void check_dtype_in(const at::Tensor& t, const DType (&allowed)[N], const char* op, const char* name) {
  std::vector<at::ScalarType> types;
  for (DType d : allowed) types.push_back(scalar_type_of(d));
  check_dtype_in(t, types, op, name);
}

// A string option that must be one of `names` (shown quoted in the message when it is not).
template <size_t N>
void check_choice(const char* op, const std::string& value, const char* const (&names)[N], const char* what) {
  std::string list;
  for (const char* n : names) {
    if (value == n) return;
    list += (list.empty() ? "'" : ", '") + std::string(n) + "'";
  }
  TORCH_CHECK_VALUE(false, op, ": ", what, " must be one of (", list, "), got '", value, "'");
}

inline void check_same_dtype(const at::Tensor& t, const at::Tensor& ref, const char* op, const char* name,
                             const char* ref_name) {
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), op, ": ", name, " has dtype ", dtype_name(t.scalar_type()),
                   ", expected ", dtype_name(ref.scalar_type()), " like ", ref_name);
}

inline void check_dims(const at::Tensor& t, int64_t dims, const char* op, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == dims, op, ": ", name, " must have ", dims, " dims, got shape ", shape_str(t));
}

inline void check_last_dim_contiguous(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == 0 || t.sym_size(-1) <= 1 || t.sym_stride(-1) == 1, op, ": ", name,
                    "'s last dim must be contiguous (stride 1), got strides ", strides_str(t));
}

// 16-byte (or `bytes`) aligned data; meta tensors have no data and pass.
inline void check_aligned(const at::Tensor& t, int64_t bytes, const char* op, const char* name) {
  TORCH_CHECK_VALUE(t.is_meta() || reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0, op, ": ", name,
                    "'s data pointer must be ", bytes, "-byte aligned (a view with a storage offset may not be)");
}

// Whether all leading dims of t (all but the last `inner`) collapse into one row index as a view
// (no copy): then consecutive rows are t.stride(-inner - 1) apart.
inline bool leading_dims_collapse(const at::Tensor& t, int64_t inner) {
  const int64_t lead = t.dim() - inner;
  for (int64_t d = 0; d + 1 < lead; ++d) {
    if (t.sym_size(d) > 1 && t.sym_stride(d) != t.sym_stride(d + 1) * t.sym_size(d + 1)) return false;
  }
  return true;
}

}  // namespace cute_ops
