"""flash_fwd and flash_fwd_varlen: reference, fake impls, input checks and the backward guard
everywhere; kernels against a float64 reference on the GPU."""
from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses import FakeTensorMode

import cute_ops
from cute_ops import reference as ref
from conftest import (CHECK_DEVICES, assert_close_to_reference, capture_graph, gpu_kernel_names, on_device,
                      poison_allocator)

DTYPES = [torch.float16, torch.bfloat16]
HEAD_DIMS = [64, 96, 128, 256]
# out: at most K_OUT times PyTorch's own error on the same attention in the working dtype (scores,
# softmax and P @ V each rounded), both measured against float64 (conftest.assert_close_to_reference).
# The kernel rounds P once and the output once, with float32 scores and sums.
K_OUT = 2.0
# lse sees no 16-bit rounding past the inputs: float32 scores, row maxima and sums.
LSE_TOL = dict(atol=1e-3, rtol=1e-4)
# Every GPU test runs once per kernel kind (the kernel_arch fixture below).
KERNEL_ARCHS = ["sm80", "sm90"]


def pytest_generate_tests(metafunc):
    if metafunc.definition.get_closest_marker("gpu"):
        metafunc.parametrize("kernel_arch", KERNEL_ARCHS, indirect=True)


@pytest.fixture(autouse=True)
def kernel_arch(request, monkeypatch):
    """The kernel kind of a GPU test: cute_ops.flash_fwd and flash_fwd_varlen (and the flash-attn
    style functions over them) run with `arch` forced to it. The sm90 kind skips, saying why, on a
    GPU that is not compute capability 9.x, and at a call of a head dim outside SM90_HEAD_DIMS (none
    today); a call the checks refuse anyway (a bad head dim) still reaches them. Tests that call
    torch.ops.cute_ops directly run the op's automatic choice. CPU tests are not parametrized
    (None)."""
    arch = getattr(request, "param", None)
    if arch is None:
        return None
    major, minor = torch.cuda.get_device_capability()
    if arch == "sm90" and major != 9:
        pytest.skip(f"the sm90 flash_fwd kernel runs on compute capability 9.x only; this GPU is {major}.{minor}")
    module = sys.modules["cute_ops.flash"]

    def forced(original):
        def call(q, *args, **kwargs):
            d = q.shape[-1]
            if arch == "sm90" and d in module.HEAD_DIMS and d not in module.SM90_HEAD_DIMS:
                pytest.skip(f"no sm90 flash_fwd kernel for head dim {d} yet (it has {module.SM90_HEAD_DIMS})")
            return original(q, *args, **{**kwargs, "arch": arch})
        return call
    for name in ("flash_fwd", "flash_fwd_varlen"):
        call = forced(getattr(module, name))
        for target in (module, cute_ops):
            monkeypatch.setattr(target, name, call)
    return arch


def _heads_first(q, k, v):
    """flash_fwd's [B, S, H, D] tensors in SDPA's [B, H, S, D] layout, kv heads repeated for GQA."""
    group = q.shape[2] // k.shape[2]
    return (q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(group, dim=1),
            v.transpose(1, 2).repeat_interleave(group, dim=1))


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


def _cu_seqlens(lengths: list[int], device="cpu") -> torch.Tensor:
    return torch.tensor([0, *lengths]).cumsum(0).to(device=device, dtype=torch.int32)


# ---------------------------------------------------------------- CPU: reference
@pytest.mark.parametrize("seqlen_q, seqlen_k, causal", [
    (16, 16, False), (5, 23, False), (23, 5, False), (1, 9, False), (16, 16, True), (37, 37, True),
])
@pytest.mark.parametrize("softmax_scale", [None, 0.3])
def test_reference_matches_sdpa(seqlen_q, seqlen_k, causal, softmax_scale):
    q = torch.randn(2, seqlen_q, 8, 64, dtype=torch.float64)
    k = torch.randn(2, seqlen_k, 2, 64, dtype=torch.float64)
    v = torch.randn(2, seqlen_k, 2, 64, dtype=torch.float64)
    out, lse = ref.attention(q, k, v, softmax_scale, causal)
    qt, kt, vt = _heads_first(q, k, v)
    # SDPA's causal mask is aligned top-left, the same as bottom-right only when seqlen_q == seqlen_k.
    expected = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=softmax_scale)
    torch.testing.assert_close(out, expected.transpose(1, 2))
    # PyTorch's CPU flash kernel also returns the log-sum-exp, [B, H, Sq] like ours.
    _, expected_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        qt, kt, vt, 0.0, causal, scale=softmax_scale)
    torch.testing.assert_close(lse, expected_lse)


# The two examples of flash-attn's README (2.1 and later): which keys each query sees.
@pytest.mark.parametrize("seqlen_q, seqlen_k, visible", [
    (2, 5, [[0, 1, 2, 3], [0, 1, 2, 3, 4]]),
    (5, 2, [[], [], [], [0], [0, 1]]),
])
def test_reference_causal_is_bottom_right(seqlen_q, seqlen_k, visible):
    q = torch.randn(1, seqlen_q, 1, 64, dtype=torch.float64)
    k = torch.randn(1, seqlen_k, 1, 64, dtype=torch.float64)
    v = torch.randn(1, seqlen_k, 1, 64, dtype=torch.float64)
    out, lse = ref.attention(q, k, v, causal=True)
    assert not out.isnan().any() and not lse.isnan().any()
    for i, keys in enumerate(visible):
        if not keys:  # sees no key: out 0, lse -inf
            assert torch.equal(out[0, i, 0], torch.zeros(64, dtype=torch.float64))
            assert lse[0, 0, i].item() == -math.inf
            continue
        scores = [(q[0, i, 0] @ k[0, j, 0]).item() / 8 for j in keys]
        row_lse = math.log(sum(math.exp(s) for s in scores))
        row_out = sum(math.exp(s - row_lse) * v[0, j, 0] for s, j in zip(scores, keys))
        assert math.isclose(lse[0, 0, i].item(), row_lse, rel_tol=1e-12)
        torch.testing.assert_close(out[0, i, 0], row_out)


def test_reference_keeps_dtype_and_computes_in_float32():
    q, k, v = (torch.randn(1, 7, 2, 64).bfloat16() for _ in range(3))
    out, lse = ref.attention(q, k, v)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    expected, expected_lse = ref.attention(q.double(), k.double(), v.double())
    torch.testing.assert_close(out, expected.bfloat16())
    torch.testing.assert_close(lse.double(), expected_lse)


def test_reference_varlen_is_per_sequence():
    lengths_q, lengths_k = [3, 1, 6, 2, 0], [4, 5, 1, 0, 3]
    q = torch.randn(sum(lengths_q), 4, 64, dtype=torch.float64)
    k = torch.randn(sum(lengths_k), 2, 64, dtype=torch.float64)
    v = torch.randn(sum(lengths_k), 2, 64, dtype=torch.float64)
    cu_q, cu_k = _cu_seqlens(lengths_q), _cu_seqlens(lengths_k)
    out, lse = ref.attention_varlen(q, k, v, cu_q, cu_k, causal=True)
    assert out.shape == q.shape and lse.shape == (4, q.shape[0])
    for b in range(len(lengths_q)):
        rows_q = slice(cu_q[b].item(), cu_q[b + 1].item())
        rows_k = slice(cu_k[b].item(), cu_k[b + 1].item())
        expected, expected_lse = ref.attention(q[None, rows_q], k[None, rows_k], v[None, rows_k], causal=True)
        torch.testing.assert_close(out[rows_q], expected[0])
        torch.testing.assert_close(lse[:, rows_q], expected_lse[0])
    # The third sequence has 6 queries and 1 key: its first 5 queries see nothing; the fourth has no keys.
    assert (lse[:, 4:9] == -math.inf).all() and (out[4:9] == 0).all()
    assert (lse[:, 10:] == -math.inf).all() and (out[10:] == 0).all()


# ---------------------------------------------------------------- CPU: fake impls
def _assert_outputs_like(out, lse, q, lse_shape):
    assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
    assert lse.shape == lse_shape and lse.dtype == torch.float32 and lse.is_contiguous()


@pytest.mark.parametrize("dtype", DTYPES)
def test_fake_impl_shapes(dtype):
    with FakeTensorMode():
        qkv = torch.empty(3, 100, 3, 8, 128, dtype=dtype, device="cuda")  # a fused projection's output
        q, k, v = qkv.unbind(2)
        out, lse = torch.ops.cute_ops.flash_fwd(q, k, v, causal=True)
        _assert_outputs_like(out, lse, q, (3, 8, 100))
        k, v = (torch.empty(3, 7, 2, 128, dtype=dtype, device="cuda") for _ in range(2))
        out, lse = torch.ops.cute_ops.flash_fwd(q, k, v, softmax_scale=0.1)
        _assert_outputs_like(out, lse, q, (3, 8, 100))

        q = torch.empty(50, 8, 64, dtype=dtype, device="cuda")
        k, v = (torch.empty(70, 1, 64, dtype=dtype, device="cuda") for _ in range(2))
        cu = torch.empty(5, dtype=torch.int32, device="cuda")
        out, lse = torch.ops.cute_ops.flash_fwd_varlen(q, k, v, cu, cu, 20, 30, causal=True)
        _assert_outputs_like(out, lse, q, (8, 50))


def test_meta_tensors_infer_shape():
    q = torch.empty(2, 9, 4, 96, dtype=torch.bfloat16, device="meta")
    k = torch.empty(2, 11, 2, 96, dtype=torch.bfloat16, device="meta")
    out, lse = torch.ops.cute_ops.flash_fwd(q, k, k)
    _assert_outputs_like(out, lse, q, (2, 4, 9))
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    out, lse = torch.ops.cute_ops.flash_fwd_varlen(q[0], k[0], k[0], cu, cu, 9, 11)
    _assert_outputs_like(out, lse, q[0], (4, 9))


def test_fake_impl_checks_inputs():
    q = torch.empty(2, 9, 6, 64, dtype=torch.float16, device="meta")
    k = torch.empty(2, 9, 4, 64, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match="must be a positive multiple"):
        torch.ops.cute_ops.flash_fwd(q, k, k)


def test_opcheck_on_meta_tensors():
    # Schema, fake impl and tracing; the GPU test runs the same checks against the kernels.
    q = _meta(2, 33, 4, 64)
    k = _meta(2, 47, 2, 64)
    torch.library.opcheck(torch.ops.cute_ops.flash_fwd.default, (q, k, k),
                          {"softmax_scale": 0.2, "causal": True})
    cu = _meta(3, dtype=torch.int32)
    torch.library.opcheck(torch.ops.cute_ops.flash_fwd_varlen.default,
                          (q.flatten(0, 1), k.flatten(0, 1), k.flatten(0, 1), cu, cu, 33, 47), {"causal": True})


# ---------------------------------------------------------------- CPU: input checks
def _batched(q_shape=(2, 5, 4, 64), kv_shape=(2, 7, 2, 64), q=None, k=None, v=None, **options):
    """(q, k, v, options) of a valid flash_fwd call, with overrides."""
    return (_meta(*q_shape) if q is None else q, _meta(*kv_shape) if k is None else k,
            _meta(*kv_shape) if v is None else v, options)


@pytest.mark.parametrize("make, match, exc", [
    (lambda: _batched(q=torch.empty(2, 5, 4, 64)), "q must be a CUDA tensor, got device cpu", ValueError),
    (lambda: _batched(q=_meta(2, 5, 4, 64, dtype=torch.float32)),
     r"q must have dtype in \(float16, bfloat16\), got torch.float32", TypeError),
    (lambda: _batched(k=_meta(2, 7, 2, 64, dtype=torch.float16)),
     "k has dtype torch.float16, expected torch.bfloat16 like q", TypeError),
    (lambda: _batched(q_shape=(5, 4, 64)),
     r"q must be \[batch, seqlen_q, heads_q, head_dim\], got shape \(5, 4, 64\)", ValueError),
    (lambda: _batched(kv_shape=(7, 2, 64)),
     r"k must be \[batch, seqlen_k, heads_kv, head_dim\], got shape \(7, 2, 64\)", ValueError),
    (lambda: _batched(q_shape=(2, 5, 4, 80), kv_shape=(2, 7, 2, 80)),
     r"head_dim \(last dim of q\) must be one of \(64, 96, 128, 256\), got 80", ValueError),
    (lambda: _batched(kv_shape=(2, 7, 2, 128)), r"k must have q's head_dim \(64\) as its last dim", ValueError),
    (lambda: _batched(v=_meta(2, 6, 2, 64)), r"v must have k's shape \(2, 7, 2, 64\), got \(2, 6, 2, 64\)",
     ValueError),
    (lambda: _batched(kv_shape=(3, 7, 2, 64)), r"k and v must have q's batch size \(2\)", ValueError),
    (lambda: _batched(q_shape=(2, 5, 6, 64), kv_shape=(2, 7, 4, 64)),
     r"q's head count \(6\) must be a positive multiple of k and v's \(4\)", ValueError),
    (lambda: _batched(q_shape=(2, 5, 2, 64), kv_shape=(2, 7, 4, 64)),
     r"q's head count \(2\) must be a positive multiple of k and v's \(4\)", ValueError),
    (lambda: _batched(kv_shape=(2, 0, 2, 64)), r"at least one key \(seqlen_k >= 1\)", ValueError),
    (lambda: _batched(q=_meta(2, 5, 64, 4).transpose(-1, -2)), "q's last dim must be contiguous", ValueError),
    (lambda: _batched(v=_meta(2, 7, 2, 68)[..., :64]),
     r"v's strides \(all but the last\) must be multiples of 8 elements", ValueError),
    (lambda: _batched(softmax_scale=float("nan")), "softmax_scale must be a finite float", ValueError),
    (lambda: _batched(arch="sm70"), r"flash_fwd: arch must be one of \('auto', 'sm80', 'sm90'\), got 'sm70'", ValueError),
    # Types of the options are the schema's: a string is refused by the dispatcher.
    (lambda: _batched(softmax_scale="0.1"), "Expected a value of type 'Optional\\[float\\]' for argument 'softmax_scale'",
     RuntimeError),
])
@pytest.mark.parametrize("dev", CHECK_DEVICES)
def test_input_checks(make, match, exc, dev):
    q, k, v, options = make()
    q, k, v = (on_device(t, dev) for t in (q, k, v))
    with pytest.raises(exc, match=match):
        cute_ops.flash_fwd(q, k, v, **options)


def test_empty_queries_give_empty_outputs():
    k = _meta(2, 7, 2, 64)
    for q in (_meta(2, 0, 4, 64), _meta(0, 5, 4, 64)):
        out, lse = torch.ops.cute_ops.flash_fwd(q, k[: q.shape[0]], k[: q.shape[0]])
        _assert_outputs_like(out, lse, q, (q.shape[0], 4, q.shape[1]))
    cu = _meta(3, dtype=torch.int32)
    out, lse = torch.ops.cute_ops.flash_fwd_varlen(_meta(0, 4, 64), k[0], k[0], cu, cu, 1, 7)
    _assert_outputs_like(out, lse, _meta(0, 4, 64), (4, 0))


def test_devices_must_match():
    # Under fake tensors PyTorch refuses mixed devices before the op's Meta impl runs; on real
    # tensors (two GPUs) the op's own check names the argument. Either is an error, never a launch.
    if torch.cuda.is_available() and torch.cuda.device_count() < 2:
        pytest.skip("a fake cuda:1 tensor needs a second GPU where CUDA is initialised")
    # (PyTorch 2.11's fake-tensor refusal: "... found two different devices cuda:0, cuda:1".)
    mismatch = r"k is on cuda:1 but q is on cuda:0|same device|two different devices|cu_seqlens_q is on cuda:1"
    with FakeTensorMode():
        q = torch.empty(2, 5, 4, 64, dtype=torch.bfloat16, device="cuda:0")
        k = torch.empty(2, 7, 2, 64, dtype=torch.bfloat16, device="cuda:1")
        with pytest.raises((ValueError, RuntimeError), match=mismatch):
            torch.ops.cute_ops.flash_fwd(q, k, k)
        q = torch.empty(5, 4, 64, dtype=torch.bfloat16, device="cuda:0")
        k = torch.empty(7, 2, 64, dtype=torch.bfloat16, device="cuda:0")
        cu = torch.empty(3, dtype=torch.int32, device="cuda:1")
        with pytest.raises((ValueError, RuntimeError), match=mismatch):
            torch.ops.cute_ops.flash_fwd_varlen(q, k, k, cu, cu, 5, 7)


def _varlen(q_shape=(12, 4, 64), kv_shape=(15, 2, 64), batch=3, softmax_scale=None, causal=False, arch="auto",
            **overrides):
    """(args, options) of a valid flash_fwd_varlen call, with overrides."""
    cu = _meta(batch + 1, dtype=torch.int32)
    args = dict(q=_meta(*q_shape), k=_meta(*kv_shape), v=_meta(*kv_shape), cu_seqlens_q=cu, cu_seqlens_k=cu,
                max_seqlen_q=8, max_seqlen_k=9)
    return args | overrides, dict(softmax_scale=softmax_scale, causal=causal, arch=arch)


@pytest.mark.parametrize("make, match, exc", [
    (lambda: _varlen(q_shape=(2, 6, 4, 64)),
     r"q must be \[total_q, heads_q, head_dim\], got shape \(2, 6, 4, 64\)", ValueError),
    (lambda: _varlen(q_shape=(12, 4, 48), kv_shape=(15, 2, 48)), "head_dim .* got 48", ValueError),
    (lambda: _varlen(q_shape=(12, 3, 64)), r"q's head count \(3\) must be a positive multiple", ValueError),
    (lambda: _varlen(cu_seqlens_q=_meta(4, dtype=torch.int64)),
     r"cu_seqlens_q must have dtype in \(int32\), got torch.int64", TypeError),
    (lambda: _varlen(cu_seqlens_k=_meta(4, 1, dtype=torch.int32)), r"cu_seqlens_k must have 1 dims", ValueError),
    (lambda: _varlen(cu_seqlens_q=torch.zeros(4, dtype=torch.int32)),
     "cu_seqlens_q must be a CUDA tensor, got device cpu", ValueError),
    (lambda: _varlen(batch=0), r"cu_seqlens_q must hold batch \+ 1 >= 2 offsets, got shape \(1,\)", ValueError),
    (lambda: _varlen(cu_seqlens_k=_meta(3, dtype=torch.int32)),
     r"cu_seqlens_k must have cu_seqlens_q's length \(4, one more than the batch size\), got shape \(3,\)",
     ValueError),
    (lambda: _varlen(cu_seqlens_q=_meta(8, dtype=torch.int32)[::2]), "cu_seqlens_q must be contiguous", ValueError),
    (lambda: _varlen(max_seqlen_q=0), "max_seqlen_q must be an int >= 1", ValueError),
    (lambda: _varlen(max_seqlen_k=9.0), "Expected a value of type 'int' for argument 'max_seqlen_k'", RuntimeError),
    (lambda: _varlen(arch="SM90"), r"flash_fwd_varlen: arch must be one of \('auto', 'sm80', 'sm90'\), got 'SM90'",
     ValueError),
])
@pytest.mark.parametrize("dev", CHECK_DEVICES)
def test_varlen_input_checks(make, match, exc, dev):
    args, options = make()
    args = {name: on_device(t, dev) for name, t in args.items()}
    with pytest.raises(exc, match=match):
        cute_ops.flash_fwd_varlen(**args, **options)


@pytest.mark.skipif(cute_ops.cuda_kernels_available("flash_fwd"), reason="this build has the CUDA kernels")
def test_missing_kernels_named_clearly():
    with FakeTensorMode():
        q = torch.empty(1, 4, 2, 64, dtype=torch.bfloat16, device="cuda")
        with pytest.raises(RuntimeError, match="built without CUDA kernels|could not be imported"):
            cute_ops.flash_attn_func(q, q, q)


# ---------------------------------------------------------------- CPU: no backward yet
def test_backward_raises():
    # Meta tensors run the autograd formula on a CPU-only build; the CUDA build runs the same one.
    q = _meta(2, 5, 4, 64).requires_grad_()
    k, v = _meta(2, 7, 2, 64), _meta(2, 7, 2, 64)
    out, lse = torch.ops.cute_ops.flash_fwd(q, k, v)
    assert out.requires_grad and lse.requires_grad
    with pytest.raises(NotImplementedError, match=r"cute_ops.flash_fwd: backward is not implemented yet"):
        out.sum().backward()
    _, lse = torch.ops.cute_ops.flash_fwd(q, k, v, causal=True)
    with pytest.raises(NotImplementedError, match=r"cute_ops.flash_fwd: backward is not implemented yet"):
        lse.sum().backward()

    cu = _meta(3, dtype=torch.int32)
    out, _ = torch.ops.cute_ops.flash_fwd_varlen(q[0], k[0], v[0], cu, cu, 5, 7)
    with pytest.raises(NotImplementedError, match=r"cute_ops.flash_fwd_varlen: backward is not implemented yet"):
        out.sum().backward()


# ---------------------------------------------------------------- GPU: kernels
def _qkv(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype):
    q = torch.randn(batch, seqlen_q, heads_q, head_dim, device="cuda").to(dtype)
    k = torch.randn(batch, seqlen_k, heads_kv, head_dim, device="cuda").to(dtype)
    v = torch.randn(batch, seqlen_k, heads_kv, head_dim, device="cuda").to(dtype)
    return q, k, v


def _assert_matches_reference(q, k, v, out, lse, softmax_scale=None, causal=False):
    batch, seqlen_q, heads_q, _ = q.shape
    _assert_outputs_like(out, lse, q, (batch, heads_q, seqlen_q))
    assert not out.isnan().any() and not lse.isnan().any(), "unwritten (poisoned) output elements"
    expected, expected_lse = ref.attention(q.double(), k.double(), v.double(), softmax_scale, causal)
    lowp, _ = ref.attention(q, k, v, softmax_scale, causal, upcast=False)
    assert_close_to_reference(out, expected, lowp, k=K_OUT)
    torch.testing.assert_close(lse.double(), expected_lse, **LSE_TOL)


def _run_and_check(q, k, v, softmax_scale=None, causal=False):
    batch, seqlen_q, heads_q, _ = q.shape
    poison_allocator(q.numel() * q.element_size(), batch * heads_q * seqlen_q * 4)
    out, lse = cute_ops.flash_fwd(q, k, v, softmax_scale, causal)
    _assert_matches_reference(q, k, v, out, lse, softmax_scale, causal)


# (1, 1000): one query over many keys, as in decoding; (1000, 17) with causal: most queries see no key;
# (160, 240): whole 80-key blocks (head dim 256's non-causal tile on Hopper) and none masked.
SEQLENS = [(1, 1), (17, 17), (127, 127), (1000, 1000), (1, 1000), (1000, 17), (160, 240)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen_q, seqlen_k", SEQLENS)
def test_flash_fwd_matches_reference(seqlen_q, seqlen_k, causal, head_dim, dtype):
    _run_and_check(*_qkv(2, seqlen_q, seqlen_k, 4, 2, head_dim, dtype), causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
# seqlen_k >= 2048 selects the 256-row tile for non-causal head dim 128; 2047 the 128-row one.
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(4097, 4097), (17, 2100), (300, 2047)])
def test_flash_fwd_long_sequences(seqlen_q, seqlen_k, causal, head_dim, dtype):
    _run_and_check(*_qkv(1, seqlen_q, seqlen_k, 2, 2, head_dim, dtype), causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seqlen_q", [1000, 1152])
def test_head_dim_64_causal_takes_either_tile(seqlen_q, dtype):
    # On Hopper, head dim 64's causal calls of 1000 queries run 128-row tiles with five K/V stages
    # (192-row tiles would pad them to 1152), those of 1152 192-row tiles with four
    # (flash_fwd_launch_sm90.h's takes_short_causal_tile): one call of each, with several hundred
    # tiles, so that each persistent CTA carries its pipelines over many of them in either config.
    _run_and_check(*_qkv(3, seqlen_q, seqlen_q + 31, 32, 8, 64, dtype), causal=True)


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_many_tiles_per_cta(causal, head_dim):
    # Several hundred query tiles, more than any GPU has SMs: the sm90 kernel's persistent CTAs
    # each compute many, carrying their pipelines, Q buffers and staged O from tile to tile.
    _run_and_check(*_qkv(3, 1000, 1000, 32, 8, head_dim, torch.bfloat16), causal=causal)


@pytest.mark.gpu
def test_many_tile_calls_in_a_row_on_streams_and_in_a_graph():
    # The sm90 kernel's CTAs take tiles from a counter that each launch leaves at zero for the
    # next one on its stream, eager or captured: a count left over would skip tiles of the next
    # call, whose inputs are new each time so that stale outputs cannot pass.
    q, k, v = _qkv(2, 1000, 1000, 32, 8, 128, torch.bfloat16)
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    for stream, causal in ((main, True), (main, False), (side, True), (side, True), (main, True)):
        for t in (q, k, v):
            t.copy_(torch.randn_like(t))
        stream.wait_stream(main)
        with torch.cuda.stream(stream):
            out, lse = cute_ops.flash_fwd(q, k, v, causal=causal)
        main.wait_stream(stream)
        _assert_matches_reference(q, k, v, out, lse, causal=causal)
    _replay_with_new_inputs(q, k, v, replays=3)


@pytest.mark.gpu
@pytest.mark.parametrize("heads_q", [2, 8, 16])  # GQA ratios 1, 4, 8 over 2 kv heads
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(300, 300), (129, 333)])
def test_grouped_query_attention(seqlen_q, seqlen_k, causal, heads_q):
    _run_and_check(*_qkv(2, seqlen_q, seqlen_k, heads_q, 2, 128, torch.bfloat16), causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("softmax_scale", [0.05, 1.0, 0.0, -0.2])  # 0: uniform weights; < 0: applied to -q
def test_explicit_softmax_scale(softmax_scale, causal):
    _run_and_check(*_qkv(2, 200, 200, 4, 4, 64, torch.float16), softmax_scale=softmax_scale, causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_scores_growing_along_the_keys(causal, dtype):
    # The kernel moves the max it subtracts only when a score exceeds it by 2^8: here the scores
    # grow with the key index (scaled std 0.2 -> 6), so tiles run against a stale max (P up to 256)
    # between rescales, and one late key scores far above all others.
    q, k, v = _qkv(2, 1000, 1000, 4, 2, 128, torch.float32)
    k = k * torch.linspace(0.2, 6.0, 1000, device="cuda")[None, :, None, None]
    k[:, 900] = 3 * q[:, 990, ::2]
    _run_and_check(q.to(dtype), k.to(dtype), v.to(dtype), causal=causal)


def _strided_qkv(layout, batch, seqlen, heads_q, heads_kv, head_dim, dtype):
    if layout == "packed_qkv":  # one fused projection's output, [B, S, 3, H, D]
        q, k, v = torch.randn(batch, seqlen, 3, heads_q, head_dim, device="cuda").to(dtype).unbind(2)
    elif layout == "packed_kv":  # k and v side by side in the last dim, [B, S, Hkv, 2D]
        q = torch.randn(batch, seqlen, heads_q, head_dim, device="cuda").to(dtype)
        kv = torch.randn(batch, seqlen, heads_kv, 2 * head_dim, device="cuda").to(dtype)
        k, v = kv[..., :head_dim], kv[..., head_dim:]
    else:  # heads_first: [B, H, S, D] tensors seen as [B, S, H, D]
        q = torch.randn(batch, heads_q, seqlen, head_dim, device="cuda").to(dtype).transpose(1, 2)
        k, v = (torch.randn(batch, heads_kv, seqlen, head_dim, device="cuda").to(dtype).transpose(1, 2)
                for _ in range(2))
    return q, k, v


@pytest.mark.gpu
@pytest.mark.parametrize("layout, heads_q, heads_kv", [("packed_qkv", 4, 4), ("packed_kv", 8, 2),
                                                       ("heads_first", 8, 2)])
@pytest.mark.parametrize("causal", [False, True])
def test_strided_views(layout, heads_q, heads_kv, causal):
    q, k, v = _strided_qkv(layout, 2, 259, heads_q, heads_kv, 128, torch.bfloat16)
    assert not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous())
    _run_and_check(q, k, v, causal=causal)


def _random_lengths(count: int, high: int) -> list[int]:
    lengths = torch.randint(1, high, (count,))
    lengths[torch.rand(count) < 0.25] = 1  # single-token sequences, as in decoding
    return lengths.tolist()


def _assert_varlen_matches_reference(q, k, v, cu_q, cu_k, out, lse, softmax_scale=None, causal=False):
    assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
    assert lse.shape == (q.shape[1], q.shape[0]) and lse.dtype == torch.float32 and lse.is_contiguous()
    assert not out.isnan().any() and not lse.isnan().any(), "unwritten (poisoned) output elements"
    bounds_q, bounds_k = cu_q.tolist(), cu_k.tolist()
    for b in range(len(bounds_q) - 1):
        rows_q, rows_k = slice(bounds_q[b], bounds_q[b + 1]), slice(bounds_k[b], bounds_k[b + 1])
        expected, expected_lse = ref.attention(q[None, rows_q].double(), k[None, rows_k].double(),
                                               v[None, rows_k].double(), softmax_scale, causal)
        lowp, _ = ref.attention(q[None, rows_q], k[None, rows_k], v[None, rows_k], softmax_scale, causal,
                                upcast=False)
        assert_close_to_reference(out[None, rows_q], expected, lowp, k=K_OUT, what=f"sequence {b}'s out")
        torch.testing.assert_close(lse[:, rows_q].double(), expected_lse[0], **LSE_TOL, msg=f"sequence {b}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_seqs", [1, 7, 64])
def test_varlen_matches_reference(num_seqs, causal, head_dim, dtype):
    lengths_q, lengths_k = _random_lengths(num_seqs, 300), _random_lengths(num_seqs, 300)
    q = torch.randn(sum(lengths_q), 8, head_dim, device="cuda").to(dtype)
    k = torch.randn(sum(lengths_k), 2, head_dim, device="cuda").to(dtype)
    v = torch.randn(sum(lengths_k), 2, head_dim, device="cuda").to(dtype)
    cu_q, cu_k = _cu_seqlens(lengths_q, "cuda"), _cu_seqlens(lengths_k, "cuda")
    poison_allocator(q.numel() * q.element_size(), q.shape[0] * q.shape[1] * 4)
    out, lse = cute_ops.flash_fwd_varlen(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=causal)
    _assert_varlen_matches_reference(q, k, v, cu_q, cu_k, out, lse, causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_long_sequences(causal):
    lengths_q, lengths_k = [2100, 5, 700], [2300, 4000, 1]
    q = torch.randn(sum(lengths_q), 4, 128, device="cuda").to(torch.bfloat16)
    k = torch.randn(sum(lengths_k), 2, 128, device="cuda").to(torch.bfloat16)
    v = torch.randn(sum(lengths_k), 2, 128, device="cuda").to(torch.bfloat16)
    cu_q, cu_k = _cu_seqlens(lengths_q, "cuda"), _cu_seqlens(lengths_k, "cuda")
    poison_allocator(q.numel() * q.element_size(), q.shape[0] * q.shape[1] * 4)
    out, lse = cute_ops.flash_fwd_varlen(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=causal)
    _assert_varlen_matches_reference(q, k, v, cu_q, cu_k, out, lse, causal=causal)


@pytest.mark.gpu
def test_varlen_on_packed_qkv_with_loose_max_seqlen():
    lengths = _random_lengths(9, 200)
    qkv = torch.randn(sum(lengths), 3, 4, 128, device="cuda").to(torch.bfloat16)
    q, k, v = qkv.unbind(1)
    cu = _cu_seqlens(lengths, "cuda")
    # max_seqlen only has to bound the lengths.
    out, lse = cute_ops.flash_fwd_varlen(q, k, v, cu, cu, max(lengths) + 37, 4096, causal=True)
    _assert_varlen_matches_reference(q, k, v, cu, cu, out, lse, causal=True)


@pytest.mark.gpu
def test_varlen_empty_sequences():
    # A sequence without queries writes nothing; one without keys gives out 0 and lse -inf.
    lengths_q, lengths_k = [5, 0, 3, 7, 1], [4, 6, 0, 9, 0]
    q = torch.randn(sum(lengths_q), 4, 64, device="cuda").to(torch.bfloat16)
    k = torch.randn(sum(lengths_k), 4, 64, device="cuda").to(torch.bfloat16)
    v = torch.randn(sum(lengths_k), 4, 64, device="cuda").to(torch.bfloat16)
    cu_q, cu_k = _cu_seqlens(lengths_q, "cuda"), _cu_seqlens(lengths_k, "cuda")
    poison_allocator(q.numel() * q.element_size(), q.shape[0] * q.shape[1] * 4)
    out, lse = cute_ops.flash_fwd_varlen(q, k, v, cu_q, cu_k, 7, 9)
    _assert_varlen_matches_reference(q, k, v, cu_q, cu_k, out, lse)
    # No keys in the whole batch (an empty k): every query gets out 0 and lse -inf.
    no_keys = k[:0]
    out, lse = cute_ops.flash_fwd_varlen(q, no_keys, no_keys, cu_q, torch.zeros_like(cu_k), 7, 1)
    assert torch.equal(out, torch.zeros_like(out)) and bool((lse == -math.inf).all())


@pytest.mark.gpu
def test_empty_batch_and_queries():
    for batch, seqlen_q in ((0, 5), (2, 0)):
        q, k, v = _qkv(batch, seqlen_q, 7, 4, 2, 64, torch.float16)
        out, lse = cute_ops.flash_fwd(q, k, v)
        _assert_outputs_like(out, lse, q, (batch, 4, seqlen_q))


@pytest.mark.gpu
def test_flash_attn_front_door():
    q, k, v = _qkv(2, 65, 80, 8, 2, 128, torch.bfloat16)
    out, lse = cute_ops.flash_fwd(q, k, v, causal=True)
    assert torch.equal(cute_ops.flash_attn_func(q, k, v, causal=True), out)
    out2, lse2 = cute_ops.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert torch.equal(out2, out) and torch.equal(lse2, lse)

    cu_q, cu_k = _cu_seqlens([65, 65], "cuda"), _cu_seqlens([80, 80], "cuda")
    packed = [t.flatten(0, 1) for t in (q, k, v)]
    out_varlen, lse_varlen = cute_ops.flash_attn_varlen_func(*packed, cu_q, cu_k, 65, 80, causal=True,
                                                             return_lse=True)
    assert torch.equal(cute_ops.flash_attn_varlen_func(*packed, cu_q, cu_k, 65, 80, causal=True), out_varlen)
    # Same kernel, same tiles per sequence: the varlen path computes the same values bit for bit.
    assert torch.equal(out_varlen, out.flatten(0, 1))
    torch.testing.assert_close(lse_varlen, lse.transpose(0, 1).flatten(1, 2), **LSE_TOL)


@pytest.mark.gpu
def test_seqlen_k_zero_is_an_error():
    q, k, v = _qkv(2, 5, 0, 4, 2, 64, torch.bfloat16)
    for call in (cute_ops.flash_fwd, torch.ops.cute_ops.flash_fwd):  # the wrapper runs the op's own check
        with pytest.raises(ValueError, match=r"at least one key \(seqlen_k >= 1\)"):
            call(q, k, v)


@pytest.mark.gpu
def test_bad_head_dim_is_an_error():
    q, k, v = _qkv(2, 5, 5, 4, 2, 80, torch.bfloat16)
    for call in (cute_ops.flash_fwd, torch.ops.cute_ops.flash_fwd):
        with pytest.raises(ValueError, match=r"head_dim \(last dim of q\) must be one of \(64, 96, 128, 256\), got 80"):
            call(q, k, v)


@pytest.mark.gpu
def test_misaligned_view_is_rejected():
    # Strides are multiples of 8 elements, but the data starts 8 bytes into a 16-byte vector.
    q = torch.randn(2, 9, 4, 64 + 8, device="cuda", dtype=torch.bfloat16)[..., 4:68]
    k, v = _qkv(2, 9, 9, 4, 4, 64, torch.bfloat16)[1:]
    with pytest.raises(ValueError, match="q's data pointer must be 16-byte aligned"):
        cute_ops.flash_fwd(q, k, v)


@pytest.mark.gpu
def test_backward_raises_on_the_gpu():
    q, k, v = _qkv(1, 16, 16, 2, 2, 64, torch.bfloat16)
    out = cute_ops.flash_attn_func(q.requires_grad_(), k, v)
    with pytest.raises(NotImplementedError, match="backward is not implemented yet"):
        out.sum().backward()


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_opcheck(causal, kernel_arch):
    q, k, v = _qkv(2, 33, 47, 4, 2, 64, torch.bfloat16)
    torch.library.opcheck(torch.ops.cute_ops.flash_fwd.default, (q, k, v),
                          {"softmax_scale": 0.2, "causal": causal, "arch": kernel_arch})
    cu_q, cu_k = _cu_seqlens([33, 33], "cuda"), _cu_seqlens([47, 47], "cuda")
    torch.library.opcheck(torch.ops.cute_ops.flash_fwd_varlen.default,
                          (q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu_q, cu_k, 33, 47),
                          {"causal": causal, "arch": kernel_arch})


@pytest.mark.gpu
def test_torch_compile_fullgraph():
    def attention_block(q, k, v):
        out, lse = cute_ops.flash_attn_func(q * 0.5, k, v, causal=True, return_lse=True)
        return out.float().sum(-1) + lse.transpose(1, 2)

    def varlen_block(q, k, v, cu_q, cu_k):
        return cute_ops.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 40, 40, softmax_scale=0.1).sum(-1)

    q, k, v = _qkv(2, 40, 40, 8, 2, 128, torch.bfloat16)
    torch.testing.assert_close(torch.compile(attention_block, fullgraph=True)(q, k, v),
                               attention_block(q, k, v))
    packed = [t.flatten(0, 1) for t in (q, k, v)]
    cu = _cu_seqlens([40, 40], "cuda")
    torch.testing.assert_close(torch.compile(varlen_block, fullgraph=True)(*packed, cu, cu),
                               varlen_block(*packed, cu, cu))


def _replay_with_new_inputs(q, k, v, replays):
    """A causal call captured in a graph, replayed over new values of q, k and v, each checked."""
    outs = []
    graph = capture_graph(lambda: outs.append(cute_ops.flash_fwd(q, k, v, causal=True)))
    out, lse = outs[-1]  # the tensors the graph writes on every replay
    for _ in range(replays):
        for t in (q, k, v):
            t.copy_(torch.randn_like(t))
        graph.replay()
        _assert_matches_reference(q, k, v, out, lse, causal=True)


@pytest.mark.gpu
def test_cuda_graph_replay_with_new_inputs():
    _replay_with_new_inputs(*_qkv(2, 300, 300, 8, 2, 128, torch.bfloat16), replays=2)


@pytest.mark.gpu
def test_cuda_graph_replay_with_new_sequence_lengths():
    # The offsets are read on the device, so one graph serves any split of the same totals.
    total_q, total_k, num_seqs = 400, 500, 6

    def random_split(total):
        cuts = (torch.randperm(total - 1)[: num_seqs - 1] + 1).sort().values
        return torch.cat([torch.tensor([0]), cuts, torch.tensor([total])]).to(device="cuda", dtype=torch.int32)

    q = torch.randn(total_q, 8, 64, device="cuda").to(torch.float16)
    k = torch.randn(total_k, 2, 64, device="cuda").to(torch.float16)
    v = torch.randn(total_k, 2, 64, device="cuda").to(torch.float16)
    cu_q, cu_k = random_split(total_q), random_split(total_k)
    outs = []
    graph = capture_graph(lambda: outs.append(
        cute_ops.flash_fwd_varlen(q, k, v, cu_q, cu_k, total_q, total_k, causal=True)))
    out, lse = outs[-1]  # the tensors the graph writes on every replay
    for _ in range(2):
        cu_q.copy_(random_split(total_q))
        cu_k.copy_(random_split(total_k))
        q.copy_(torch.randn_like(q))
        graph.replay()
        _assert_varlen_matches_reference(q, k, v, cu_q, cu_k, out, lse, causal=True)


# ---------------------------------------------------------------- GPU: NaN, planted bug
@pytest.mark.gpu
@pytest.mark.parametrize("where, causal", [("k", False), ("k", True), ("v", False)])
def test_nan_in_the_inputs_reaches_the_output(where, causal):
    # A NaN score is not "no keys": the rows that see the NaN key get NaN out and (from K) NaN lse.
    # (A NaN in V under causal masking is left out: the reference's P @ V multiplies masked zeros
    # by it, which the kernel, skipping masked tiles, does not.)
    q, k, v = _qkv(2, 300, 300, 4, 2, 128, torch.bfloat16)
    (k if where == "k" else v)[1, 150, 0, 17] = float("nan")
    out, lse = cute_ops.flash_fwd(q, k, v, causal=causal)
    expected, expected_lse = ref.attention(q.double(), k.double(), v.double(), causal=causal)
    lowp, _ = ref.attention(q, k, v, causal=causal, upcast=False)
    assert expected.isnan().any()
    assert torch.equal(out.isnan(), expected.isnan()), "a NaN in the inputs vanished from (or spread in) the output"
    assert torch.equal(lse.isnan(), expected_lse.isnan())
    keep = ~expected.isnan()
    assert_close_to_reference(out[keep], expected[keep], lowp[keep], k=K_OUT)


@pytest.mark.gpu
def test_planted_bug_fails_the_comparison():
    # A kernel that read one wrong V row must not pass: our correct output, checked against
    # references whose V has key 700 replaced by key 5, fails.
    q, k, v = _qkv(2, 1000, 1000, 4, 2, 128, torch.bfloat16)
    out, _ = cute_ops.flash_fwd(q, k, v, causal=True)
    expected, _ = ref.attention(q.double(), k.double(), v.double(), causal=True)
    assert_close_to_reference(out, expected, ref.attention(q, k, v, causal=True, upcast=False)[0], k=K_OUT)
    wrong = v.clone()
    wrong[:, 700] = v[:, 5]
    bad, _ = ref.attention(q.double(), k.double(), wrong.double(), causal=True)
    bad_lowp, _ = ref.attention(q, k, wrong, causal=True, upcast=False)
    with pytest.raises(AssertionError, match="exceeds"):
        assert_close_to_reference(out, bad, bad_lowp, k=K_OUT)


# ---------------------------------------------------------------- GPU: the kernel kinds
def _only_in(kind, kernel_arch):
    if kernel_arch != kind:
        pytest.skip(f"a test of the {kind} kind: it runs in its {kind} parametrization")


@pytest.mark.gpu
def test_each_kind_launches_its_own_kernel(kernel_arch):
    # The sm90 parametrization must test the sm90 kernel: told apart by the launched kernel's name.
    # "auto" runs the sm90 kernel on 9.x devices (it has head dim 128 and takes these strides).
    q, k, v = _qkv(2, 300, 300, 4, 2, 128, torch.bfloat16)
    names = gpu_kernel_names(lambda: cute_ops.flash_fwd(q, k, v, causal=True))
    if not names:
        pytest.skip("the profiler recorded no kernels here (CUPTI taken by another tool?)")
    assert len(names) == 1 and ("flash_fwd_kernel_sm90" in names[0]) == (kernel_arch == "sm90"), names
    auto = gpu_kernel_names(lambda: torch.ops.cute_ops.flash_fwd(q, k, v, None, True))
    on_hopper = torch.cuda.get_device_capability()[0] == 9
    assert len(auto) == 1 and ("flash_fwd_kernel_sm90" in auto[0]) == on_hopper, auto


@pytest.mark.gpu
def test_sm90_refuses_a_broadcast_operand(kernel_arch):
    _only_in("sm90", kernel_arch)
    op = torch.ops.cute_ops.flash_fwd
    q, k, v = _qkv(2, 40, 40, 4, 2, 128, torch.bfloat16)
    shared_k = k[:1].expand(2, -1, -1, -1)  # one k for the whole batch: batch stride 0
    with pytest.raises(ValueError, match='flash_fwd: arch "sm90" loads q, k, v and out by TMA'):
        op(q, shared_k, v, arch="sm90")
    # The automatic choice takes all three.
    out, lse = op(q, shared_k, v)
    _assert_matches_reference(q, shared_k, v, out, lse)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_sm90_batch_of_one_with_any_batch_stride(causal, kernel_arch):
    # A batch of one may carry any batch stride (here 0): TMA is given a placeholder, never used.
    _only_in("sm90", kernel_arch)
    q, k, v = (t.as_strided(t.shape, (0, *t.stride()[1:])) for t in _qkv(1, 333, 333, 8, 2, 128, torch.float16))
    _run_and_check(q, k, v, causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_sm90_compile(causal, kernel_arch):
    _only_in("sm90", kernel_arch)
    q, k, v = _qkv(2, 33, 47, 4, 2, 128, torch.bfloat16)

    def block(q, k, v):
        out, lse = cute_ops.flash_fwd(q * 0.5, k, v, causal=causal, arch="sm90")
        return out.float().sum(-1) + lse.transpose(1, 2)
    torch.testing.assert_close(torch.compile(block, fullgraph=True)(q, k, v), block(q, k, v))


# ---------------------------------------------------------------- GPU: varlen offsets on the device
def _varlen_problem(lengths_q, lengths_k, heads_q=4, heads_kv=2, dim=64, extra_q=0):
    q = torch.randn(sum(lengths_q) + extra_q, heads_q, dim, device="cuda").to(torch.bfloat16)
    k = torch.randn(sum(lengths_k), heads_kv, dim, device="cuda").to(torch.bfloat16)
    v = torch.randn_like(k)
    return q, k, v, _cu_seqlens(lengths_q, "cuda"), _cu_seqlens(lengths_k, "cuda")


def _check_sequence(q, k, v, cu_q, cu_k, out, lse, b, causal=False):
    rows_q, rows_k = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
    expected, expected_lse = ref.attention(q[None, rows_q].double(), k[None, rows_k].double(),
                                           v[None, rows_k].double(), causal=causal)
    lowp, _ = ref.attention(q[None, rows_q], k[None, rows_k], v[None, rows_k], causal=causal, upcast=False)
    assert_close_to_reference(out[None, rows_q], expected, lowp, k=K_OUT, what=f"sequence {b}'s out")
    torch.testing.assert_close(lse[:, rows_q].double(), expected_lse[0], **LSE_TOL)


# (case, cu_seqlens_q changes, cu_seqlens_k changes, max_seqlen_q, max_seqlen_k, the one bad
# sequence, message) over lengths_q = [5, 50, 30], lengths_k = [7, 60, 40]: cu_seqlens_q = [0, 5,
# 55, 85], cu_seqlens_k = [0, 7, 67, 107].
VARLEN_BAD = [
    ("q_past_total", {3: 125}, {}, 128, 64, 2, r"sequence 2 spans rows 55\.\.125 of q \(cu_seqlens_q\), not within "
     r"0\.\.85 in order"),
    ("k_past_total", {}, {3: 200}, 64, 200, 2, r"sequence 2 spans rows 67\.\.200 of k \(cu_seqlens_k\), not within "
     r"0\.\.107 in order"),
    # cu_k = [0, 7, 3, 107]: sequence 1 spans 7..3; sequence 2 (keys 3..106) is well-formed.
    ("k_decreasing", {}, {2: 3}, 64, 128, 1, r"sequence 1 spans rows 7\.\.3 of k \(cu_seqlens_k\), not within "
     r"0\.\.107 in order"),
    ("q_too_long", {}, {}, 40, 64, 1, r"sequence 1 has 50 queries, more than max_seqlen_q = 40"),
    ("k_too_long", {}, {}, 64, 45, 1, r"sequence 1 has 60 keys, more than max_seqlen_k = 45"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case, dq, dk, max_q, max_k, bad, message", VARLEN_BAD, ids=[c[0] for c in VARLEN_BAD])
def test_varlen_bad_offsets_are_recorded_and_isolated(case, dq, dk, max_q, max_k, bad, message, causal):
    q, k, v, cu_q, cu_k = _varlen_problem([5, 50, 30], [7, 60, 40])
    for i, value in dq.items():
        cu_q[i] = value
    for i, value in dk.items():
        cu_k[i] = value
    poison_allocator(q.numel() * q.element_size(), q.shape[0] * q.shape[1] * 4)
    out, lse = cute_ops.flash_fwd_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal)
    with pytest.raises(cute_ops.DeviceDataError, match=rf"cute_ops\.flash_fwd_varlen on cuda:\d+: {message}") as info:
        cute_ops.check_errors()
    assert info.value.error.sequence == bad
    lo, hi = int(cu_q[bad]), min(int(cu_q[bad + 1]), q.shape[0])
    assert out[lo:hi].isnan().all() and lse[:, lo:hi].isnan().all(), "the bad sequence's rows must be NaN"
    for b in range(3):
        if b != bad:
            _check_sequence(q, k, v, cu_q, cu_k, out, lse, b, causal)
    # The process goes on: the same call with good offsets is right and reports nothing.
    q, k, v, cu_q, cu_k = _varlen_problem([5, 50, 30], [7, 60, 40])
    out, lse = cute_ops.flash_fwd_varlen(q, k, v, cu_q, cu_k, 64, 64, causal=causal)
    _assert_varlen_matches_reference(q, k, v, cu_q, cu_k, out, lse, causal=causal)
    cute_ops.check_errors()


@pytest.mark.gpu
def test_varlen_rows_outside_every_sequence_are_written():
    # A fixed-size buffer (as a CUDA graph needs) holding fewer tokens: rows before cu_seqlens_q[0]
    # and after cu_seqlens_q[-1] belong to no sequence and get out 0 and lse -inf, never garbage.
    lengths_q, lengths_k = [40, 9], [33, 70]
    q, k, v, cu_q, cu_k = _varlen_problem(lengths_q, lengths_k, extra_q=300)
    cu_q += 3  # rows 0..2 lead, rows 52..348 trail
    poison_allocator(q.numel() * q.element_size(), q.shape[0] * q.shape[1] * 4)
    out, lse = cute_ops.flash_fwd_varlen(q, k, v, cu_q, cu_k, 64, 128)
    cute_ops.check_errors()
    for rows in (slice(0, 3), slice(52, q.shape[0])):
        assert (out[rows] == 0).all() and (lse[:, rows] == -math.inf).all()
    for b in range(2):
        _check_sequence(q, k, v, cu_q, cu_k, out, lse, b)
