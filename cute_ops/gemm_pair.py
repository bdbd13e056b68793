"""gemm_pair: two dependent GEMMs, ``act(a @ b0.T) @ b1.T``, in one launch, and the LLaMA MLP built
on it (`fused_mlp`, with the one-time weight packing `pack_gate_up`; at decode sizes fused_mlp
runs two gemv launches instead, which stream the weights faster there), and `swiglu`, the MLP's
activation alone over a gate/up product in pack_gate_up's order. Kernels in csrc/gemm_pair/;
the tile order and its deadlock-freedom argument in gemm_pair_schedule.py and docs/gemm_pair.md."""
from __future__ import annotations

import torch

from ._library import cuda_kernels_available, require_kernels_for, supported
from .gemm_pair_schedule import GRANULARITIES, POLICIES
from .gemv import MAX_ROWS as GEMV_MAX_ROWS, gemv

# What the kernels exist for, as the extension reports it (csrc/generate_instantiations.py writes
# the sets with the instantiations); () without the extension. The op's input rules are C++
# (csrc/gemm_pair/gemm_pair_checks.cpp), run by its CUDA and Meta impls alike.
DTYPES = supported("gemm_pair", "dtype")
BLOCK_MS = supported("gemm_pair", "block_m")
ACTIVATIONS = ("swiglu", "gelu", "none")
# pack_gate_up interleaves gate and up rows in blocks of this many (kGateUpBlock in
# csrc/common/gate_up_layout.h): one GEMM0 tile (128 rows of b0) holds 64 gate rows and the 64
# matching up rows, so its epilogue writes silu(gate) * up; gemv's SwiGLU reads the same blocks.
GATE_BLOCK = 64
# What fused_mlp runs: see its docstring.
FUSED_MLP_KERNELS = ("auto", "gemm_pair", "gemv")


def gemm_pair(a: torch.Tensor, b0: torch.Tensor, b1: torch.Tensor, activation: str = "swiglu",
              policy: str = "sequential", granularity: str = "tile", split_k0: int | None = None,
              split_k1: int | None = None, block_m: int | None = None, lag: int | None = None,
              separate_launches: bool = False, arch: str = "auto") -> torch.Tensor:
    """``act(a @ b0.T) @ b1.T`` as one kernel launch: the second GEMM's tiles start as soon as the
    first GEMM's tiles they read are done (no tail wave between the GEMMs, h read back from L2).

    Args:
        a: ``[..., k]`` CUDA tensor, float16/bfloat16, last dim contiguous, ``k`` a multiple of 8.
        b0: ``[n0, k]``, contiguous (``nn.Linear`` weight layout). For ``"swiglu"`` it holds gate
            and up rows interleaved by :func:`pack_gate_up`, and the activation's width is n0 / 2.
        b1: ``[n1, h]`` with h the activation's width, contiguous; ``n1`` a multiple of 8.
        activation: ``"swiglu"`` (``silu(gate) * up``), ``"gelu"`` (erf form) or ``"none"``.
        policy: the tile order: ``"sequential"`` (all GEMM0 tiles, then GEMM1's), ``"row_interleaved"``
            (row block by row block) or ``"overlap"`` (each GEMM1 K-split ``lag`` tiles after its
            last producer). Results do not depend on it.
        granularity: what a GEMM1 tile waits for: ``"tile"`` (the GEMM0 tiles producing the h
            columns it reads) or ``"row"`` (every GEMM0 tile of its row block).
        split_k0: columns of k each GEMM0 split reads: None picks (splits at decode sizes, where
            GEMM0's tiles would fill only part of the CTA slots and crowd onto some SMs), 0 does
            not split. The last split of a tile to finish sums the float32 partials in split order
            and applies the activation.
        split_k1: h columns each GEMM1 split reads: None picks (splits at decode sizes, where GEMM1
            has too few output tiles to fill the GPU), 0 does not split. Partials are float32 and
            summed in split order, so results are deterministic.
        block_m: rows a tile: None picks 16, 64 or 128 from M, or 256 from M = 512 where the sm90
            kernels run (64 from M = 9 where the sm90 kernels take small M: see ``arch``).
        lag: the overlap policy's distance, in GEMM0 tiles (None: the CTAs that fit at once,
            divided by GEMM0's K-splits).
        separate_launches: run the same tiles as two launches, GEMM0's then GEMM1's, ordered by
            the stream instead of by flags: the control that isolates what the one-launch
            scheduler gains. ``policy`` is then ignored.
        arch: the kernels' kind. ``"auto"`` runs the sm90 kernels (wgmma, TMA, warp-specialised) on
            compute capability 9.x for the 128- and 256-row tiles, and for the 64-row tiles at
            8 < M <= 64; the sm80 ones (mma.sync, cp.async) otherwise, and for a ``split_k0`` that
            is not a multiple of 64. ``"sm80"`` or ``"sm90"`` forces one (tests, A/B). The
            sm90 kernels have block_m 64, 128 and 256 (sm80: 16, 64 and 128), and with ``"sm90"``
            ``split_k0`` must be a multiple of 64. The sm90 kernels start while the stream's
            previous kernel finishes (programmatic dependent launch), reading the first weights
            into L2 before they wait for it.

    Returns:
        ``[..., n1]``, a's dtype. Accumulation is float32; h is rounded to a's dtype once (after the
        activation), like the output.

    The first call for a shape, policy and device builds its tile order on the host and copies it to
    the device on a private stream; the call's stream waits for that copy on the device, so the
    host never waits for work already queued. Later calls reuse the table. A first call may come
    during CUDA graph capture (it then waits on the host for that small copy only) or on one thread
    while another captures.
    """
    if a.dim() < 1:
        raise ValueError("gemm_pair: a must be [..., k], got a 0-dim tensor")
    lead = a.shape[:-1]
    a2 = a.reshape(-1, a.shape[-1]) if a.dim() != 2 else a
    require_kernels_for("gemm_pair", a2)
    out = torch.ops.cute_ops.gemm_pair(a2, b0, b1, activation, policy, granularity,
                                       -1 if split_k0 is None else split_k0,
                                       -1 if split_k1 is None else split_k1, block_m or 0,
                                       -1 if lag is None else lag, separate_launches, arch)
    return out.reshape(*lead, b1.shape[0])


def pack_gate_up(w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """Packs LLaMA's gate and up projections (``[I, H]`` each, ``nn.Linear`` layout) into the ``[2I, H]``
    b0 that gemm_pair's "swiglu" activation reads: rows in blocks of 64 gate rows followed by the
    same 64 up rows (the last block r < 64 of each). A one-time weight transform: do it when loading
    the model, not per call. `unpack_gate_up` inverts it."""
    if w_gate.shape != w_up.shape or w_gate.dim() != 2:
        raise ValueError(f"pack_gate_up: w_gate and w_up must be 2-D of one shape, got {tuple(w_gate.shape)} and "
                         f"{tuple(w_up.shape)}")
    if w_gate.dtype != w_up.dtype or w_gate.device != w_up.device:
        raise ValueError("pack_gate_up: w_gate and w_up must share dtype and device")
    inter, hidden = w_gate.shape
    full = inter // GATE_BLOCK * GATE_BLOCK
    body = torch.stack([w_gate[:full].reshape(-1, GATE_BLOCK, hidden), w_up[:full].reshape(-1, GATE_BLOCK, hidden)],
                       dim=1).reshape(2 * full, hidden)
    return torch.cat([body, w_gate[full:], w_up[full:]]).contiguous()


def unpack_gate_up(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of :func:`pack_gate_up`: ``(w_gate, w_up)``."""
    if packed.dim() != 2 or packed.shape[0] % 2:
        raise ValueError(f"unpack_gate_up: expected [2I, H], got {tuple(packed.shape)}")
    inter, hidden = packed.shape[0] // 2, packed.shape[1]
    full = inter // GATE_BLOCK * GATE_BLOCK
    body = packed[:2 * full].reshape(-1, 2, GATE_BLOCK, hidden)
    tail = packed[2 * full:]
    rest = inter - full
    gate = torch.cat([body[:, 0].reshape(full, hidden), tail[:rest]])
    up = torch.cat([body[:, 1].reshape(full, hidden), tail[rest:]])
    return gate, up


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of a gate/up product whose columns are in :func:`pack_gate_up`'s order
    (``x @ pack_gate_up(w_gate, w_up).T``, as cuBLAS computes it): the activation of a LLaMA MLP
    whose gate/up matmul ran elsewhere, in one pass over the product (where ``F.silu(gate) * up``
    over its two strided halves runs two kernels and writes an intermediate).

    Args:
        gate_up: ``[..., 2 * inter]`` CUDA tensor, float16/bfloat16/float32; the last dim
            contiguous, rows 16-byte aligned (a row stride a multiple of 8 elements for 16-bit
            types, 4 for float32), the leading dims viewable as one.

    Returns:
        A new contiguous ``[..., inter]`` tensor of gate_up's dtype. The activation runs in float32
        and is rounded once (PyTorch's ``F.silu(gate) * up`` rounds twice).
    """
    require_kernels_for("swiglu", gate_up)
    return torch.ops.cute_ops.swiglu(gate_up)


def fused_mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, policy: str = "sequential",
              granularity: str = "tile", split_k1: int | None = None, split_k0: int | None = None,
              arch: str = "auto", kernel: str = "auto") -> torch.Tensor:
    """LLaMA's MLP, ``down(silu(gate(x)) * up(x))``.

    Args:
        x: ``[..., H]``.
        w_gate_up: ``pack_gate_up(w_gate, w_up)``, ``[2I, H]``.
        w_down: ``[H_out, I]`` (``nn.Linear`` layout).
        kernel: ``"gemm_pair"``: one :func:`gemm_pair` launch. ``"gemv"``: two
            :func:`~cute_ops.gemv` launches, gate/up with SwiGLU then down, the second started
            while the first finishes (programmatic dependent launch on Hopper), for at most
            gemv's ``MAX_ROWS`` rows of x (cute_ops/gemv.py). ``"auto"``: ``"gemv"`` for 1 to
            ``MAX_ROWS`` rows when none of gemm_pair's settings below is given a value other
            than its default, ``"gemm_pair"`` otherwise. At these sizes the weights' read is the
            whole cost, and the gemv kernels stream the weights faster than the one launch's
            small tiles (docs/perf-notes.md, gemm_pair, sessions 36-37). The choice reads the
            row count: torch.compile guards on it; a caller that traces a symbolic batch size
            across ``MAX_ROWS`` (torch.export) should pass ``kernel``.

    The other arguments are :func:`gemm_pair`'s settings. Both kernels accumulate in float32 and
    round the activation's output to x's dtype once before the down projection; their sums run in
    different orders, so results agree to float32 rounding, not bit for bit. Both take the shapes
    gemm_pair's rules allow ("auto" gives gemm_pair, and its message, any shapes it refuses).
    """
    if kernel not in FUSED_MLP_KERNELS:
        raise ValueError(f"fused_mlp: kernel must be one of {FUSED_MLP_KERNELS}, got {kernel!r}")
    if x.dim() < 1:
        raise ValueError("fused_mlp: x must be [..., H], got a 0-dim tensor")
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    gemm_pair_defaults = (policy, granularity, split_k1, split_k0, arch) == ("sequential", "tile", None, None, "auto")
    if kernel == "auto":
        # gemv also takes weight row counts that gemm_pair refuses (its rules: gemm_pair_checks.cpp);
        # those go to gemm_pair, whose check names them.
        pair_shapes = w_gate_up.dim() == 2 and w_gate_up.shape[0] % 16 == 0 and w_down.dim() == 2 \
            and w_down.shape[0] % 8 == 0
        use_gemv = (1 <= rows <= GEMV_MAX_ROWS and gemm_pair_defaults and pair_shapes and x.is_cuda
                    and cuda_kernels_available("gemv"))
        kernel = "gemv" if use_gemv else "gemm_pair"
    if kernel == "gemv":
        if not gemm_pair_defaults:
            raise ValueError("fused_mlp: policy, granularity, split_k0, split_k1 and arch are gemm_pair's settings; "
                             "kernel='gemv' takes none of them")
        if rows > GEMV_MAX_ROWS:
            raise ValueError(f"fused_mlp: kernel='gemv' takes at most {GEMV_MAX_ROWS} rows of x, got {rows}; "
                             "use kernel='auto' or 'gemm_pair' for more")
        act = gemv(x.reshape(rows, x.shape[-1]), w_gate_up, activation="swiglu")
        return gemv(act, w_down).reshape(*x.shape[:-1], w_down.shape[0])
    return gemm_pair(x, w_gate_up, w_down, "swiglu", policy, granularity, split_k0=split_k0, split_k1=split_k1,
                     arch=arch)
