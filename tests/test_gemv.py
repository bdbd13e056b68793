"""gemv: fake impl and input checks everywhere; on the GPU the kernel against a float64 reference
(norm, SwiGLU and residual variants, odd sizes), row independence, poisoned outputs, graph capture
and torch.compile."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses import FakeTensorMode

import cute_ops
from cute_ops import reference as ref
from cute_ops.gemv import MAX_ROWS
from conftest import (CHECK_DEVICES, assert_close_to_reference, capture_graph, gpu_kernel_names, on_device,
                      poison_allocator)

DTYPES = [torch.bfloat16, torch.float16]
# (k, n): k from one 8-column chunk to more steps than a CTA has warps (and a partial last step);
# n odd, below and above one 16-row unit; LLaMA-3-8B's qkv (384 units). Stream-K (gemv_stream_k.cuh,
# on in the default build) takes projections of more units than the device's CTA slots (264 on a
# 132-SM H100 or H200): there the 8B's qkv runs 1.45 units a CTA, and (4104, 4401) (276 units of 33
# steps, 551 for SwiGLU) cuts nearly every unit between two CTAs; the rest run the plain kernel,
# (1024, 16896) with 4 whole units a CTA (8 for SwiGLU) of one step a warp: a barrier a step, and
# (264, 16896) the same with 5 of the 8 warps stepping nothing.
SHAPES = [(8, 17), (1000, 4097), (4104, 1000), (14336, 40), (4096, 6144), (4104, 4401), (1024, 16896),
          (264, 16896)]
STREAM_K_SHAPE = (4104, 4401)
# Ours: x * norm_weight rounded once (PyTorch rounds x * inv_rms * norm_weight once), float32 sums,
# the output rounded once (twice with a residual, as F.linear + residual rounds). PyTorch's error in
# the working dtype has as many roundings, plus its cuBLAS sums; k = 2 leaves room for them to fall
# at other points.
K_GEMV = 2.0
VARIANTS = ["plain", "norm", "residual", "norm_swiglu", "swiglu_residual", "norm_residual"]


def _inputs(m, k, n, dtype, variant, device="cuda"):
    """x, weight, kwargs for a variant; "swiglu" weights are n gate rows and n up rows, packed."""
    x = torch.randn(m, k, dtype=dtype, device=device)
    scale = k ** -0.5
    kw = {}
    if "swiglu" in variant:
        gate = torch.randn(n, k, dtype=dtype, device=device) * scale
        up = torch.randn(n, k, dtype=dtype, device=device) * scale
        weight = cute_ops.pack_gate_up(gate, up)
        kw["activation"] = "swiglu"
    else:
        weight = torch.randn(n, k, dtype=dtype, device=device) * scale
    if "norm" in variant:
        x = x * 3 + 0.5  # not already unit rms
        kw["norm_weight"] = 1 + 0.2 * torch.randn(k, dtype=dtype, device=device)
        kw["eps"] = 1e-5
    if "residual" in variant:
        kw["residual"] = torch.randn(m, n, dtype=dtype, device=device)
    return x, weight, kw


def _check(out, x, weight, kw, what="out"):
    as64 = {name: v.double() if isinstance(v, torch.Tensor) else v for name, v in kw.items()}
    expected = ref.gemv(x.double(), weight.double(), **as64)
    lowp = ref.gemv(x, weight, upcast=False, **kw)
    assert_close_to_reference(out, expected, lowp, k=K_GEMV, what=what)


# ---------------------------------------------------------------- CPU: fakes, checks
@pytest.mark.parametrize("activation, cols", [("none", 96), ("swiglu", 48)])
def test_fake_impl_shapes(activation, cols):
    with FakeTensorMode():
        x = torch.empty(5, 256, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(96, 256, dtype=torch.bfloat16, device="cuda")
        out = torch.ops.cute_ops.gemv(x, w, None, 1e-6, None, activation)
        assert out.shape == (5, cols) and out.dtype == x.dtype and out.is_contiguous()


def _t(shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


BAD_INPUTS = [
    # The Python restatement of the limit (cute_ops.gemv.MAX_ROWS) against the C++ rule.
    (lambda: (_t((MAX_ROWS + 1, 64)), _t((32, 64)), {}), f"x may have at most {MAX_ROWS} rows", ValueError),
    (lambda: (_t((MAX_ROWS, 64)), _t((32, 64)), {}), None, None),
    (lambda: (_t((4, 60)), _t((32, 60)), {}), r"positive multiple of 8 \(16-byte vectors\), got 60", ValueError),
    (lambda: (_t((4, 64), torch.float32), _t((32, 64), torch.float32), {}),
     r"x must have dtype in \(float16, bfloat16\), got torch.float32", TypeError),
    (lambda: (_t((4, 64)), _t((32, 64), torch.float16), {}), "weight has dtype torch.float16", TypeError),
    (lambda: (_t((4, 64)), _t((32, 72)), {}), r"weight must be \[n, 64\]", ValueError),
    (lambda: (_t((4, 64)), _t((64, 32)).t(), {}), "weight must be contiguous", ValueError),
    (lambda: (_t((64, 4)).t(), _t((32, 64)), {}), "x's last dim must be contiguous", ValueError),
    (lambda: (_t((4, 68))[:, :64], _t((32, 64)), {}), r"x's row stride \(68\) must be a multiple of 8", ValueError),
    (lambda: (_t((4, 72))[:, :64], _t((32, 64)), {}), None, None),  # strided rows are fine
    (lambda: (_t((4, 64)), _t((31, 64)), {"activation": "swiglu"}), "an even count", ValueError),
    (lambda: (_t((4, 64)), _t((32, 64)), {"activation": "gelu"}), "activation must be", ValueError),
    (lambda: (_t((4, 64)), _t((32, 64)), {"norm_weight": _t(32)}), r"norm_weight must have shape \(64,\)",
     ValueError),
    (lambda: (_t((4, 64)), _t((32, 64)), {"norm_weight": _t(64), "eps": -1.0}), "eps must be a non-negative",
     ValueError),
    (lambda: (_t((4, 64)), _t((32, 64)), {"residual": _t((4, 16))}), r"residual must have shape \(4, 32\)",
     ValueError),
    (lambda: (_t((4, 64)), _t((32, 64)), {"activation": "swiglu", "residual": _t((4, 32))}),
     r"residual must have shape \(4, 16\)", ValueError),
]


@pytest.mark.parametrize("dev", CHECK_DEVICES)
@pytest.mark.parametrize("make, match, exc", BAD_INPUTS)
def test_bad_inputs(dev, make, match, exc):
    x, w, kw = make()
    x, w = on_device(x, dev), on_device(w, dev)
    kw = {name: on_device(v, dev) for name, v in kw.items()}
    if match is None:
        cute_ops.gemv(x, w, **kw)
        return
    with pytest.raises(exc, match=match):
        cute_ops.gemv(x, w, **kw)


def test_cpu_tensors_rejected():
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
        torch.ops.cute_ops.gemv(torch.randn(2, 64), torch.randn(16, 64), None, 1e-6, None, "none")


# ---------------------------------------------------------------- GPU: the kernel
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 5, 8])
@pytest.mark.parametrize("k, n", SHAPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_reference(dtype, m, k, n, variant):
    x, weight, kw = _inputs(m, k, n, dtype, variant)
    cols = n
    poison_allocator(m * cols * x.element_size())
    out = cute_ops.gemv(x, weight, **kw)
    assert out.shape == (m, cols) and out.dtype == dtype
    _check(out, x, weight, kw)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["plain", "norm_swiglu", "norm_residual"])
def test_rows_are_independent(variant):
    """Each row of a batched call is bit-identical to the call with that row alone (the decode
    loop's batched and single-sequence generations agree)."""
    x, weight, kw = _inputs(7, *STREAM_K_SHAPE, torch.bfloat16, variant)
    out = cute_ops.gemv(x, weight, **kw)
    for i in range(7):
        row_kw = dict(kw, residual=kw["residual"][i:i + 1]) if "residual" in kw else kw
        assert torch.equal(out[i:i + 1], cute_ops.gemv(x[i:i + 1], weight, **row_kw)), i


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["plain", "norm_swiglu", "norm_residual"])
def test_repeat_calls_are_bit_identical(variant):
    """The same call again gives the same bits: the sums' order is fixed (with stream-K, the CTA
    holding a cut unit's first steps adds the other pieces in CTA order, however late they land)."""
    x, weight, kw = _inputs(3, *STREAM_K_SHAPE, torch.bfloat16, variant)
    first = cute_ops.gemv(x, weight, **kw)
    side, busy = torch.cuda.Stream(), torch.randn(2048, 2048, device="cuda")
    for i in range(8):
        if i % 2:  # a matmul on another stream takes SMs meanwhile: CTAs finish in another order
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                busy @ busy
        assert torch.equal(cute_ops.gemv(x, weight, **kw), first), i
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_stream_k_runs_where_planned():
    """In the default build on a 132-SM device (H100 SXM, H200: 264 CTA slots), the stream-K kernel
    runs for STREAM_K_SHAPE and the 8B's qkv, and the plain kernel for a projection of one wave and
    one of whole waves, so that the tests above test both (a build with CUTE_OPS_GEMV_STREAM_K=0 fails this one)."""
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the shapes' plan is worked out for 132 SMs (H100 SXM, H200)")
    for (k, n), streamed in ((STREAM_K_SHAPE, True), ((4096, 6144), True), ((4104, 1000), False),
                             ((1024, 16896), False)):
        x, weight, kw = _inputs(1, k, n, torch.bfloat16, "norm")
        names = gpu_kernel_names(lambda: cute_ops.gemv(x, weight, **kw))
        if not names:
            pytest.skip("the profiler recorded no kernels here (CUPTI taken by another tool?)")
        assert len(names) == 1 and ("gemv_stream_k_kernel" in names[0]) == streamed, (k, n, names)


@pytest.mark.gpu
def test_strided_rows():
    base = torch.randn(4, 4096 + 64, dtype=torch.bfloat16, device="cuda")
    x = base[:, :4096]
    weight = torch.randn(300, 4096, dtype=torch.bfloat16, device="cuda") * 4096 ** -0.5
    res_base = torch.randn(4, 320, dtype=torch.bfloat16, device="cuda")
    kw = dict(norm_weight=torch.randn(4096, dtype=torch.bfloat16, device="cuda"), residual=res_base[:, :300])
    out = cute_ops.gemv(x, weight, **kw)
    assert torch.equal(out, cute_ops.gemv(x.contiguous(), weight, norm_weight=kw["norm_weight"],
                                          residual=kw["residual"].contiguous()))
    _check(out, x, weight, kw)


@pytest.mark.gpu
def test_empty_batch():
    x = torch.empty(0, 64, dtype=torch.bfloat16, device="cuda")
    assert cute_ops.gemv(x, torch.randn(16, 64, dtype=torch.bfloat16, device="cuda")).shape == (0, 16)


@pytest.mark.gpu
def test_planted_bug_fails_the_check():
    """One step of 128 columns of k left out of one output element (the one it moves most): the
    bound must catch it."""
    x, weight, kw = _inputs(3, 4096, 1000, torch.bfloat16, "plain")
    out = cute_ops.gemv(x, weight, **kw)
    _check(out, x, weight, kw)
    step = x[:, 512:640].float() @ weight[:, 512:640].float().T
    row, col = divmod(step.abs().argmax().item(), step.shape[1])
    bug = out.clone()
    bug[row, col] = (out[row, col].float() - step[row, col]).bfloat16()
    with pytest.raises(AssertionError, match="exceeds"):
        _check(bug, x, weight, kw)


@pytest.mark.gpu
def test_graph_replay_with_new_inputs():
    x, weight, kw = _inputs(5, 4096, 1000, torch.bfloat16, "norm_residual")
    out = {}
    graph = capture_graph(lambda: out.__setitem__("y", cute_ops.gemv(x, weight, **kw)))
    x.copy_(torch.randn_like(x))
    kw["residual"].copy_(torch.randn_like(kw["residual"]))
    graph.replay()
    assert torch.equal(out["y"], cute_ops.gemv(x, weight, **kw))


@pytest.mark.gpu
def test_compiles_fullgraph():
    x, weight, kw = _inputs(2, 1024, 256, torch.bfloat16, "norm_swiglu")

    def step(x):
        return cute_ops.gemv(x, weight, **kw) * 2

    compiled = torch.compile(step, fullgraph=True)
    assert torch.equal(compiled(x), step(x))


@pytest.mark.gpu
def test_on_the_current_stream():
    """The op runs on the caller's stream: on a side stream, behind a sleep and a write of x, it
    must see the new x (launched on any other stream, it would read x before the write)."""
    x, weight, _ = _inputs(3, 4096, 2048, torch.bfloat16, "plain")
    new_x = torch.randn_like(x)
    torch.cuda._sleep(1)  # loads the sleep kernel
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)  # ~25 ms at 2 GHz
        x.copy_(new_x)
        out = cute_ops.gemv(x, weight)
    torch.cuda.synchronize()
    assert torch.equal(out, cute_ops.gemv(new_x, weight))
