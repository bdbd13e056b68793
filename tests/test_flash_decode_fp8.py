"""flash_decode over an fp8 (float8_e4m3fn) KV cache: the quantization helpers, the reference and the
input rules everywhere; on the GPU, the kernel against a float64 reference that dequantizes the same
cache (the error bound of test_flash_decode.py, and a planted bug that fails it), the append's
quantization, split counts, CUDA graphs and torch.compile."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses import FakeTensorMode

import cute_ops
from cute_ops import reference as ref
from conftest import (CHECK_DEVICES, assert_close_to_reference, capture_graph, decode_lengths, on_device,
                      poison_allocator)

FP8 = torch.float8_e4m3fn
DTYPES = [torch.float16, torch.bfloat16]
K_OUT = 2.0  # as test_flash_decode.py: at most twice PyTorch's own error in the working dtype
LSE_TOL = dict(atol=1e-3, rtol=1e-4)


def _fp8_cache(batch, capacity, heads_kv, dtype, device, page_size=None, per_head=True):
    """(k_cache, v_cache, block_table, k_scale, v_scale): random keys and values whose size differs
    by kv head, quantized with scales 1.25 x their largest |x| / 448 (room for new tokens)."""
    shape = (batch, capacity) if page_size is None else (batch * -(-capacity // page_size) + 3, page_size)
    spread = torch.logspace(-1, 1, heads_kv, device=device).view(heads_kv, 1)  # kv heads 0.1x .. 10x
    k, v = (torch.randn(*shape, heads_kv, 128, device=device) * spread for _ in range(2))
    k_scale, v_scale = (1.25 * cute_ops.kv_scale(t, per_head) for t in (k, v))
    table = None
    if page_size is not None:
        table = torch.randperm(shape[0], device=device)[:batch * (shape[0] - 3) // batch].view(batch, -1)
        table = table.to(torch.int32)
    return cute_ops.quantize_kv(k, k_scale), cute_ops.quantize_kv(v, v_scale), table, k_scale, v_scale


def _queries(batch, tokens, heads, dtype, device="cuda"):
    """Random queries whose query heads differ in size by up to 10^4 (the kernel scales each row)."""
    size = torch.logspace(-2, 2, heads, device=device).view(heads, 1)
    return (torch.randn(batch, tokens, heads, 128, device=device) * size).to(dtype)


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


# ---------------------------------------------------------------- CPU: helpers and reference
def test_quantize_kv_rounds_saturates_and_keeps_nan():
    x = torch.tensor([[[0.0, 1.0, -3.3, 1000.0, -1000.0, float("nan"), 2.0 ** -12, 0.1]]])  # [1, 1 head, 8]
    scale = torch.tensor([0.5])
    q = cute_ops.quantize_kv(x, scale)
    assert q.dtype == FP8
    back = cute_ops.dequantize_kv(q, scale)
    assert back[0, 0, 0] == 0 and back[0, 0, 1] == 1.0
    assert back[0, 0, 3] == 448 * 0.5 and back[0, 0, 4] == -448 * 0.5  # saturated, not inf or NaN
    assert back[0, 0, 5].isnan()
    # Rounded to nearest: e4m3 keeps 3 mantissa bits, so within 2^-4 relative in the normal range.
    assert abs(back[0, 0, 2] + 3.3) <= 3.3 * 2 ** -4 and abs(back[0, 0, 7] - 0.1) <= 0.1 * 2 ** -4


def test_kv_scale_per_head_and_per_tensor():
    x = torch.randn(3, 50, 4, 128) * torch.tensor([1.0, 2.0, 4.0, 8.0]).view(4, 1)
    per_head, per_tensor = cute_ops.kv_scale(x), cute_ops.kv_scale(x, per_head=False)
    assert per_head.shape == (4,) and per_tensor.shape == (1,) and per_head.dtype == torch.float32
    q = cute_ops.quantize_kv(x, per_head).float()
    assert torch.equal(q.abs().amax(dim=(0, 1, 3)), torch.full((4,), 448.0))  # each head's largest at 448
    assert cute_ops.quantize_kv(x, per_tensor).float().abs().max() == 448.0


def test_reference_stores_the_new_rows_quantized():
    torch.manual_seed(0)
    k8, v8, table, ks, vs = _fp8_cache(2, 64, 2, torch.bfloat16, "cpu", page_size=16)
    q = _queries(2, 2, 4, torch.bfloat16, "cpu")
    k_new, v_new = (torch.randn(2, 2, 2, 128).to(torch.bfloat16) for _ in range(2))
    lengths = torch.tensor([3, 40], dtype=torch.int32)
    out, lse, k_after, v_after = ref.decode_attention(q, k8, v8, lengths, k_new, v_new, table, k_scale=ks, v_scale=vs)
    assert k_after.dtype == FP8 and out.dtype == torch.float64
    rows = torch.arange(40, 42)
    got = v_after.view(torch.uint8)[table[1, rows // 16].long(), rows % 16]
    assert torch.equal(got, cute_ops.quantize_kv(v_new[1], vs).view(torch.uint8))
    # Attending the dequantized cache as a 16-bit one gives the same result.
    k16, v16 = (cute_ops.dequantize_kv(c, s, torch.float64) for c, s in ((k_after, ks), (v_after, vs)))
    out16, lse16, _, _ = ref.decode_attention(q.double(), k16, v16, lengths + 2, block_table=table)
    torch.testing.assert_close(out, out16)
    torch.testing.assert_close(lse, lse16)


# ---------------------------------------------------------------- CPU: fake impl and checks
def test_fake_impl_with_an_fp8_cache():
    with FakeTensorMode():
        q = torch.empty(4, 1, 32, 128, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(4, 100, 8, 128, dtype=FP8, device="cuda")
        scale = torch.empty(8, dtype=torch.float32, device="cuda")
        out, lse = torch.ops.cute_ops.flash_decode(q, k, k.clone(), torch.empty(4, dtype=torch.int32, device="cuda"),
                                                   k_scale=scale, v_scale=scale)
        assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (4, 32, 1)


def _args(**over):
    a = dict(q=_meta(2, 1, 8, 128), k_cache=_meta(2, 64, 2, 128, dtype=FP8), v_cache=_meta(2, 64, 2, 128, dtype=FP8),
             cache_seqlens=_meta(2, dtype=torch.int32), k_scale=_meta(2, dtype=torch.float32),
             v_scale=_meta(2, dtype=torch.float32))
    a.update(over)
    return a


@pytest.mark.parametrize("over, match", [
    (dict(k_scale=None, v_scale=None), "fp8 cache needs k_scale and v_scale"),
    (dict(v_scale=None), "fp8 cache needs k_scale and v_scale"),
    (dict(k_cache=_meta(2, 64, 2, 128), v_cache=_meta(2, 64, 2, 128)), "go with an fp8 cache"),
    (dict(v_cache=_meta(2, 64, 2, 128)), "v_cache must have dtype"),
    (dict(q=_meta(2, 1, 8, 64), k_cache=_meta(2, 64, 2, 64, dtype=FP8), v_cache=_meta(2, 64, 2, 64, dtype=FP8)),
     "fp8 cache needs head_dim 128"),
    (dict(k_scale=_meta(3, dtype=torch.float32)), "k_scale must hold one scale, or one a kv head"),
    (dict(v_scale=_meta(2, 1, dtype=torch.float32)), "v_scale must hold one scale"),
    (dict(k_scale=_meta(2, dtype=torch.bfloat16)), "k_scale must have dtype"),
    (dict(k_scale=_meta(1, dtype=torch.float32)), "k_scale and v_scale must have the same size"),
    (dict(k_new=_meta(2, 1, 2, 128, dtype=FP8), v_new=_meta(2, 1, 2, 128, dtype=FP8)), "k_new has dtype"),
])
@pytest.mark.parametrize("dev", CHECK_DEVICES)
def test_input_checks(over, match, dev):
    a = {name: on_device(t, dev) if t is not None else None for name, t in _args(**over).items()}
    with pytest.raises((ValueError, TypeError), match=match):
        cute_ops.flash_decode(**a)
    with pytest.raises((ValueError, TypeError), match=match):
        torch.ops.cute_ops.flash_decode(**a)


# ---------------------------------------------------------------- GPU: the kernel
def _run_and_check(q, k8, v8, lengths, k_scale, v_scale, *, k_new=None, v_new=None, block_table=None, rotary=None,
                   num_splits=0, softmax_scale=None, kernel_scales=None):
    """Our call against the float64 reference over the same fp8 cache; returns (out, lse).
    kernel_scales: other (k_scale, v_scale) for our call only (the planted-bug test)."""
    cos, sin = rotary if rotary is not None else (None, None)
    args = (q, k8, v8, lengths, k_new, v_new, block_table, cos, sin, softmax_scale, True)
    exp_out, exp_lse, exp_k, exp_v = ref.decode_attention(*args, k_scale=k_scale, v_scale=v_scale)
    lowp = ref.decode_attention(*args, upcast=False, k_scale=k_scale, v_scale=v_scale)[0]
    batch, tokens, heads, dim = q.shape
    poison_allocator(q.numel() * q.element_size(), batch * heads * tokens * 4,
                     128 * batch * heads * tokens * dim * 4, 128 * batch * heads * tokens * 4)
    ks, vs = kernel_scales or (k_scale, v_scale)
    out, lse = cute_ops.flash_decode(q, k8, v8, lengths, k_new, v_new, block_table, cos, sin,
                                     softmax_scale=softmax_scale, num_splits=num_splits, k_scale=ks, v_scale=vs)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (batch, heads, tokens)
    assert_close_to_reference(out, exp_out, lowp, k=K_OUT)
    torch.testing.assert_close(lse.double(), exp_lse.double(), **LSE_TOL)
    if rotary is None:  # the appended rows byte for byte, the other rows untouched
        assert torch.equal(k8.view(torch.uint8), exp_k.view(torch.uint8))
    else:  # the rotation rounds to q's dtype first, one ulp either way: one e4m3 step at most
        exp = exp_k.double()
        assert ((k8.double() - exp).abs() <= 2 ** -3 * exp.abs() + 2 ** -9 * k_scale.double().max()).all()
    assert torch.equal(v8.view(torch.uint8), exp_v.view(torch.uint8))
    return out, lse


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads_q, heads_kv", [(4, 4), (32, 8), (16, 2)])  # GQA 1, 4, 8
@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("page_size", [None, 16, 64])
@pytest.mark.parametrize("per_head", [True, False])
@pytest.mark.parametrize("append", [False, True])
def test_matches_reference(append, per_head, page_size, tokens, heads_q, heads_kv, dtype):
    batch, capacity = 5, 1000
    k8, v8, table, ks, vs = _fp8_cache(batch, capacity, heads_kv, dtype, "cuda", page_size, per_head)
    q = _queries(batch, tokens, heads_q, dtype)
    lengths = decode_lengths(batch, capacity - (tokens if append else 0))
    new = {}
    if append:  # larger than the cache: some elements saturate
        new = dict(k_new=(2 * torch.randn(batch, tokens, heads_kv, 128, device="cuda")).to(dtype),
                   v_new=torch.randn(batch, tokens, heads_kv, 128, device="cuda").to(dtype))
    _run_and_check(q, k8, v8, lengths, ks, vs, block_table=table, **new)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("page_size", [None, 32])
@pytest.mark.parametrize("tokens", [1, 4, 16])
def test_append_with_rope(tokens, page_size, dtype):
    batch, capacity = 4, 300
    k8, v8, table, ks, vs = _fp8_cache(batch, capacity, 2, dtype, "cuda", page_size)
    q = _queries(batch, tokens, 8, dtype)
    k_new, v_new = (torch.randn(batch, tokens, 2, 128, device="cuda").to(dtype) for _ in range(2))
    angles = torch.rand(capacity + 16, 64, device="cuda", dtype=torch.float64) * 6.28
    rotary = (angles.cos().float(), angles.sin().float())
    lengths = torch.tensor([0, 1, 150, capacity - tokens], dtype=torch.int32, device="cuda")
    _run_and_check(q, k8, v8, lengths, ks, vs, k_new=k_new, v_new=v_new, block_table=table, rotary=rotary)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [None, 64])
@pytest.mark.parametrize("num_splits", [1, 2, 7, 33, 128])
def test_split_counts(num_splits, page_size):
    k8, v8, table, ks, vs = _fp8_cache(3, 4097, 8, torch.bfloat16, "cuda", page_size)
    q = _queries(3, 1, 32, torch.bfloat16)
    lengths = torch.tensor([4097, 17, 1000], dtype=torch.int32, device="cuda")
    _run_and_check(q, k8, v8, lengths, ks, vs, block_table=table, num_splits=num_splits)


@pytest.mark.gpu
@pytest.mark.parametrize("softmax_scale", [0.3, -0.2])
@pytest.mark.parametrize("negative_k_scale", [False, True])
def test_signs_of_the_scales(negative_k_scale, softmax_scale):
    k8, v8, _, ks, vs = _fp8_cache(2, 200, 2, torch.bfloat16, "cuda")
    if negative_k_scale:  # the cache holds -k / |k_scale|: the same keys
        k8, ks = (-k8.float()).to(FP8), -ks
    q = _queries(2, 2, 8, torch.bfloat16)
    _run_and_check(q, k8, v8, torch.tensor([200, 5], dtype=torch.int32, device="cuda"), ks, vs,
                   softmax_scale=softmax_scale)


@pytest.mark.gpu
def test_cuda_graph_and_compile_with_append():
    batch = 3
    k8, v8, table, ks, vs = _fp8_cache(batch, 2000, 8, torch.bfloat16, "cuda", 64)
    q = _queries(batch, 1, 32, torch.bfloat16)
    k_new, v_new = (torch.randn(batch, 1, 8, 128, device="cuda").to(torch.bfloat16) for _ in range(2))
    lengths = torch.tensor([10, 20, 30], dtype=torch.int32, device="cuda")
    snapshot = (k8.clone(), v8.clone())

    def step(q, k8, v8, lengths, k_new, v_new):
        return cute_ops.flash_decode(q, k8, v8, lengths, k_new, v_new, block_table=table, k_scale=ks, v_scale=vs)

    expected = step(q, k8, v8, lengths, k_new, v_new)
    after = (k8.clone(), v8.clone())
    caches = (snapshot[0].clone(), snapshot[1].clone())
    got = torch.compile(step, fullgraph=True)(q, *caches, lengths, k_new, v_new)
    torch.testing.assert_close(got, expected)
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(caches, after))

    outs = []
    graph = capture_graph(lambda: outs.append(step(q, k8, v8, lengths, k_new, v_new)))
    out, lse = outs[-1]
    for new_lengths in ([1, 1999, 7], [1000, 0, 333]):
        k8.copy_(snapshot[0]), v8.copy_(snapshot[1])
        lengths.copy_(torch.tensor(new_lengths, dtype=torch.int32))
        for t in (q, k_new, v_new):
            t.copy_(torch.randn_like(t))
        args = (q, snapshot[0], snapshot[1], lengths, k_new, v_new, table)
        exp_out, exp_lse, exp_k, exp_v = ref.decode_attention(*args, k_scale=ks, v_scale=vs)
        lowp = ref.decode_attention(*args, upcast=False, k_scale=ks, v_scale=vs)[0]
        graph.replay()
        assert_close_to_reference(out, exp_out, lowp, k=K_OUT)
        torch.testing.assert_close(lse.double(), exp_lse.double(), **LSE_TOL)
        assert torch.equal(k8.view(torch.uint8), exp_k.view(torch.uint8))


@pytest.mark.gpu
def test_planted_bug_fails_the_comparison():
    # A kernel that dequantized V with a scale 1% off (or K: the scores) must not pass.
    k8, v8, table, ks, vs = _fp8_cache(2, 1024, 2, torch.bfloat16, "cuda", 16)
    q = _queries(2, 1, 8, torch.bfloat16)
    lengths = torch.tensor([1000, 1024], dtype=torch.int32, device="cuda")
    _run_and_check(q, k8, v8, lengths, ks, vs, block_table=table)  # the real comparison passes
    for wrong in ((ks, vs * 1.01), (ks * 1.05, vs)):
        with pytest.raises(AssertionError):
            _run_and_check(q, k8, v8, lengths, ks, vs, block_table=table, kernel_scales=wrong)
