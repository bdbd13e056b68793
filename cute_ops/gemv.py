"""gemv: the projections of a decode step, ``act(rms_norm(x) @ weight.T) + residual`` for up to 8
rows of x, reading the weight once at the memory rate (kernel in csrc/gemv/). The input rules and
shape inference are the C++ op's (csrc/gemv/gemv_checks.cpp)."""
from __future__ import annotations

import torch

from ._library import require_kernels_for

# Rows of x one call takes (kGemvMaxRows in csrc/gemv/gemv_limits.h; tests/test_gemv.py holds the
# two together): the tokens of a small decode batch.
MAX_ROWS = 8


def gemv(x: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor | None = None, eps: float = 1e-6,
         residual: torch.Tensor | None = None, activation: str = "none") -> torch.Tensor:
    """``F.linear`` for a decode batch, with the neighbouring steps of a LLaMA layer folded in.

    ``out = act(x' @ weight.T)``, then ``out + residual`` when a residual is given, where ``x'`` is
    ``rms_norm(x, norm_weight, eps)`` when ``norm_weight`` is given and ``x`` otherwise. One launch,
    which on Hopper starts while the previous kernel of the stream finishes (programmatic dependent
    launch) and streams the weight at close to the copy rate for any ``m <= 8``.

    Args:
        x: ``[m, k]`` CUDA tensor, float16/bfloat16, ``m <= 8``, ``k`` a multiple of 8, last dim
            contiguous (rows may be strided, 16-byte aligned).
        weight: ``[n, k]``, same dtype, contiguous (``nn.Linear`` layout). For ``"swiglu"``: gate and
            up rows packed by :func:`~cute_ops.pack_gate_up`, and the output has ``n / 2`` columns.
        norm_weight: ``[k]``: RMS-normalise x first. Since ``1 / rms(x)`` is one scalar a row, the
            kernel multiplies the products of ``x * norm_weight`` (each rounded to x's dtype once)
            by it in float32 after the sum; the sum of squares is float32, as in
            :func:`~cute_ops.rms_norm`. One rounding of the normalised input either way, at a
            different point: results agree with ``F.linear(rms_norm(x, norm_weight), weight)`` to
            the rounding of that input.
        eps: the norm's epsilon.
        residual: ``[m, cols]``: added to the product after it is rounded to x's dtype, and the sum
            rounded again, as ``F.linear(...) + residual`` would.
        activation: ``"none"`` or ``"swiglu"`` (``silu(gate) * up``, float32, rounded once).

    Returns:
        A new ``[m, cols]`` tensor of x's dtype. Products accumulate in float32, in an order that
        does not depend on ``m``: each row of the result is what the call with that row alone gives.
    """
    require_kernels_for("gemv", x)
    return torch.ops.cute_ops.gemv(x, weight, norm_weight, eps, residual, activation)


class GemvExchange:
    """The all-reduce of a tensor-parallel decode step, folded into the gemv on each side of it
    (csrc/gemv/gemv_exchange.h): a row-parallel projection *pushes* its partial sums into every
    rank's buffer (:func:`gemv_push`), and the next projection *pulls* their sum as its input
    (:func:`gemv_pull`) once every rank has pushed. No all-reduce kernel runs between the two, so the
    chain of programmatic dependent launches is kept and the next weight stream starts at once.

    One buffer a rank, ``slots`` slots of ``[MAX_ROWS, hidden]`` rows from each rank; a slot may be
    pushed again only after every rank pulled it, which a decode step with a slot per all-reduce
    guarantees (two a layer). Every rank must make the same pushes and pulls in the same order.
    Building it is a collective over ``group`` (the ranks' buffers are mapped into each process
    through CUDA IPC: the GPUs of one host).

    Args:
        like: a tensor of the exchanged rows' dtype (float16/bfloat16) on this rank's GPU.
        slots: pushes a step makes (each one's rows have a slot of their own).
        hidden: the rows' width (the model's hidden size).
        group: the torch.distributed process group of the ranks (None: the default group).
    """

    def __init__(self, like: torch.Tensor, slots: int, hidden: int, group=None):
        import torch.distributed as dist

        require_kernels_for("gemv_push", like)
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.slots, self.hidden = slots, hidden
        self.buffer = torch.ops.cute_ops.gemv_exchange_buffer(like, slots, self.world, hidden)
        handle = bytes(torch.ops.cute_ops.gemv_exchange_handle(self.buffer).tolist())
        handles: list = [None] * self.world
        dist.all_gather_object(handles, handle, group=group)
        # The other ranks' buffers as mapped here (kept alive: freeing one unmaps it).
        self._mapped = [self.buffer if r == self.rank else torch.ops.cute_ops.gemv_exchange_open(
            self.buffer, torch.tensor(list(h), dtype=torch.uint8)) for r, h in enumerate(handles)]
        self.buffers = [t.data_ptr() for t in self._mapped]


def gemv_push(x: torch.Tensor, weight: torch.Tensor, exchange: GemvExchange, slot: int,
              residual: torch.Tensor | None = None) -> None:
    """``x @ weight.T (+ residual)`` (as :func:`gemv` computes it) sent to slot ``slot`` of every
    rank's exchange buffer instead of returned: this rank's partial sum of a row-parallel
    projection. x: ``[m, k]``, ``m <= 8``; weight ``[hidden, k]``."""
    torch.ops.cute_ops.gemv_push(x, weight, residual, exchange.buffer, exchange.buffers, exchange.rank,
                                 exchange.slots, slot)


def gemv_pull(exchange: GemvExchange, slot: int, m: int, weight: torch.Tensor, norm_weight: torch.Tensor,
              eps: float = 1e-6, activation: str = "none", x_sum: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`gemv` of ``x`` = the sum over the ranks of the ``[m, hidden]`` rows pushed to slot
    ``slot`` (each element summed in float32 and rounded once, as a two-rank all-reduce rounds it),
    RMS-normalised with ``norm_weight``. Waits on the device, not the host, for every rank's push;
    the weight stream starts before the wait. ``x_sum`` (``[m, hidden]``, contiguous), when given,
    receives that sum (the residual stream)."""
    return torch.ops.cute_ops.gemv_pull(exchange.buffer, exchange.world, exchange.rank, exchange.slots, slot, m,
                                        weight, norm_weight, eps, activation, x_sum)
