"""gemm_pair / fused_mlp: weight packing, the C++ tile order against the Python model, fake impl
and input checks everywhere; on the GPU, the kernel against a float64 reference for every M the
issue names, dtype, activation, policy, granularity and K-split, under contention and with few
SMs, in CUDA graphs and torch.compile."""
from __future__ import annotations

import itertools
import time

import pytest
import torch

import cute_ops
from cute_ops import reference as ref
from cute_ops.gemm_pair_schedule import PairShape, Tiling, make_schedule
from conftest import capture_graph, poison_allocator

DTYPES = [torch.float16, torch.bfloat16]
M_SIZES = [1, 7, 16, 64, 128, 1000, 4096]
# Odd sizes on purpose: K = 264 is not a multiple of the 64-wide K tile, I = 200 leaves a last
# GEMM0 tile of 8 h columns, N1 = 136 a last GEMM1 tile of 8 columns.
HIDDEN, INTER, OUT = 264, 200, 136
# The output against a float64 reference whose h is rounded to the dtype like the kernel's: what
# is left is float32 accumulation, the output's rounding, and h values within one ulp of a
# rounding boundary that round the other way.
TOL = {torch.float16: dict(atol=3e-3, rtol=3e-3), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


# ---------------------------------------------------------------- CPU: packing, order, checks
@pytest.mark.parametrize("inter", [64, 200, 8, 128])
def test_pack_gate_up_layout_and_inverse(inter):
    gate = torch.randn(inter, 16)
    up = torch.randn(inter, 16)
    packed = cute_ops.pack_gate_up(gate, up)
    assert packed.shape == (2 * inter, 16)
    for t in range(-(-inter // 64)):  # tile t: its gate rows, then the same up rows
        lo, hi = 64 * t, min(64 * t + 64, inter)
        torch.testing.assert_close(packed[2 * lo:2 * lo + (hi - lo)], gate[lo:hi], rtol=0, atol=0)
        torch.testing.assert_close(packed[2 * lo + (hi - lo):2 * hi], up[lo:hi], rtol=0, atol=0)
    g, u = cute_ops.unpack_gate_up(packed)
    assert torch.equal(g, gate) and torch.equal(u, up)


def test_reference_swiglu_matches_llama_mlp():
    x, wg, wu, wd = torch.randn(5, 24, dtype=torch.float64), torch.randn(40, 24, dtype=torch.float64), \
        torch.randn(40, 24, dtype=torch.float64), torch.randn(16, 40, dtype=torch.float64)
    torch.testing.assert_close(ref.gemm_pair(x, cute_ops.pack_gate_up(wg, wu), wd), ref.llama_mlp(x, wg, wu, wd))


@pytest.mark.skipif(not cute_ops.schemas_loaded(), reason="cute_ops._C not built")
@pytest.mark.parametrize("m, k, n0, n1, activation, block_m, split_k0, split_k1", [
    (1, 4096, 28672, 4096, "swiglu", 16, 1024, 1152), (1, 4096, 28672, 4096, "swiglu", 16, 0, 1152),
    (7, 264, 400, 136, "swiglu", 16, 64, 64), (1000, 264, 400, 136, "gelu", 128, 0, 0),
    (4096, 4096, 28672, 4096, "swiglu", 128, 0, 0), (64, 1000, 1024, 1000, "none", 64, 336, 256),
    (130, 512, 2048, 512, "swiglu", 64, 0, 192)])
@pytest.mark.parametrize("policy, granularity, lag", [
    ("sequential", "tile", 0), ("sequential", "row", 0), ("row_interleaved", "tile", 0), ("row_interleaved", "row", 0),
    ("overlap", "tile", 0), ("overlap", "tile", 3), ("overlap", "tile", 264)])
def test_cpp_order_matches_python_model(m, k, n0, n1, activation, block_m, split_k0, split_k1, policy, granularity,
                                        lag):
    # The kernel reads the C++ table; the Python model is the one the deadlock tests check.
    cpp = torch.ops.cute_ops.gemm_pair_order(m, k, n0, n1, activation, policy, granularity, block_m, split_k0,
                                             split_k1, lag)
    model = make_schedule(PairShape(m, k, n0, n1, gated=activation == "swiglu"),
                          Tiling(block_m, 128, 128, split_k1 or None, split_k0 or None), policy, granularity, lag)
    assert cpp.tolist() == model.table


@pytest.mark.skipif(not cute_ops.schemas_loaded(), reason="cute_ops._C not built")
def test_cpp_order_rejects_overlap_at_row_granularity():
    with pytest.raises((ValueError, RuntimeError), match="needs granularity"):
        torch.ops.cute_ops.gemm_pair_order(64, 64, 256, 128, "swiglu", "overlap", "row", 64, 0, 64, 0)


@pytest.mark.skipif(not cute_ops.schemas_loaded(), reason="cute_ops._C not built")
@pytest.mark.parametrize("m, activation", [(1, "swiglu"), (37, "gelu"), (300, "none")])
def test_fake_impl_and_opcheck_on_meta(m, activation):
    a, b0 = _meta(m, 64), _meta(256, 64)
    b1 = _meta(24, 128 if activation == "swiglu" else 256)
    out = torch.ops.cute_ops.gemm_pair(a, b0, b1, activation)
    assert out.shape == (m, 24) and out.dtype == torch.bfloat16
    torch.library.opcheck(torch.ops.cute_ops.gemm_pair.default, (a, b0, b1), {"activation": activation})


def _args(a=None, b0=None, b1=None, **kw):
    return (_meta(3, 64) if a is None else a, _meta(256, 64) if b0 is None else b0,
            _meta(24, 128) if b1 is None else b1, kw)


@pytest.mark.parametrize("make, match, exc", [
    (lambda: _args(a=torch.empty(3, 64, dtype=torch.bfloat16)), "a must be a CUDA tensor", ValueError),
    (lambda: _args(a=_meta(3, 64, dtype=torch.float32)), r"a must have dtype in \(float16, bfloat16\)", TypeError),
    (lambda: _args(b0=_meta(256, 64, dtype=torch.float16)), "b0 has dtype torch.float16, expected", TypeError),
    (lambda: _args(a=_meta(3, 60), b0=_meta(256, 60)), "positive multiple of 8", ValueError),
    (lambda: _args(b0=_meta(256, 72)), r"b0 must be \[n0, k\] with a's k \(64\)", ValueError),
    (lambda: _args(b0=_meta(264, 64), b1=_meta(24, 132)), "b0's rows must be a positive multiple of 16", ValueError),
    (lambda: _args(b1=_meta(24, 256)), r"b1 must be \[n1, 128\]", ValueError),
    (lambda: _args(b1=_meta(20, 128)), r"n1\) must be a positive multiple of 8", ValueError),
    (lambda: _args(b0=_meta(64, 256).T), "b0 must be contiguous", ValueError),
    (lambda: _args(activation="relu"), "activation must be one of", ValueError),
    (lambda: _args(policy="random"), "policy must be one of", ValueError),
    (lambda: _args(policy="overlap", granularity="row"), "'overlap' policy needs granularity 'tile'", ValueError),
    (lambda: _args(split_k1=96), "split_k1 must be None", ValueError),
    (lambda: _args(split_k0=100), "split_k0 must be None", ValueError),
    (lambda: _args(block_m=32), "block_m must be None", ValueError),
    (lambda: _args(a=_meta(3, 128)[:, :64]), None, None),  # a strided view with aligned rows is fine
])
def test_input_checks(make, match, exc):
    a, b0, b1, kw = make()
    if exc is None:
        if cute_ops.schemas_loaded():
            assert torch.ops.cute_ops.gemm_pair(a, b0, b1).shape == (3, 24)
        return
    with pytest.raises(exc, match=match):
        cute_ops.gemm_pair(a, b0, b1, **kw)


# ---------------------------------------------------------------- GPU
def _problem(m, dtype, activation, hidden=HIDDEN, inter=INTER, out=OUT, device="cuda"):
    """(a, b0, b1) with unit-scale outputs: weights scaled by 1/sqrt(fan-in)."""
    a = torch.randn(m, hidden, device=device).to(dtype)
    n0 = 2 * inter if activation == "swiglu" else inter
    b0 = (torch.randn(n0, hidden, device=device) / hidden ** 0.5).to(dtype)
    b1 = (torch.randn(out, inter, device=device) * (2 / inter) ** 0.5).to(dtype)
    return a, b0, b1


def _expected(a, b0, b1, activation):
    return ref.gemm_pair(a.double(), b0.double(), b1.double(), activation, round_h=a.dtype)


def _check(a, b0, b1, activation, **kw):
    poison_allocator(a.shape[0] * b1.shape[0] * a.element_size())
    out = cute_ops.gemm_pair(a, b0, b1, activation, **kw)
    assert out.shape == (a.shape[0], b1.shape[0]) and out.dtype == a.dtype
    torch.testing.assert_close(out.double(), _expected(a, b0, b1, activation), **TOL[a.dtype])
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["swiglu", "gelu", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", M_SIZES)
def test_matches_reference(m, dtype, activation):
    _check(*_problem(m, dtype, activation), activation)


@pytest.mark.gpu
@pytest.mark.parametrize("policy, granularity", [
    ("sequential", "tile"), ("sequential", "row"), ("row_interleaved", "tile"), ("row_interleaved", "row"),
    ("overlap", "tile")])
@pytest.mark.parametrize("split_k0, split_k1", [(None, None), (0, 0), (0, 64), (72, 64), (128, None)])
@pytest.mark.parametrize("m", M_SIZES)
def test_every_policy_and_granularity(m, policy, granularity, split_k0, split_k1):
    # split_k0 = 72 leaves K = 264 in splits of 72, 72, 72 and 48 columns (partial K tiles).
    _check(*_problem(m, torch.bfloat16, "swiglu", inter=456), "swiglu", policy=policy,
           granularity=granularity, split_k0=split_k0, split_k1=split_k1)


@pytest.mark.gpu
@pytest.mark.parametrize("block_m", [16, 64, 128])
@pytest.mark.parametrize("lag", [0, 2, 1000])
@pytest.mark.parametrize("m", [1, 100])
def test_forced_tile_configs_and_overlap_lag(m, block_m, lag):
    _check(*_problem(m, torch.float16, "swiglu"), "swiglu", policy="overlap", block_m=block_m, lag=lag, split_k1=64)


@pytest.mark.gpu
def test_llama_shape_fused_mlp_and_nd_input():
    # LLaMA-3-8B widths at decode size, x [batch, seq, hidden]; against cuBLAS's unfused MLP. M = 6
    # takes the automatic K-splits of both GEMMs.
    hidden, inter = 4096, 14336
    x = torch.randn(2, 3, hidden, device="cuda", dtype=torch.bfloat16)
    wg, wu = [(torch.randn(inter, hidden, device="cuda") / hidden ** 0.5).to(torch.bfloat16) for _ in range(2)]
    wd = (torch.randn(hidden, inter, device="cuda") / inter ** 0.5).to(torch.bfloat16)
    out = cute_ops.fused_mlp(x, cute_ops.pack_gate_up(wg, wu), wd)
    assert out.shape == (2, 3, hidden)
    expected = ref.llama_mlp(x.double(), wg.double(), wu.double(), wd.double())
    torch.testing.assert_close(out.double(), expected, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 64, 1000])
def test_split_k_is_deterministic(m):
    a, b0, b1 = _problem(m, torch.bfloat16, "swiglu", hidden=512, inter=2048, out=256)
    runs = [cute_ops.gemm_pair(a, b0, b1, split_k0=128, split_k1=128) for _ in range(5)]
    assert all(torch.equal(runs[0], r) for r in runs[1:])


@pytest.mark.gpu
@pytest.mark.parametrize("policy", ["sequential", "row_interleaved", "overlap"])
def test_finishes_while_another_kernel_holds_the_sms(policy):
    # A long cuBLAS GEMM is queued first on another stream: its CTAs hold the SMs when gemm_pair's
    # launch begins, and gemm_pair's CTAs get slots only as the GEMM's drain. The result must be
    # right, and the call must finish (a deadlock would hang here).
    a, b0, b1 = _problem(1000, torch.bfloat16, "swiglu", hidden=1024, inter=3072, out=1024)
    cute_ops.gemm_pair(a, b0, b1, policy=policy)  # uploads the order outside the contention
    big = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    hog, mine = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(hog):
        for _ in range(4):
            big @ big
    with torch.cuda.stream(mine):
        out = cute_ops.gemm_pair(a, b0, b1, policy=policy)
        done = torch.cuda.Event()
        done.record()
    deadline = time.monotonic() + 60
    while not done.query():
        assert time.monotonic() < deadline, "gemm_pair did not finish within 60 s"
        time.sleep(0.01)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.double(), _expected(a, b0, b1, "swiglu"), **TOL[torch.bfloat16])


def _green_context(num_sms):
    green = getattr(torch.cuda, "green_contexts", None)
    if green is None or not getattr(green, "SUPPORTED", False):
        pytest.skip("this PyTorch has no CUDA green contexts (needed to confine a launch to a few SMs)")
    return green.GreenContext.create(num_sms=num_sms, device_id=torch.cuda.current_device())


@pytest.mark.gpu
@pytest.mark.parametrize("policy, granularity", [("sequential", "row"), ("row_interleaved", "tile"), ("overlap", "tile")])
@pytest.mark.parametrize("split_k0", [None, 128])
def test_few_co_resident_ctas(policy, granularity, split_k0):
    # A green context confines the launch to 8 SMs (2-3 CTAs each): hundreds of tiles with
    # dependencies run through ~20 slots. With blockIdx-ordered tiles this could deadlock.
    cases = [_problem(m, torch.bfloat16, "swiglu", hidden=512, inter=1536, out=512) for m in (1, 300)]
    kw = dict(policy=policy, granularity=granularity, lag=0, split_k0=split_k0)
    for a, b0, b1 in cases:  # orders uploaded outside the green context
        cute_ops.gemm_pair(a, b0, b1, **kw)
    torch.cuda.synchronize()
    ctx = _green_context(8)
    ctx.set_context()
    try:
        outs = [cute_ops.gemm_pair(a, b0, b1, **kw) for a, b0, b1 in cases]
        torch.cuda.synchronize()
    finally:
        ctx.pop_context()
    for (a, b0, b1), out in zip(cases, outs):
        torch.testing.assert_close(out.double(), _expected(a, b0, b1, "swiglu"), **TOL[torch.bfloat16])


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 300])
def test_cuda_graph_replays_with_new_inputs(m):
    a, b0, b1 = _problem(m, torch.bfloat16, "swiglu")
    holder = {}
    graph = capture_graph(lambda: holder.update(out=cute_ops.gemm_pair(a, b0, b1, split_k0=64, split_k1=64)))
    for _ in range(2):
        a.copy_(torch.randn_like(a, dtype=torch.float32).to(a.dtype))
        b1.copy_(torch.randn_like(b1, dtype=torch.float32).to(b1.dtype) * 0.1)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(holder["out"].double(), _expected(a, b0, b1, "swiglu"), **TOL[torch.bfloat16])


@pytest.mark.gpu
def test_first_call_under_capture_says_what_to_do():
    a, b0, b1 = _problem(5, torch.float16, "none", hidden=72, inter=88, out=24)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="call it once with the same shapes"):
        with torch.cuda.graph(graph):
            cute_ops.gemm_pair(a, b0, b1, "none", policy="row_interleaved", granularity="row")


@pytest.mark.gpu
def test_current_stream_and_opcheck():
    a, b0, b1 = _problem(33, torch.bfloat16, "swiglu")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = cute_ops.gemm_pair(a, b0, b1)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(out.double(), _expected(a, b0, b1, "swiglu"), **TOL[torch.bfloat16])
    torch.library.opcheck(torch.ops.cute_ops.gemm_pair.default, (a, b0, b1), {"split_k0": 128, "split_k1": 64})


@pytest.mark.gpu
def test_torch_compile_fullgraph():
    a, b0, b1 = _problem(24, torch.bfloat16, "swiglu")

    def mlp(x):
        return cute_ops.fused_mlp(x * 2, b0, b1).float().sum(-1)

    torch.testing.assert_close(torch.compile(mlp, fullgraph=True)(a), mlp(a))


@pytest.mark.gpu
def test_zero_rows():
    a, b0, b1 = _problem(1, torch.bfloat16, "swiglu")
    assert cute_ops.gemm_pair(a[:0], b0, b1).shape == (0, OUT)
