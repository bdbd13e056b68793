"""rms_norm and fused_add_rms_norm: reference, fake impls and input checks everywhere; kernels
against a float64 reference on the GPU."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses import FakeTensorMode

import cute_ops
from cute_ops import reference as ref
from conftest import CHECK_DEVICES, assert_close_to_reference, capture_graph, poison_allocator

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# Ours: float32 statistics and one rounding of the output. The bound is k times PyTorch's error on
# the same math in the working dtype (conftest.assert_close_to_reference); for float32 inputs both
# are float32 and ours uses the fast reciprocal square root, a few ulps from PyTorch's.
K_NORM = {torch.float16: 2.0, torch.bfloat16: 2.0, torch.float32: 8.0}


def _check_norm(out, x, w, eps, what="out"):
    """out = rms_norm(x, w, eps) against float64, bounded by PyTorch's own error in x's dtype."""
    expected = ref.rms_norm(x.double(), w.double(), eps)
    lowp = ref.rms_norm(x, w, eps, upcast=False)
    assert_close_to_reference(out, expected, lowp, k=K_NORM[x.dtype], what=what)


# ---------------------------------------------------------------- CPU: reference, fakes, checks
def test_reference_has_unit_rms():
    x = torch.randn(5, 96, dtype=torch.float64) * 3 + 1
    out = ref.rms_norm(x, torch.ones(96, dtype=torch.float64), eps=0.0)
    torch.testing.assert_close(out.pow(2).mean(-1), torch.ones(5, dtype=torch.float64))


def test_reference_fused_add_rounds_residual_first():
    x = torch.randn(3, 64).bfloat16()
    res = torch.randn(3, 64).bfloat16()
    w = torch.randn(64).bfloat16()
    out, new_res = ref.fused_add_rms_norm(x, res, w)
    assert torch.equal(new_res, (res.float() + x.float()).bfloat16())
    assert torch.equal(out, ref.rms_norm(new_res, w))


@pytest.mark.parametrize("shape", [(7, 64), (2, 3, 4096), (4096,)])
def test_fake_impl_shapes(shape):
    with FakeTensorMode():
        x = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(shape[-1], dtype=torch.bfloat16, device="cuda")
        out = torch.ops.cute_ops.rms_norm(x, w, 1e-6)
        assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
        res = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
        out2 = torch.ops.cute_ops.fused_add_rms_norm(x, res, w, 1e-6)
        assert out2.shape == x.shape and out2.dtype == x.dtype


def test_meta_tensors_infer_shape():
    x = torch.empty(3, 5, 128, dtype=torch.float16, device="meta")
    w = torch.empty(128, dtype=torch.float16, device="meta")
    assert torch.ops.cute_ops.rms_norm(x, w, 1e-5).shape == (3, 5, 128)


def _t(shape, dtype, dev):
    return torch.empty(shape, dtype=dtype, device=dev)


@pytest.mark.parametrize("dev", CHECK_DEVICES)
@pytest.mark.parametrize("make, match, exc", [
    (lambda dev: (torch.randn(4, 64), torch.randn(64)), "x must be a CUDA tensor, got device cpu", ValueError),
    (lambda dev: (_t((4, 60), torch.bfloat16, dev), _t(60, torch.bfloat16, dev)), "multiple of 8 for torch.bfloat16",
     ValueError),
    (lambda dev: (_t((4, 64), torch.bfloat16, dev), _t(64, torch.float16, dev)),
     "weight has dtype torch.float16, expected torch.bfloat16 like x", TypeError),
    (lambda dev: (_t((4, 64), torch.bfloat16, dev), _t(32, torch.bfloat16, dev)),
     r"weight must have shape \(64,\), got \(32,\)", ValueError),
    (lambda dev: (_t((4, 64), torch.int32, dev), _t(64, torch.int32, dev)),
     r"x must have dtype in \(float16, bfloat16, float32\), got torch.int32", TypeError),
    (lambda dev: (_t((64, 4), torch.bfloat16, dev).t(), _t(64, torch.bfloat16, dev)), "last dim must be contiguous",
     ValueError),
    (lambda dev: (_t((4, 72), torch.bfloat16, dev)[:, :64], _t(64, torch.bfloat16, dev)), None, None),  # strided rows
    (lambda dev: (_t((4, 68), torch.bfloat16, dev)[:, :64], _t(64, torch.bfloat16, dev)),
     r"x's row stride \(68\) must be a multiple of 8", ValueError),
    (lambda dev: (_t((2, 4, 64), torch.bfloat16, dev).transpose(0, 1), _t(64, torch.bfloat16, dev)),
     "x's leading dims must be viewable as one dim", ValueError),
    (lambda dev: (_t((4, 64), torch.bfloat16, dev), _t(128, torch.bfloat16, dev)[::2]),
     "weight must be contiguous", ValueError),
])
def test_input_checks(make, match, exc, dev):
    x, w = make(dev)
    if exc is None:
        assert cute_ops.rms_norm(x, w).shape == x.shape
        return
    with pytest.raises(exc, match=match):
        cute_ops.rms_norm(x, w)
    with pytest.raises(exc, match=match):  # the op itself, as torch.compile calls it
        torch.ops.cute_ops.rms_norm(x, w, 1e-6)


@pytest.mark.parametrize("dev", CHECK_DEVICES)
def test_eps_and_residual_checks(dev):
    x, w = _t((4, 64), torch.bfloat16, dev), _t(64, torch.bfloat16, dev)
    with pytest.raises(ValueError, match="eps must be a non-negative float, got -1"):
        cute_ops.rms_norm(x, w, -1.0)
    with pytest.raises(ValueError, match="residual and x must be different tensors"):
        cute_ops.fused_add_rms_norm(x, x, w)
    with pytest.raises(ValueError, match=r"residual must have shape \(4, 64\), got \(2, 64\)"):
        cute_ops.fused_add_rms_norm(x, _t((2, 64), torch.bfloat16, dev), w)


def test_opcheck_on_meta_tensors():
    # Schema, the C++ Meta impl (fake tensors) and tracing with dynamic shapes, on the CPU.
    x, w = _t((3, 5, 128), torch.bfloat16, "meta"), _t(128, torch.bfloat16, "meta")
    torch.library.opcheck(torch.ops.cute_ops.rms_norm.default, (x, w, 1e-6))
    torch.library.opcheck(torch.ops.cute_ops.fused_add_rms_norm.default, (x, x.clone(), w, 1e-6))


@pytest.mark.skipif(cute_ops.cuda_kernels_available(), reason="this build has the CUDA kernels")
def test_missing_kernels_named_clearly():
    with FakeTensorMode():
        x = torch.empty(4, 64, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(64, dtype=torch.bfloat16, device="cuda")
        with pytest.raises(RuntimeError, match="built without CUDA kernels|could not be imported"):
            cute_ops.rms_norm(x, w)


# ---------------------------------------------------------------- GPU: kernels
ROWS = [1, 17, 1000, 4097]
HIDDEN = [8, 136, 1000, 4096, 5120, 14336]


def _inputs(rows, hidden, dtype, scale=1.0):
    x = (torch.randn(rows, hidden, device="cuda") * scale + 0.5).to(dtype)
    w = (torch.rand(hidden, device="cuda") + 0.5).to(dtype)
    return x, w


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("hidden", HIDDEN)
def test_rms_norm_matches_reference(rows, hidden, dtype):
    x, w = _inputs(rows, hidden, dtype, scale=3.0)
    poison_allocator(x.numel() * x.element_size())
    out = cute_ops.rms_norm(x, w, 1e-5)
    assert not out.isnan().any(), "unwritten (poisoned) output elements"
    _check_norm(out, x, w, 1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("hidden", [16384, 32768, 32776, 65536])
def test_rms_norm_long_rows(hidden, dtype):
    # Rows over 32768 (16-bit) or 16384 (fp32) elements take the two-pass kernel.
    x, w = _inputs(3, hidden, dtype)
    out = cute_ops.rms_norm(x, w, 1e-6)
    _check_norm(out, x, w, 1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_strided_and_3d(dtype):
    wide = torch.randn(2, 33, 4096 + 64, device="cuda").to(dtype)
    x = wide[..., :4096]  # rows 4160 elements apart
    w = torch.randn(4096, device="cuda").to(dtype)
    out = cute_ops.rms_norm(x, w)
    assert out.shape == x.shape and out.is_contiguous()
    _check_norm(out, x, w, 1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, hidden", [(1, 8), (17, 1000), (4097, 4096), (5, 131072)])
def test_fused_add_rms_norm_matches_reference(rows, hidden, dtype):
    x, w = _inputs(rows, hidden, dtype)
    residual = torch.randn(rows, hidden, device="cuda").to(dtype)
    _, expected_res = ref.fused_add_rms_norm(x, residual.clone(), w, 1e-6)
    poison_allocator(x.numel() * x.element_size())
    out = cute_ops.fused_add_rms_norm(x, residual, w, 1e-6)
    assert torch.equal(residual, expected_res), "residual must hold the rounded sum"
    _check_norm(out, expected_res, w, 1e-6)


@pytest.mark.gpu
def test_misaligned_view_is_rejected():
    x = torch.randn(4, 4096 + 8, device="cuda", dtype=torch.bfloat16)[:, 1:4097]  # 2-byte offset
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="x's data pointer must be 16-byte aligned"):
        cute_ops.rms_norm(x, w)


@pytest.mark.gpu
def test_opcheck():
    x, w = _inputs(33, 256, torch.bfloat16)
    torch.library.opcheck(torch.ops.cute_ops.rms_norm.default, (x, w, 1e-6))
    residual = torch.randn_like(x)
    torch.library.opcheck(torch.ops.cute_ops.fused_add_rms_norm.default, (x, residual, w, 1e-6))


@pytest.mark.gpu
def test_torch_compile_fullgraph():
    def block(x, residual, w):
        h = cute_ops.fused_add_rms_norm(x, residual, w)
        return cute_ops.rms_norm(h * 2, w)

    x, w = _inputs(64, 512, torch.bfloat16)
    residual = torch.randn_like(x)
    residual_eager = residual.clone()
    compiled = torch.compile(block, fullgraph=True)
    out = compiled(x, residual, w)
    expected = block(x, residual_eager, w)
    assert torch.equal(residual, residual_eager)
    torch.testing.assert_close(out, expected)


@pytest.mark.gpu
def test_cuda_graph_replay_with_new_inputs():
    x, w = _inputs(100, 4096, torch.bfloat16)
    residual = torch.randn_like(x)
    outs = []
    graph = capture_graph(lambda: outs.append(cute_ops.fused_add_rms_norm(x, residual, w)))
    out = outs[-1]  # the tensor the graph writes on every replay
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        start = torch.randn_like(residual)
        residual.copy_(start)
        graph.replay()
        exp_out, exp_res = ref.fused_add_rms_norm(x, start, w)
        assert torch.equal(residual, exp_res)
        _check_norm(out, exp_res, w, 1e-6)


@pytest.mark.gpu
def test_planted_bug_fails_the_comparison():
    # A kernel that left the largest element of a row out of its sum of squares must not pass: our
    # correct output, checked against references that drop it, fails.
    x, w = _inputs(17, 136, torch.float16, scale=3.0)
    out = cute_ops.rms_norm(x, w, 1e-6)
    _check_norm(out, x, w, 1e-6)
    j = x[3].abs().argmax()

    def dropped(x, w, eps, upcast=True):  # the statistics without x[3, j]
        acc = torch.promote_types(x.dtype, torch.float32) if upcast else x.dtype
        xf = x.to(acc)
        sq = xf.pow(2)
        sq[3, j] = 0
        return (xf * torch.rsqrt(sq.mean(-1, keepdim=True) + eps) * w.to(acc)).to(x.dtype)

    with pytest.raises(AssertionError, match="exceeds"):
        assert_close_to_reference(out, dropped(x.double(), w.double(), 1e-6), dropped(x, w, 1e-6, upcast=False),
                                  k=K_NORM[x.dtype])
