"""l2_prefetch: ask the GPU's L2 to fetch the head of a tensor from DRAM for a later kernel, in
stream order (csrc/prefetch/l2_prefetch.h says when that pays: a decode step's attention leaves
DRAM idle). The input rules are the C++ op's (csrc/prefetch/l2_prefetch_checks.cpp)."""
from __future__ import annotations

import torch

from ._library import require_kernels_for


def l2_prefetch(t: torch.Tensor, nbytes: int | None = None) -> None:
    """Prefetch the first ``nbytes`` of ``t`` into L2 (all of it when None; more than ``t`` holds
    is capped at its size, and the count is rounded down to 16 bytes).

    One small launch on the current stream, a programmatic dependent of the kernel before it on
    Hopper: its prefetches go out while that kernel still runs, and the kernel after it still sees
    the one before complete. It changes no data: results are the same with or without it; on GPUs
    before sm_90 it does nothing but keep the stream's order. t: a contiguous CUDA tensor,
    16-byte aligned."""
    require_kernels_for("l2_prefetch", t)
    size = t.numel() * t.element_size()
    nbytes = size if nbytes is None else min(max(int(nbytes), 0), size)
    torch.ops.cute_ops.l2_prefetch(t, nbytes // 16 * 16)
