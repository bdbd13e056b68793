"""rotary_embedding and its cos/sin cache: helpers, fake impl and checks everywhere; the kernel
against a float64 reference on the GPU."""
from __future__ import annotations

import math

import pytest
import torch

import cute_ops
from cute_ops import reference as ref
from cute_ops.rope import Llama3RopeScaling, rope_cos_sin_cache, rope_inv_freq
from conftest import capture_graph, tolerances

DTYPES = [torch.float16, torch.bfloat16, torch.float32]


# ---------------------------------------------------------------- CPU: cache helpers
def test_cos_sin_cache_layout():
    cache = rope_cos_sin_cache(8, 5, theta=100.0, dtype=torch.float64)
    assert cache.shape == (5, 8)
    for p in range(5):
        for i in range(4):
            ang = p * 100.0 ** (-2 * i / 8)
            assert math.isclose(cache[p, i].item(), math.cos(ang), rel_tol=1e-12, abs_tol=1e-12)
            assert math.isclose(cache[p, 4 + i].item(), math.sin(ang), rel_tol=1e-12, abs_tol=1e-12)


def _llama3_rule(freq, factor, low, high, old_ctx):
    """Meta's reference rule for one frequency, written as a loop body (the spec)."""
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    wavelen = 2 * math.pi / freq
    if wavelen < high_wavelen:
        return freq
    if wavelen > low_wavelen:
        return freq / factor
    smooth = (old_ctx / wavelen - low) / (high - low)
    return (1 - smooth) * freq / factor + smooth * freq


def test_llama3_scaling_matches_rule():
    s = Llama3RopeScaling()
    scaled = rope_inv_freq(128, theta=500000.0, scaling=s)
    plain = rope_inv_freq(128, theta=500000.0)
    expected = [_llama3_rule(f, s.factor, s.low_freq_factor, s.high_freq_factor, s.original_max_position)
                for f in plain.tolist()]
    torch.testing.assert_close(scaled, torch.tensor(expected, dtype=torch.float64), rtol=1e-13, atol=0)
    # All three regimes occur for LLaMA-3.1's settings.
    ratio = plain / scaled
    assert (ratio == 1).any() and (ratio == s.factor).any() and ((ratio > 1) & (ratio < s.factor)).any()


def test_cache_helper_rejects_bad_args():
    with pytest.raises(ValueError, match="even"):
        rope_inv_freq(7)
    with pytest.raises(ValueError, match="max_position"):
        rope_cos_sin_cache(8, 0)


def test_reference_is_a_rotation():
    q = torch.randn(6, 4, 64, dtype=torch.float64)
    k = torch.randn(6, 2, 64, dtype=torch.float64)
    cache = rope_cos_sin_cache(64, 100, dtype=torch.float64)
    pos = torch.randint(0, 100, (6,))
    rq, rk = ref.rotary_embedding(q, k, pos, cache)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))
    # Relative property: <R(p)a, R(p+d)b> depends on d only.
    a, b = torch.randn(1, 1, 64, dtype=torch.float64), torch.randn(1, 1, 64, dtype=torch.float64)
    def dot_at(p, d):
        ra, _ = ref.rotary_embedding(a, a, torch.tensor([p]), cache)
        rb, _ = ref.rotary_embedding(b, b, torch.tensor([p + d]), cache)
        return (ra * rb).sum()
    torch.testing.assert_close(dot_at(3, 5), dot_at(40, 5))


# ---------------------------------------------------------------- CPU: fake impl and checks
def test_fake_impl_accepts_fused_qkv_views():
    # Meta tensors: a CPU-only PyTorch cannot dispatch a mutating op on fake CUDA tensors.
    qkv = torch.empty(2, 7, (32 + 2 * 8) * 128, dtype=torch.bfloat16, device="meta")
    q = qkv[..., : 32 * 128].view(2, 7, 32, 128)
    k = qkv[..., 32 * 128: 40 * 128].view(2, 7, 8, 128)
    pos = torch.empty(2, 7, dtype=torch.int64, device="meta")
    cache = torch.empty(4096, 128, dtype=torch.float32, device="meta")
    assert torch.ops.cute_ops.rotary_embedding(q, k, pos, cache) is None


@pytest.mark.parametrize("kw, match, exc", [
    (dict(device="cpu"), "q must be a CUDA tensor, got device cpu", ValueError),
    (dict(k_heads_dim=64), r"k must be \[5, num_kv_heads, 128\]", ValueError),
    (dict(pos_dtype=torch.float32), "positions must have dtype in", TypeError),
    (dict(pos_shape=(4,)), r"positions must have shape \(5,\)", ValueError),
    (dict(rot_dim=130), r"rot_dim \(130\) must be even and at most head_dim \(128\)", ValueError),
    (dict(cache_dtype=torch.float16), "cos_sin_cache must have dtype in", TypeError),
])
def test_input_checks(kw, match, exc):
    dev = kw.get("device", "meta")
    q = torch.empty(5, 4, 128, dtype=torch.bfloat16, device=dev)
    k = torch.empty(5, 2, kw.get("k_heads_dim", 128), dtype=torch.bfloat16, device=dev)
    pos = torch.empty(kw.get("pos_shape", (5,)), dtype=kw.get("pos_dtype", torch.int64), device=dev)
    cache = torch.empty(64, kw.get("rot_dim", 128), dtype=kw.get("cache_dtype", torch.float32), device=dev)
    with pytest.raises(exc, match=match):
        cute_ops.rotary_embedding(q, k, pos, cache)


# ---------------------------------------------------------------- GPU: kernel
def _run_case(tokens_shape, hq, hkv, head_dim, rot_dim, dtype, cache_dtype, pos_dtype, max_pos=5000,
              scaling=None):
    q = torch.randn(*tokens_shape, hq, head_dim, device="cuda").to(dtype)
    k = torch.randn(*tokens_shape, hkv, head_dim, device="cuda").to(dtype)
    pos = torch.randint(0, max_pos, tokens_shape, device="cuda", dtype=pos_dtype)
    cache = rope_cos_sin_cache(rot_dim, max_pos, theta=500000.0, scaling=scaling, dtype=cache_dtype,
                               device="cuda")
    eq, ek = ref.rotary_embedding(q.double(), k.double(), pos, cache.double())
    q0, k0 = q.clone(), k.clone()
    cute_ops.rotary_embedding(q, k, pos, cache)
    tol = tolerances(dtype)
    torch.testing.assert_close(q.double(), eq, **tol)
    torch.testing.assert_close(k.double(), ek, **tol)
    # Dims past rot_dim are untouched, bit for bit.
    assert torch.equal(q[..., rot_dim:], q0[..., rot_dim:]) and torch.equal(k[..., rot_dim:], k0[..., rot_dim:])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [1, 17, 1000, 4097])
@pytest.mark.parametrize("hq, hkv, head_dim", [(32, 8, 128), (8, 8, 64), (4, 1, 96), (3, 3, 80)])
def test_rotary_matches_reference(tokens, hq, hkv, head_dim, dtype):
    _run_case((tokens,), hq, hkv, head_dim, head_dim, dtype, torch.float32, torch.int64,
              scaling=Llama3RopeScaling())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rot_dim, pos_dtype, same_dtype_cache", [
    (64, torch.int32, False),    # partial rotary, int32 positions
    (128, torch.int64, True),    # cache in q's dtype
    (20, torch.int64, False),    # rot_dim/2 = 10: not a multiple of the vector width, scalar path
])
def test_rotary_variants(rot_dim, pos_dtype, same_dtype_cache, dtype):
    _run_case((3, 33), 8, 2, 128, rot_dim, dtype, dtype if same_dtype_cache else torch.float32, pos_dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rotary_on_fused_qkv_views(dtype):
    T, hq, hkv, d = 257, 32, 8, 128
    qkv = torch.randn(T, (hq + 2 * hkv) * d, device="cuda").to(dtype)
    q = qkv[:, : hq * d].view(T, hq, d)
    k = qkv[:, hq * d: (hq + hkv) * d].view(T, hkv, d)
    v_before = qkv[:, (hq + hkv) * d:].clone()
    pos = torch.randint(0, 8192, (T,), device="cuda")
    cache = rope_cos_sin_cache(d, 8192, device="cuda")
    eq, ek = ref.rotary_embedding(q.double(), k.double(), pos, cache.double())
    cute_ops.rotary_embedding(q, k, pos, cache)
    torch.testing.assert_close(q.double(), eq, **tolerances(dtype))
    torch.testing.assert_close(k.double(), ek, **tolerances(dtype))
    assert torch.equal(qkv[:, (hq + hkv) * d:], v_before), "v must be untouched"


@pytest.mark.gpu
def test_opcheck():
    q = torch.randn(9, 4, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(9, 2, 64, device="cuda", dtype=torch.bfloat16)
    pos = torch.randint(0, 100, (9,), device="cuda")
    cache = rope_cos_sin_cache(64, 100, device="cuda")
    torch.library.opcheck(torch.ops.cute_ops.rotary_embedding.default, (q, k, pos, cache))


@pytest.mark.gpu
def test_torch_compile_fullgraph():
    def attn_prologue(qkv, pos, cache):
        q, k, v = qkv.split([256, 128, 128], dim=-1)
        q, k = q.unflatten(-1, (4, 64)), k.unflatten(-1, (2, 64))
        cute_ops.rotary_embedding(q, k, pos, cache)
        return q.sum() + k.sum() + v.sum()

    qkv = torch.randn(31, 512, device="cuda", dtype=torch.float32)
    pos = torch.randint(0, 64, (31,), device="cuda")
    cache = rope_cos_sin_cache(64, 64, device="cuda")
    expected = attn_prologue(qkv.clone(), pos, cache)
    got = torch.compile(attn_prologue, fullgraph=True)(qkv.clone(), pos, cache)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_cuda_graph_replay_with_new_positions():
    q = torch.randn(64, 8, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(64, 2, 128, device="cuda", dtype=torch.bfloat16)
    pos = torch.randint(0, 4096, (64,), device="cuda")
    cache = rope_cos_sin_cache(128, 4096, device="cuda")
    graph = capture_graph(lambda: cute_ops.rotary_embedding(q, k, pos, cache))
    for _ in range(2):
        q0 = torch.randn_like(q)
        k0 = torch.randn_like(k)
        q.copy_(q0), k.copy_(k0), pos.copy_(torch.randint(0, 4096, (64,), device="cuda"))
        graph.replay()
        eq, ek = ref.rotary_embedding(q0.double(), k0.double(), pos, cache.double())
        torch.testing.assert_close(q.double(), eq, **tolerances(torch.bfloat16))
        torch.testing.assert_close(k.double(), ek, **tolerances(torch.bfloat16))
