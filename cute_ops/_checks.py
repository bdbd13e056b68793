"""Input checks shared by the op wrappers and their fake impls: each message names the argument,
what was expected and what was given."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Devices an op accepts: real CUDA tensors, and meta tensors for shape inference.
_DEVICE_TYPES = ("cuda", "meta")


def check_tensor(op: str, name: str, t, *, dtypes: Iterable[torch.dtype] | None = None,
                 ndim: int | None = None, min_ndim: int | None = None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type not in _DEVICE_TYPES:
        raise ValueError(f"{op}: {name} must be a CUDA tensor, got device {t.device}")
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if t.dtype not in dtypes:
            names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
            raise TypeError(f"{op}: {name} must have dtype in ({names}), got {t.dtype}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{op}: {name} must have {ndim} dims, got shape {tuple(t.shape)}")
    if min_ndim is not None and t.dim() < min_ndim:
        raise ValueError(f"{op}: {name} must have at least {min_ndim} dims, got shape {tuple(t.shape)}")


def check_same_device(op: str, ref_name: str, ref: torch.Tensor, **others: torch.Tensor) -> None:
    for name, t in others.items():
        if t.device != ref.device:
            raise ValueError(f"{op}: {name} is on {t.device} but {ref_name} is on {ref.device}")


def check_same_dtype(op: str, ref_name: str, ref: torch.Tensor, **others: torch.Tensor) -> None:
    for name, t in others.items():
        if t.dtype != ref.dtype:
            raise TypeError(f"{op}: {name} has dtype {t.dtype}, expected {ref.dtype} like {ref_name}")


def check_shape(op: str, name: str, t: torch.Tensor, expected: Sequence[int]) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{op}: {name} must have shape {tuple(expected)}, got {tuple(t.shape)}")


def check_last_dim_contiguous(op: str, name: str, t: torch.Tensor) -> None:
    if t.dim() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{op}: {name}'s last dim must be contiguous (stride 1), got strides {t.stride()}")


def vector_width(dtype: torch.dtype) -> int:
    """Elements per 16-byte access, the unit of the memory-bound kernels."""
    return 16 // torch.empty((), dtype=dtype, device="meta").element_size()


# The attention kernels copy 16-byte vectors (8 fp16/bf16 elements) starting at every row and
# head, so each stride but the last must keep them 16-byte aligned; the data pointers' alignment
# is checked in C++.
_VECTOR_STRIDE_MULTIPLE = 8


def check_vector_strides(op: str, name: str, t: torch.Tensor) -> None:
    """Last dim contiguous and every other stride a multiple of 16 bytes of 16-bit elements."""
    check_last_dim_contiguous(op, name, t)
    if any(stride % _VECTOR_STRIDE_MULTIPLE for stride in t.stride()[:-1]):
        raise ValueError(f"{op}: {name}'s strides (all but the last) must be multiples of {_VECTOR_STRIDE_MULTIPLE} "
                         f"elements (16 bytes), got strides {t.stride()}")


def check_attention_options(op: str, softmax_scale, causal) -> None:
    """softmax_scale None or a finite real number; causal a bool."""
    is_real = isinstance(softmax_scale, (int, float)) and not isinstance(softmax_scale, bool)
    if softmax_scale is not None and not (is_real and math.isfinite(softmax_scale)):
        raise ValueError(f"{op}: softmax_scale must be a finite float, or None for 1/sqrt(head_dim), "
                         f"got {softmax_scale!r}")
    if not isinstance(causal, bool):
        raise ValueError(f"{op}: causal must be a bool, got {causal!r}")
