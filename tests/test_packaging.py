"""Build metadata and the import path of a CPU-only install."""
from __future__ import annotations

import importlib.util
import pathlib
import re

import torch

import cute_ops

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load_script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cutlass_pin_agrees_with_pyproject():
    pin = _load_script("fetch_cutlass").CUTLASS_VERSION
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(rf'"nvidia-cutlass=={re.escape(pin)}"', pyproject)


def test_every_schema_is_registered():
    assert cute_ops.schemas_loaded()
    for op in ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "flash_fwd", "flash_fwd_varlen", "flash_decode",
               "gemm_pair", "gemm_pair_order"):
        assert hasattr(torch.ops.cute_ops, op)


def test_every_schema_has_a_fake_impl():
    # Each op declared in torch_bindings.cpp needs a register_fake so torch.compile can trace it.
    text = (ROOT / "csrc" / "torch_bindings.cpp").read_text()
    # Host-only ops (no tensor arguments, like gemm_pair_order) run their C++ code under any
    # dispatch key, fake tensors included, and need none.
    declared = [name for name, args in re.findall(r'm\.def\("(\w+)\(([^)]*)\)', text) if "Tensor" in args]
    assert declared
    py = "\n".join(p.read_text() for p in (ROOT / "cute_ops").glob("*.py"))
    for op in declared:
        assert f'register_fake("cute_ops::{op}")' in py, f"no fake impl for cute_ops::{op}"


def test_kernels_built_where_a_gpu_is_visible():
    # On a GPU machine a missing kernel build is a failure, not a skip.
    if torch.cuda.is_available():
        assert cute_ops.cuda_kernels_available("rms_norm")
        assert cute_ops.cuda_kernels_available("rotary_embedding")
        assert cute_ops.cuda_kernels_available("flash_fwd")
        assert cute_ops.cuda_kernels_available("flash_fwd_varlen")
