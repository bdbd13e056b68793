"""Loads the compiled extension and says clearly when it, or its CUDA kernels, are missing."""
from __future__ import annotations

import copy
import json

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


def _read_supported_configs() -> tuple[dict, str | None]:
    """The extension's supported sets, and why they are unknown (None when they are known)."""
    if not schemas_loaded():
        return {}, f"the extension cute_ops._C could not be imported ({_import_error}); {BUILD_HINT}"
    if not hasattr(torch.ops.cute_ops, "supported_configs"):
        return {}, ("cute_ops._C is older than its Python code (it has no supported_configs op); rebuild it: "
                    "`pip install --no-build-isolation -e .`")
    return json.loads(torch.ops.cute_ops.supported_configs()), None


# Read once at import, like _CUDA_OPS: the wrappers' checks then compare against constants.
_SUPPORTED, _SUPPORTED_UNKNOWN = _read_supported_configs()


def supported_configs() -> dict:
    """What each CuTe family has kernels for, as the extension reports it: ``{family: {"arch": [...],
    axis: [values], ..., "by_arch": {arch: {axis: [values]}}}}``, the axes being the instantiations'
    (dtype, head_dim, causal, block_m). The sets are generated with the instantiations
    (csrc/generate_instantiations.py), so Python restates none of them. Empty when the extension
    is missing."""
    return copy.deepcopy(_SUPPORTED)


def supported(family: str, axis: str, arch: str | None = None) -> tuple:
    """The values of `axis` that `family` has kernels for on some architecture: what its op accepts
    (torch dtypes for "dtype"); with `arch` ("sm80", "sm90"), on that architecture alone (() where
    the family has none of that kind). Without the extension the sets are unknown and this is ();
    the ops' input rules, which use the sets, are in the extension too
    (csrc/<family>/<family>_checks.cpp)."""
    if _SUPPORTED_UNKNOWN is not None:
        return ()
    sets = _SUPPORTED[family] if arch is None else _SUPPORTED[family]["by_arch"].get(arch)
    if sets is None:
        return ()
    values = sets[axis]  # a KeyError here is a name that the C++ side does not know
    return tuple(getattr(torch, name) for name in values) if axis == "dtype" else tuple(values)


def require_kernels(op: str) -> None:
    """Raise a RuntimeError naming the missing build instead of a dispatcher error."""
    if not schemas_loaded():
        raise RuntimeError(f"cute_ops.{op}: the extension cute_ops._C could not be imported "
                           f"({_import_error}); {BUILD_HINT}")
    if not cuda_kernels_available(op):
        raise RuntimeError(f"cute_ops.{op}: cute_ops._C was built without CUDA kernels for this op "
                           f"(CPU-only PyTorch, no nvcc, or CUTE_OPS_FAMILIES left it out); {BUILD_HINT}")


def require_kernels_for(op: str, t) -> None:
    """Before a wrapper calls torch.ops.cute_ops.<op>: the extension must be there (it holds the
    op, its input rules and its Meta impl), and when `t` is a CUDA tensor, the op's CUDA kernels
    too. Meta tensors need only the extension; tensors on other devices reach the op, which names
    the argument that is on the wrong device."""
    if not schemas_loaded() or (isinstance(t, torch.Tensor) and t.device.type == "cuda"):
        require_kernels(op)
