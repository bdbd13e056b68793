"""cute_ops: CUTLASS/CuTe kernels for LLM inference, as PyTorch custom ops (`torch.ops.cute_ops.*`).

Each op family has a Python module (the documented wrapper) and a folder csrc/<family>/ (its
kernels, its input rules and Meta impl in <family>_checks.cpp, its CUDA impl); every op schema is
declared in csrc/torch_bindings.cpp.
"""
from ._library import cuda_kernels_available, schemas_loaded
from .allreduce import PeerAllReduce
from .decode import dequantize_kv, flash_decode, kv_scale, quantize_kv
from .errors import (DeviceDataError, DeviceError, check_errors, get_device_error_mode, read_errors,
                     set_device_error_mode)
from .flash import flash_attn_func, flash_attn_varlen_func, flash_fwd, flash_fwd_varlen
from .gemv import GemvExchange, gemv, gemv_pull, gemv_push
from .gemm_pair import fused_mlp, gemm_pair, pack_gate_up, swiglu, unpack_gate_up
from .norm import fused_add_rms_norm, rms_norm
from .rope import Llama3RopeScaling, rope_cos_sin_cache, rope_inv_freq, rotary_embedding

__version__ = "0.1.0"

__all__ = [
    "check_errors",
    "cuda_kernels_available",
    "DeviceDataError",
    "DeviceError",
    "dequantize_kv",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_decode",
    "flash_fwd",
    "flash_fwd_varlen",
    "fused_add_rms_norm",
    "fused_mlp",
    "gemm_pair",
    "gemv",
    "gemv_pull",
    "gemv_push",
    "GemvExchange",
    "get_device_error_mode",
    "kv_scale",
    "Llama3RopeScaling",
    "pack_gate_up",
    "PeerAllReduce",
    "quantize_kv",
    "read_errors",
    "rms_norm",
    "rope_cos_sin_cache",
    "rope_inv_freq",
    "rotary_embedding",
    "schemas_loaded",
    "set_device_error_mode",
    "swiglu",
    "unpack_gate_up",
]
