"""Loads the compiled extension and says clearly when it, or its CUDA kernels, are missing."""
from __future__ import annotations

import torch

_import_error: Exception | None = None
try:
    from . import _C  # noqa: F401  (runs the TORCH_LIBRARY registrations)
except ImportError as e:  # not built, or built against another torch
    _import_error = e

BUILD_HINT = "build it on a machine with a CUDA PyTorch and nvcc: `pip install --no-build-isolation -e .`"


def schemas_loaded() -> bool:
    """True when `cute_ops._C` imported, so `torch.ops.cute_ops.*` schemas (and fake impls) exist."""
    return _import_error is None


def _ops_with_cuda_kernels() -> frozenset[str]:
    if not schemas_loaded():
        return frozenset()
    names = torch._C._dispatch_get_registrations_for_dispatch_key("CUDA")
    return frozenset(n.removeprefix("cute_ops::") for n in names if n.startswith("cute_ops::"))


# Read once at import: a constant set keeps the wrappers' check traceable by torch.compile.
_CUDA_OPS = _ops_with_cuda_kernels()


def cuda_kernels_available(op: str = "rms_norm") -> bool:
    """True when the CUDA implementation of `torch.ops.cute_ops.<op>` was built into `cute_ops._C`."""
    return op in _CUDA_OPS


def require_kernels(op: str) -> None:
    """Raise a RuntimeError naming the missing build instead of a dispatcher error."""
    if not schemas_loaded():
        raise RuntimeError(f"cute_ops.{op}: the extension cute_ops._C could not be imported "
                           f"({_import_error}); {BUILD_HINT}")
    if not cuda_kernels_available(op):
        raise RuntimeError(f"cute_ops.{op}: cute_ops._C was built without CUDA kernels for this op "
                           f"(CPU-only PyTorch, no nvcc, or CUTE_OPS_FAMILIES left it out); {BUILD_HINT}")
