"""rotary_embedding and its cos/sin cache: helpers, fake impl and checks everywhere; the kernel
against a float64 reference on the GPU."""
from __future__ import annotations

import math

import pytest
import torch

import cute_ops
from cute_ops import reference as ref
from cute_ops.rope import Llama3RopeScaling, rope_cos_sin_cache, rope_inv_freq
from conftest import CHECK_DEVICES, assert_close_to_reference, capture_graph

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# Ours rotates in float32 and rounds once, as PyTorch's upcast reference does; the bound is k times
# PyTorch rotating in the working dtype (conftest.assert_close_to_reference). float32 inputs: our
# fused multiply-adds against PyTorch's separate float32 products, a few ulps apart.
K_ROPE = {torch.float16: 2.0, torch.bfloat16: 2.0, torch.float32: 8.0}


def random_angle_table(rot_dim: int, rows: int, dtype=torch.float32, device="cuda") -> torch.Tensor:
    """A cos/sin table of random angles in [0, 2 pi): unlike LLaMA's frequencies, whose angles at the
    high dims are tiny (cos ~ 1, sin ~ 0, so skipping the tail pairs would pass), every pair moves."""
    angles = torch.rand(rows, rot_dim // 2, dtype=torch.float64) * 2 * math.pi
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(dtype=dtype, device=device)


def _check_rotated(q, k, q0, k0, pos, cache, what=""):
    """q, k (rotated in place by the op) against the float64 rotation of q0, k0."""
    eq, ek = ref.rotary_embedding(q0.double(), k0.double(), pos, cache.double())
    lq, lk = ref.rotary_embedding(q0, k0, pos, cache.to(q0.dtype), upcast=False)
    assert_close_to_reference(q, eq, lq, k=K_ROPE[q.dtype], what=f"q{what}")
    assert_close_to_reference(k, ek, lk, k=K_ROPE[q.dtype], what=f"k{what}")


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


@pytest.mark.parametrize("dev", CHECK_DEVICES)
@pytest.mark.parametrize("kw, match, exc", [
    (dict(device="cpu"), "q must be a CUDA tensor, got device cpu", ValueError),
    (dict(k_heads_dim=64), r"k must be \[5, heads, 128\] like q \(5, 4, 128\)", ValueError),
    (dict(pos_dtype=torch.float32), r"positions must have dtype in \(int64, int32\), got torch.float32", TypeError),
    (dict(pos_shape=(4,)), r"positions must have shape \(5,\)", ValueError),
    (dict(rot_dim=130), r"rot_dim \(130\) must be even and at most head_dim \(128\)", ValueError),
    (dict(cache_dtype=torch.float16), r"cos_sin_cache must have dtype in \(float32, bfloat16\)", TypeError),
    (dict(cache_rows=0), "cos_sin_cache must have at least one row", ValueError),
    (dict(q_dtype=torch.int8), "q must have dtype in", TypeError),
    (dict(same_qk=True), "q and k must be different tensors", ValueError),
    (dict(q_transposed=True), "q's last dim must be contiguous", ValueError),
    (dict(q_tokens_permuted=True), "q's token dims must be viewable as one dim", ValueError),
])
def test_input_checks(kw, match, exc, dev):
    dev = kw.get("device", dev)
    dtype = kw.get("q_dtype", torch.bfloat16)
    q = torch.empty(5, 4, 128, dtype=dtype, device=dev)
    if kw.get("q_transposed"):
        q = torch.empty(5, 128, 4, dtype=dtype, device=dev).transpose(1, 2)
    if kw.get("q_tokens_permuted"):
        q = torch.empty(5, 3, 4, 128, dtype=dtype, device=dev).transpose(0, 1)
    k = torch.empty(*q.shape[:-2], 2, kw.get("k_heads_dim", 128), dtype=dtype, device=dev)
    if kw.get("same_qk"):
        k = q
    pos = torch.empty(kw.get("pos_shape", q.shape[:-2]), dtype=kw.get("pos_dtype", torch.int64), device=dev)
    cache = torch.empty(kw.get("cache_rows", 64), kw.get("rot_dim", 128), dtype=kw.get("cache_dtype", torch.float32),
                        device=dev)
    with pytest.raises(exc, match=match):
        cute_ops.rotary_embedding(q, k, pos, cache)


def test_opcheck_on_meta_tensors():
    qkv = torch.empty(2, 7, (8 + 2 * 2) * 64, dtype=torch.bfloat16, device="meta")
    q, k = qkv[..., : 8 * 64].view(2, 7, 8, 64), qkv[..., 8 * 64: 10 * 64].view(2, 7, 2, 64)
    torch.library.opcheck(torch.ops.cute_ops.rotary_embedding.default,
                          (q, k, torch.empty(2, 7, dtype=torch.int64, device="meta"),
                           torch.empty(100, 64, dtype=torch.float32, device="meta")))


# ---------------------------------------------------------------- GPU: kernel
def _run_case(tokens_shape, hq, hkv, head_dim, rot_dim, dtype, cache_dtype, pos_dtype, max_pos=5000,
              scaling=None, table="llama"):
    q = torch.randn(*tokens_shape, hq, head_dim, device="cuda").to(dtype)
    k = torch.randn(*tokens_shape, hkv, head_dim, device="cuda").to(dtype)
    pos = torch.randint(0, max_pos, tokens_shape, device="cuda", dtype=pos_dtype)
    if table == "llama":
        cache = rope_cos_sin_cache(rot_dim, max_pos, theta=500000.0, scaling=scaling, dtype=cache_dtype,
                                   device="cuda")
    else:
        cache = random_angle_table(rot_dim, max_pos, cache_dtype)
    q0, k0 = q.clone(), k.clone()
    cute_ops.rotary_embedding(q, k, pos, cache)
    _check_rotated(q, k, q0, k0, pos, cache)
    # Dims past rot_dim are untouched, bit for bit.
    assert torch.equal(q[..., rot_dim:], q0[..., rot_dim:]) and torch.equal(k[..., rot_dim:], k0[..., rot_dim:])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [1, 17, 1000, 4097])
@pytest.mark.parametrize("hq, hkv, head_dim", [(32, 8, 128), (8, 8, 64), (4, 1, 96), (3, 3, 80)])
@pytest.mark.parametrize("table", ["llama", "random"])
def test_rotary_matches_reference(table, tokens, hq, hkv, head_dim, dtype):
    _run_case((tokens,), hq, hkv, head_dim, head_dim, dtype, torch.float32, torch.int64,
              scaling=Llama3RopeScaling(), table=table)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rot_dim, pos_dtype, same_dtype_cache", [
    (64, torch.int32, False),    # partial rotary, int32 positions
    (128, torch.int64, True),    # cache in q's dtype
    (20, torch.int64, False),    # rot_dim/2 = 10: not a multiple of the vector width, scalar path
])
def test_rotary_variants(rot_dim, pos_dtype, same_dtype_cache, dtype):
    _run_case((3, 33), 8, 2, 128, rot_dim, dtype, dtype if same_dtype_cache else torch.float32, pos_dtype,
              table="random")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rotary_on_fused_qkv_views(dtype):
    T, hq, hkv, d = 257, 32, 8, 128
    qkv = torch.randn(T, (hq + 2 * hkv) * d, device="cuda").to(dtype)
    q = qkv[:, : hq * d].view(T, hq, d)
    k = qkv[:, hq * d: (hq + hkv) * d].view(T, hkv, d)
    v_before = qkv[:, (hq + hkv) * d:].clone()
    pos = torch.randint(0, 8192, (T,), device="cuda")
    cache = random_angle_table(d, 8192)
    q0, k0 = q.clone(), k.clone()
    cute_ops.rotary_embedding(q, k, pos, cache)
    _check_rotated(q, k, q0, k0, pos, cache)
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
        _check_rotated(q, k, q0, k0, pos, cache)


@pytest.mark.gpu
@pytest.mark.parametrize("pos_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("bad_position", [-1, 100, 2**40])
def test_position_outside_the_table_is_recorded(bad_position, pos_dtype):
    # Token 5's position is outside the 100-row table: its q and k become NaN (nothing read out of
    # bounds), every other token is rotated as usual, and check_errors names the token.
    if pos_dtype == torch.int32 and bad_position == 2**40:
        bad_position = 2**31 - 1
    q = torch.randn(9, 4, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(9, 2, 64, device="cuda", dtype=torch.bfloat16)
    pos = torch.randint(0, 100, (9,), device="cuda", dtype=pos_dtype)
    pos[5] = bad_position
    cache = random_angle_table(64, 100)
    q0, k0 = q.clone(), k.clone()
    cute_ops.rotary_embedding(q, k, pos, cache)
    with pytest.raises(cute_ops.DeviceDataError,
                       match=rf"rotary_embedding on cuda:\d+: position {bad_position} of token 5 is outside the 100 rows"):
        cute_ops.check_errors()
    assert q[5].isnan().all() and k[5].isnan().all()
    good = torch.tensor([i for i in range(9) if i != 5], device="cuda")
    _check_rotated(q[good], k[good], q0[good], k0[good], pos[good], cache)


@pytest.mark.gpu
def test_planted_bug_fails_the_comparison():
    # Skipping the last rotated pair of every head would pass with LLaMA's table (the highest
    # frequency's angle stays ~0 over short positions); with random angles the comparison fails.
    q = torch.randn(33, 4, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(33, 2, 128, device="cuda", dtype=torch.bfloat16)
    pos = torch.randint(0, 64, (33,), device="cuda")
    cache = random_angle_table(128, 64)
    q0, k0 = q.clone(), k.clone()
    cute_ops.rotary_embedding(q, k, pos, cache)
    _check_rotated(q, k, q0, k0, pos, cache)
    skipped = q.clone()
    skipped[..., 63], skipped[..., 127] = q0[..., 63], q0[..., 127]  # pair 63 left unrotated
    with pytest.raises(AssertionError, match="exceeds"):
        _check_rotated(skipped, k, q0, k0, pos, cache)
