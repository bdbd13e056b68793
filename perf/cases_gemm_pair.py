"""Benchmark cases for the gemm_pair family: the LLaMA-3-8B MLP (H 4096, I 14336, bf16) at M rows
(tokens), as fused_mlp against what a user would write with PyTorch: gate and up merged into one
[2I, H] matmul, silu(gate) * up, the down matmul, run three ways: eager and CUDA-graph replayed
(cuBLAS for the matmuls, silu and the multiply as separate kernels), and through
torch.compile(fullgraph=True), whose Inductor fuses the elementwise part into one kernel (the
matmuls stay cuBLAS). The best of these is the baseline. "ours" is fused_mlp as a user calls it:
one gemm_pair launch, or at M <= 8 two gemv launches (its automatic choice). Our other settings
run as variants ("ours_*"): the one launch at M <= 8 (ours_gemm_pair), each kernel kind forced
(sm80: mma.sync; sm90: wgmma and TMA, 9.x devices only), every policy, row granularity, and the
same tiles as two stream-ordered launches (the control for what the one-launch scheduler
gains), and ours_cublas_swiglu: cuBLAS's two matmuls with our swiglu kernel between them on the
packed weights (the LLaMA model's other MLP route, cute_ops/models/llama/model.py). Bytes = the
weights (each call streams all 352 MB of them) plus x and y, nearly all read, so TB/s is the
weight read rate, compared with the read ceiling."""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

import cute_ops
from cute_ops.gemv import MAX_ROWS as GEMV_MAX_ROWS
from harness import Case

HIDDEN, INTER = 4096, 14336
M_SIZES = [1, 16, 64, 128, 512, 2048, 8192]


def _mlp(x, w_gate_up, w_down):
    gate, up = F.linear(x, w_gate_up).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, w_down)


@functools.cache
def _compiled_mlp():
    """One compiled function for the process. M is marked dynamic on the inputs (see setup), so
    every M >= 2 shares one compilation; M = 1 gets its own, as Dynamo specialises sizes 0 and 1."""
    return torch.compile(_mlp, fullgraph=True)


def mlp_inputs(m: int, dtype: torch.dtype = torch.bfloat16):
    """Fresh inputs of the MLP at M rows: (x, w_gate_up, packed, w_down), gate and up both merged
    as cuBLAS takes them and packed as fused_mlp takes them."""
    x = torch.randn(m, HIDDEN, device="cuda", dtype=dtype)
    if m > 1:
        torch._dynamo.mark_dynamic(x, 0)
    w_gate, w_up = [(torch.randn(INTER, HIDDEN, device="cuda") / HIDDEN**0.5).to(dtype) for _ in range(2)]
    w_down = (torch.randn(HIDDEN, INTER, device="cuda") / INTER**0.5).to(dtype)
    w_gate_up = torch.cat([w_gate, w_up])  # the merged projection inference engines use with cuBLAS
    packed = cute_ops.pack_gate_up(w_gate, w_up)
    return x, w_gate_up, packed, w_down


def _mlp_case(m: int) -> Case:
    dtype = torch.bfloat16

    def setup():
        x, w_gate_up, packed, w_down = mlp_inputs(m, dtype)
        compiled_mlp = _compiled_mlp()

        impls = {
            "ours": lambda: cute_ops.fused_mlp(x, packed, w_down),
            "ours_sequential_row": lambda: cute_ops.fused_mlp(x, packed, w_down, granularity="row"),
            "ours_row_interleaved": lambda: cute_ops.fused_mlp(x, packed, w_down, policy="row_interleaved"),
            "ours_overlap": lambda: cute_ops.fused_mlp(x, packed, w_down, policy="overlap"),
            "ours_two_launches": lambda: cute_ops.gemm_pair(x, packed, w_down, separate_launches=True),
            "ours_cublas_swiglu": lambda: F.linear(cute_ops.swiglu(F.linear(x, packed)), w_down),
            "cublas_graph": lambda: _mlp(x, w_gate_up, w_down),
            "cublas_eager": lambda: _mlp(x, w_gate_up, w_down),
            "torch_compile": lambda: compiled_mlp(x, w_gate_up, w_down),
        }
        # Each kernel kind forced (the "ours" rows run the op's choice).
        impls["ours_sm80"] = lambda: cute_ops.fused_mlp(x, packed, w_down, arch="sm80")
        if torch.cuda.get_device_capability()[0] == 9:
            impls["ours_sm90"] = lambda: cute_ops.fused_mlp(x, packed, w_down, arch="sm90")
        if m <= GEMV_MAX_ROWS:
            # "ours" runs two gemv launches here (fused_mlp's choice); this is the one launch.
            impls["ours_gemm_pair"] = lambda: cute_ops.fused_mlp(x, packed, w_down, kernel="gemm_pair")
        return impls

    weight_bytes = 3 * HIDDEN * INTER * 2
    return Case("fused_mlp", "gemm_pair", {"M": m, "H": HIDDEN, "I": INTER}, dtype, setup,
                bytes=weight_bytes + 2 * m * HIDDEN * 2, flops=6 * m * HIDDEN * INTER,
                impls=("ours", "ours_sm80", "ours_sm90", "ours_sequential_row", "ours_row_interleaved", "ours_overlap",
                       "ours_two_launches", "ours_cublas_swiglu", "cublas_graph", "cublas_eager", "torch_compile",
                       "ours_gemm_pair"),
                eager=("cublas_eager",), read_dominated=True)


def cases() -> list[Case]:
    return [_mlp_case(m) for m in M_SIZES]
