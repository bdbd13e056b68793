"""gemm_pair: two dependent GEMMs, ``act(a @ b0.T) @ b1.T``, in one launch, and the LLaMA MLP built
on it (`fused_mlp`, with the one-time weight packing `pack_gate_up`). Kernels in csrc/gemm_pair/;
the tile order and its deadlock-freedom argument in gemm_pair_schedule.py and docs/gemm_pair.md."""
from __future__ import annotations

import torch

from . import _checks
from ._library import require_kernels, require_supported_configs, schemas_loaded, supported
from .gemm_pair_schedule import GRANULARITIES, POLICIES

# What the kernels exist for, as the extension reports it (csrc/generate_instantiations.py writes
# the sets with the instantiations); () without the extension, whose absence _check_args reports.
DTYPES = supported("gemm_pair", "dtype")
BLOCK_MS = supported("gemm_pair", "block_m")
ACTIVATIONS = ("swiglu", "gelu", "none")
# pack_gate_up interleaves gate and up rows in blocks of this many: one GEMM0 tile (128 rows of
# b0) holds 64 gate rows and the 64 matching up rows, so its epilogue writes silu(gate) * up.
GATE_BLOCK = 64


def _check_args(op, a, b0, b1, activation, policy, granularity, split_k0, split_k1, block_m, lag) -> None:
    require_supported_configs(op)
    _checks.check_tensor(op, "a", a, dtypes=DTYPES, ndim=2)
    for name, t in (("b0", b0), ("b1", b1)):
        _checks.check_tensor(op, name, t, dtypes=DTYPES, ndim=2)
        _checks.check_same_device(op, "a", a, **{name: t})
        _checks.check_same_dtype(op, "a", a, **{name: t})
        if not t.is_contiguous():
            raise ValueError(f"{op}: {name} must be contiguous (nn.Linear weight layout), got strides {t.stride()}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"{op}: activation must be one of {ACTIVATIONS}, got {activation!r}")
    if policy not in POLICIES:
        raise ValueError(f"{op}: policy must be one of {POLICIES}, got {policy!r}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"{op}: granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if policy == "overlap" and granularity != "tile":
        raise ValueError(f"{op}: the 'overlap' policy needs granularity 'tile' (a split starts before the rest of "
                         f"its row block is ordered)")
    m, k = a.shape
    n0, n1 = b0.shape[0], b1.shape[0]
    gated = activation == "swiglu"
    h_width = n0 // 2 if gated else n0
    if b0.shape[1] != k:
        raise ValueError(f"{op}: b0 must be [n0, k] with a's k ({k}), got {tuple(b0.shape)}")
    if k < 1 or k % 8:
        raise ValueError(f"{op}: k (a's last dim) must be a positive multiple of 8 (16-byte vectors), got {k}")
    if (a.shape[1] > 1 and a.stride(1) != 1) or (a.shape[0] > 1 and a.stride(0) % 8):
        raise ValueError(f"{op}: a must have a contiguous last dim and a row stride that is a multiple of 8, got "
                         f"strides {a.stride()}")
    step = 16 if gated else 8
    if n0 < 1 or n0 % step:
        raise ValueError(f"{op}: b0's rows must be a positive multiple of {step}"
                         f"{' (swiglu: gate and up halves, each a multiple of 8)' if gated else ''}, got {n0}")
    if tuple(b1.shape[1:]) != (h_width,):
        raise ValueError(f"{op}: b1 must be [n1, {h_width}] (the width of act(a @ b0.T)), got {tuple(b1.shape)}")
    if n1 < 1 or n1 % 8:
        raise ValueError(f"{op}: b1's rows (n1) must be a positive multiple of 8, got {n1}")
    if split_k0 is not None and (split_k0 < 0 or split_k0 % 8):
        raise ValueError(f"{op}: split_k0 must be None (automatic), 0 (no split) or a multiple of 8, got {split_k0}")
    per_tile = GATE_BLOCK if gated else 2 * GATE_BLOCK
    if split_k1 is not None and (split_k1 < 0 or split_k1 % per_tile):
        raise ValueError(f"{op}: split_k1 must be None (automatic), 0 (no split) or a multiple of {per_tile} (the h "
                         f"columns a GEMM0 tile makes), got {split_k1}")
    if block_m is not None and block_m not in BLOCK_MS:
        raise ValueError(f"{op}: block_m must be None (automatic) or one of {BLOCK_MS}, got {block_m}")
    if lag is not None and lag < 0:
        raise ValueError(f"{op}: lag must be None (automatic) or >= 0, got {lag}")


def gemm_pair(a: torch.Tensor, b0: torch.Tensor, b1: torch.Tensor, activation: str = "swiglu",
              policy: str = "sequential", granularity: str = "tile", split_k0: int | None = None,
              split_k1: int | None = None, block_m: int | None = None, lag: int | None = None,
              separate_launches: bool = False) -> torch.Tensor:
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
        block_m: rows a tile: None picks 16, 64 or 128 from M.
        lag: the overlap policy's distance, in GEMM0 tiles (None: the CTAs that fit at once,
            divided by GEMM0's K-splits).
        separate_launches: run the same tiles as two launches, GEMM0's then GEMM1's, ordered by
            the stream instead of by flags: the control that isolates what the one-launch
            scheduler gains. ``policy`` is then ignored.

    Returns:
        ``[..., n1]``, a's dtype. Accumulation is float32; h is rounded to a's dtype once (after the
        activation), like the output.

    The first call for a shape, policy and device builds its tile order on the host and copies it to
    the device on a private stream; the call's stream waits for that copy on the device, so the
    host never waits for work already queued. Later calls reuse the table. A first call may come
    during CUDA graph capture (it then waits on the host for that small copy only) or on one thread
    while another captures.
    """
    lead = a.shape[:-1]
    a2 = a.reshape(-1, a.shape[-1]) if a.dim() != 2 else a
    _check_args("gemm_pair", a2, b0, b1, activation, policy, granularity, split_k0, split_k1, block_m, lag)
    require_kernels("gemm_pair")
    out = torch.ops.cute_ops.gemm_pair(a2, b0, b1, activation, policy, granularity,
                                       -1 if split_k0 is None else split_k0,
                                       -1 if split_k1 is None else split_k1, block_m or 0,
                                       -1 if lag is None else lag, separate_launches)
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


def fused_mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, policy: str = "sequential",
              granularity: str = "tile", split_k1: int | None = None, split_k0: int | None = None) -> torch.Tensor:
    """LLaMA's MLP, ``down(silu(gate(x)) * up(x))``, as one gemm_pair launch.

    Args:
        x: ``[..., H]``.
        w_gate_up: ``pack_gate_up(w_gate, w_up)``, ``[2I, H]``.
        w_down: ``[H_out, I]`` (``nn.Linear`` layout).
    """
    return gemm_pair(x, w_gate_up, w_down, "swiglu", policy, granularity, split_k0=split_k0, split_k1=split_k1)


if schemas_loaded():
    @torch.library.register_fake("cute_ops::gemm_pair")
    def _gemm_pair_fake(a, b0, b1, activation="swiglu", policy="sequential", granularity="tile", split_k0=-1,
                        split_k1=-1, block_m=0, lag=-1, separate_launches=False):
        _check_args("gemm_pair", a, b0, b1, activation, policy, granularity, None if split_k0 < 0 else split_k0,
                    None if split_k1 < 0 else split_k1, block_m or None, None if lag < 0 else lag)
        return a.new_empty((a.shape[0], b1.shape[0]))

# Test support (csrc/gemm_pair/hold_sms.h): CTAs that each hold an SM until released, so that tests
# can run gemm_pair through a few co-resident CTAs on any GPU. It returns nothing. (Guarded by
# hasattr: an extension built before the op existed must not break `import cute_ops`.)
if schemas_loaded() and hasattr(torch.ops.cute_ops, "_hold_sms"):
    @torch.library.register_fake("cute_ops::_hold_sms")
    def _hold_sms_fake(control, num_ctas):
        return None
