"""gemm_pair / fused_mlp: weight packing, the C++ tile order against the Python model, fake impls
and input checks everywhere; on the GPU, the kernel against a float64 reference for every M the
issue names, dtype, activation, policy, granularity and K-split, under contention and with all but
a few SMs held, in CUDA graphs and torch.compile; and the first call for a shape (the order
upload) neither waiting for the stream nor breaking a graph capture."""
from __future__ import annotations

import functools
import itertools
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import cute_ops
from cute_ops import reference as ref
from cute_ops.gemm_pair_schedule import PairShape, Tiling, make_schedule
from conftest import (CHECK_DEVICES, assert_close_to_reference, capture_graph, gpu_kernel_names, on_device,
                      poison_allocator)

DTYPES = [torch.float16, torch.bfloat16]
M_SIZES = [1, 7, 16, 64, 128, 1000, 4096]
# Odd sizes on purpose: K = 264 is not a multiple of the 64-wide K tile, I = 200 leaves a last
# GEMM0 tile of 8 h columns, N1 = 136 a last GEMM1 tile of 8 columns.
HIDDEN, INTER, OUT = 264, 200, 136
# Outputs are checked with conftest.assert_close_to_reference: the error against the float64 result
# (h not rounded) may be at most ERROR_K times PyTorch's own error on the same math in the working
# dtype, plus half an ulp of the output. The rounding steps of the two:
#   ours:    both GEMMs accumulate in float32 (split-K partials too), the activation is applied in
#            float32, h is rounded once to 16 bits, the output once;
#   PyTorch: each matmul's output is rounded (float32 accumulation), then for "swiglu" silu(gate)
#            and the product are rounded again (h carries 3-4 roundings), for "gelu" the
#            activation (2); GEMM1 rounds its output once, as ours does.
# So our error is at most PyTorch's in distribution, and equal for "none" (the same roundings),
# where the two maxima over as few as 136 outputs (M = 1) are draws of one distribution: ERROR_K = 2
# covers that spread. The planted-bug test shows this bound fails a small bug.
ERROR_K = 2
POLICY_GRANULARITIES = [("sequential", "tile"), ("sequential", "row"), ("row_interleaved", "tile"),
                        ("row_interleaved", "row"), ("overlap", "tile")]
# Every GPU test runs once per kernel kind, forced through the ops' `arch` argument (the
# kernel_arch fixture below); the sm90 kernels exist for these tile configs only.
KERNEL_ARCHS = ["sm80", "sm90"]
SM90_BLOCK_MS = (64, 128, 256)
SM80_BLOCK_MS = (16, 64, 128)


def pytest_generate_tests(metafunc):
    if metafunc.definition.get_closest_marker("gpu"):
        metafunc.parametrize("kernel_arch", KERNEL_ARCHS, indirect=True)


@pytest.fixture(autouse=True)
def kernel_arch(request, monkeypatch):
    """The kernel kind of a GPU test: cute_ops.gemm_pair, and fused_mlp where it runs gemm_pair,
    run with `arch` forced to it, whatever `arch` the caller passes (fused_mlp passes its own).
    The sm90 kinds skip, saying why, on a GPU that is not compute capability 9.x; CPU tests are
    not parametrized (None)."""
    arch = getattr(request, "param", None)
    if arch is None:
        return None
    major, minor = torch.cuda.get_device_capability()
    if arch == "sm90" and major != 9:
        pytest.skip(f"the sm90 gemm_pair kernels run on compute capability 9.x only; this GPU is {major}.{minor}")
    module = sys.modules["cute_ops.gemm_pair"]
    original = module.gemm_pair

    def forced(*args, **kwargs):
        return original(*args, **{**kwargs, "arch": arch})
    monkeypatch.setattr(module, "gemm_pair", forced)
    monkeypatch.setattr(cute_ops, "gemm_pair", forced)
    return arch


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


@pytest.mark.skipif(not cute_ops.schemas_loaded(), reason="cute_ops._C not built")
@pytest.mark.parametrize("dev", CHECK_DEVICES)
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
    (lambda: _args(b1=_meta(24, 128, 2)[..., 0]), "b1 must be contiguous", ValueError),
    (lambda: _args(b1=_meta(24)), "b1 must have 2 dims", ValueError),
    (lambda: _args(a=_meta(3, 68)[:, :64]),
     "row stride that is a multiple of 8", ValueError),
    (lambda: _args(activation="relu"), "activation must be one of", ValueError),
    (lambda: _args(policy="random"), "policy must be one of", ValueError),
    (lambda: _args(granularity="column"), "granularity must be one of", ValueError),
    (lambda: _args(policy="overlap", granularity="row"), "'overlap' policy needs granularity 'tile'", ValueError),
    (lambda: _args(split_k1=96), r"split_k1 must be -1 \(None: automatic\), 0 \(no split\) or a multiple of 64",
     ValueError),
    (lambda: _args(split_k0=100), "split_k0 must be -1", ValueError),
    (lambda: _args(block_m=32), r"block_m must be 0 \(None: automatic\) or one of \(16, 64, 128, 256\)", ValueError),
    (lambda: _args(lag=-2), "lag must be -1", ValueError),
    (lambda: _args(a=_meta(3, 128)[:, :64]), None, None),  # a strided view with aligned rows is fine
    (lambda: _args(a=_meta(0, 64)), None, None),  # no rows: an empty output
])
def test_input_checks(make, match, exc, dev):
    a, b0, b1, kw = make()
    a, b0, b1 = (on_device(t, dev) for t in (a, b0, b1))
    if exc is None:
        assert cute_ops.gemm_pair(a, b0, b1, **kw).shape == (a.shape[0], 24)
        return
    with pytest.raises(exc, match=match):
        cute_ops.gemm_pair(a, b0, b1, **kw)


@pytest.mark.parametrize("kw, match", [
    ({"kernel": "cublas"}, r"kernel must be one of \('auto', 'gemm_pair', 'gemv'\)"),
    ({"kernel": "gemv", "policy": "overlap"}, "kernel='gemv' takes none of them"),
    ({"kernel": "gemv", "split_k1": 64}, "kernel='gemv' takes none of them"),
    ({"kernel": "gemv", "rows": 9}, "kernel='gemv' takes at most 8 rows of x, got 9; use kernel='auto' or 'gemm_pair'"),
])
def test_fused_mlp_kernel_argument(kw, match):
    # Refused before any kernel runs, so CPU tensors show it.
    x, b0, b1 = _problem(kw.pop("rows", 2), torch.bfloat16, "swiglu", device="cpu")
    with pytest.raises(ValueError, match=match):
        cute_ops.fused_mlp(x, b0, b1, **kw)


@pytest.mark.skipif(not cute_ops.schemas_loaded(), reason="cute_ops._C not built")
def test_sizes_past_32_bit_indexing_are_rejected():
    # Meta tensors only: the CUDA impl runs the same check before allocating anything.
    a, b0, b1 = _meta((1 << 30) + 8, 64), _meta(256, 64), _meta(24, 128)
    with pytest.raises(ValueError, match=r"at most 2\^30"):
        torch.ops.cute_ops.gemm_pair(a, b0, b1)


@pytest.mark.skipif(not cute_ops.schemas_loaded(), reason="cute_ops._C not built")
@pytest.mark.parametrize("dev", CHECK_DEVICES)
@pytest.mark.parametrize("control, num_ctas, match", [
    (_meta(2, dtype=torch.int64), 1, "contiguous int32 tensor of at least 2"),
    (_meta(1, dtype=torch.int32), 1, "contiguous int32 tensor of at least 2"),
    (_meta(4, dtype=torch.int32)[::2], 1, "contiguous int32 tensor of at least 2"),
    (_meta(2, dtype=torch.int32), 0, r"num_ctas must be in \[1, "),
])
def test_hold_sms_input_checks(control, num_ctas, match, dev):
    with pytest.raises(ValueError, match=match):
        torch.ops.cute_ops._hold_sms(on_device(control, dev), num_ctas)


@pytest.mark.skipif(not cute_ops.schemas_loaded(), reason="cute_ops._C not built")
def test_hold_sms_fake_impl():
    assert torch.ops.cute_ops._hold_sms(torch.empty(2, dtype=torch.int32, device="meta"), 4) is None


# ---------------------------------------------------------------- GPU
def _problem(m, dtype, activation, hidden=HIDDEN, inter=INTER, out=OUT, device="cuda"):
    """(a, b0, b1) with unit-scale outputs: weights scaled by 1/sqrt(fan-in)."""
    a = torch.randn(m, hidden, device=device).to(dtype)
    n0 = 2 * inter if activation == "swiglu" else inter
    b0 = (torch.randn(n0, hidden, device=device) / hidden ** 0.5).to(dtype)
    b1 = (torch.randn(out, inter, device=device) * (2 / inter) ** 0.5).to(dtype)
    return a, b0, b1


def _assert_matches(out, a, b0, b1, activation="swiglu"):
    """out against act(a @ b0.T) @ b1.T: the float64 result, bounded by PyTorch's error in a's dtype."""
    assert out.shape == (a.shape[0], b1.shape[0]) and out.dtype == a.dtype
    expected = ref.gemm_pair(a.double(), b0.double(), b1.double(), activation)
    lowp = ref.gemm_pair(a, b0, b1, activation)  # PyTorch in the working dtype
    assert_close_to_reference(out, expected, lowp, k=ERROR_K)


def _check(a, b0, b1, activation, **kw):
    poison_allocator(a.shape[0] * b1.shape[0] * a.element_size())
    out = cute_ops.gemm_pair(a, b0, b1, activation, **kw)
    _assert_matches(out, a, b0, b1, activation)
    return out


_fresh_widths = itertools.count(100)


def _fresh_b1(like):
    """A b1 like `like` whose n1 no other call in this process has used: its order table is new."""
    n1 = 8 * next(_fresh_widths)  # 800, 808, ...: no other test uses these widths
    return (torch.randn(n1, like.shape[1], device=like.device) * (2 / like.shape[1]) ** 0.5).to(like.dtype)


def _within(seconds, done) -> bool:
    """Polls done() until it is true (True) or `seconds` have passed (False): a GPU hang fails a
    test instead of hanging it."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["swiglu", "gelu", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", M_SIZES)
def test_matches_reference(m, dtype, activation):
    _check(*_problem(m, dtype, activation), activation)


@pytest.mark.gpu
@pytest.mark.parametrize("bug", ["b1_row", "h_group_swap"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_check_fails_a_small_bug(dtype, bug):
    # Our output passes against the true references and fails against references of a slightly
    # different problem, as a small bug in the kernel would make it: one output column's weights
    # (a row of b1) off by 10% of their spread, or two neighbouring 8-column groups of h's weights
    # swapped (one 16-byte vector read from the wrong place).
    a, b0, b1 = _problem(64, dtype, "swiglu")
    out = _check(a, b0, b1, "swiglu")
    wrong = b1.clone()
    if bug == "b1_row":
        wrong[17] += (0.1 * b1.float().std() * torch.randn_like(b1[17], dtype=torch.float32)).to(dtype)
    else:
        wrong[:, 64:72], wrong[:, 72:80] = b1[:, 72:80], b1[:, 64:72]
    with pytest.raises(AssertionError, match="exceeds"):
        _assert_matches(out, a, b0, wrong)


@pytest.mark.gpu
@pytest.mark.parametrize("policy, granularity", POLICY_GRANULARITIES)
@pytest.mark.parametrize("split_k0, split_k1", [(None, None), (0, 0), (0, 64), (72, 64), (128, None)])
@pytest.mark.parametrize("m", M_SIZES)
def test_every_policy_and_granularity(m, policy, granularity, split_k0, split_k1, kernel_arch):
    # split_k0 = 72 leaves K = 264 in splits of 72, 72, 72 and 48 columns (partial K tiles). The
    # sm90 kernels refuse it (their K tile is 64 columns) and take 192: splits of 192 and 72.
    if kernel_arch == "sm90" and split_k0 == 72:
        with pytest.raises(ValueError, match="with arch 'sm90', split_k0 must be a multiple of 64"):
            cute_ops.gemm_pair(*_problem(m, torch.bfloat16, "swiglu"), split_k0=72)
        split_k0 = 192
    _check(*_problem(m, torch.bfloat16, "swiglu", inter=456), "swiglu", policy=policy,
           granularity=granularity, split_k0=split_k0, split_k1=split_k1)


@pytest.mark.gpu
@pytest.mark.parametrize("block_m", [16, 64, 128, 256])
@pytest.mark.parametrize("lag", [0, 2, 1000])
@pytest.mark.parametrize("m", [1, 100, 600])
def test_forced_tile_configs_and_overlap_lag(m, block_m, lag, kernel_arch):
    if block_m not in (SM90_BLOCK_MS if kernel_arch == "sm90" else SM80_BLOCK_MS):
        with pytest.raises(ValueError, match=f"this build has no {kernel_arch} kernel for float16, block_m {block_m}"):
            cute_ops.gemm_pair(*_problem(m, torch.float16, "swiglu"), block_m=block_m)
        return
    _check(*_problem(m, torch.float16, "swiglu"), "swiglu", policy="overlap", block_m=block_m, lag=lag, split_k1=64)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["gemm_pair", "auto"])
def test_llama_shape_fused_mlp_and_nd_input(kernel):
    # LLaMA-3-8B widths at decode size, x [batch, seq, hidden]; against the unfused MLP. M = 6
    # takes the automatic K-splits of both GEMMs under "gemm_pair", the two gemvs under "auto".
    hidden, inter = 4096, 14336
    x = torch.randn(2, 3, hidden, device="cuda", dtype=torch.bfloat16)
    wg, wu = [(torch.randn(inter, hidden, device="cuda") / hidden ** 0.5).to(torch.bfloat16) for _ in range(2)]
    wd = (torch.randn(hidden, inter, device="cuda") / inter ** 0.5).to(torch.bfloat16)
    poison_allocator(6 * hidden * 2, 6 * inter * 2)
    out = cute_ops.fused_mlp(x, cute_ops.pack_gate_up(wg, wu), wd, kernel=kernel)
    assert out.shape == (2, 3, hidden)
    assert_close_to_reference(out, ref.llama_mlp(x.double(), wg.double(), wu.double(), wd.double()),
                              ref.llama_mlp(x, wg, wu, wd), k=ERROR_K)


# (hidden, intermediate) of other models' MLPs: TinyLlama-1.1B, LLaMA-2-13B, LLaMA-3-70B.
MODEL_WIDTHS = [(2048, 5632), (5120, 13824), (8192, 28672)]
MODEL_M_SIZES = [1, 3, 16, 64, 127, 128, 1000, 4096]


@functools.lru_cache(maxsize=2)
def _model_weights(hidden, inter, dtype, activation):
    """(b0, b1) of one model's MLP, made once per module for the tests below (the largest is 1.4 GB)."""
    _, b0, b1 = _problem(1, dtype, activation, hidden=hidden, inter=inter, out=hidden)
    return b0, b1


@pytest.mark.gpu
@pytest.mark.parametrize("m", MODEL_M_SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden, inter", MODEL_WIDTHS)
def test_other_model_widths(hidden, inter, dtype, m):
    b0, b1 = _model_weights(hidden, inter, dtype, "swiglu")
    _check(torch.randn(m, hidden, device="cuda").to(dtype), b0, b1, "swiglu")


@pytest.mark.gpu
@pytest.mark.parametrize("m", [3, 127])
@pytest.mark.parametrize("activation", ["gelu", "none"])
@pytest.mark.parametrize("hidden, inter", MODEL_WIDTHS)
def test_other_model_widths_ungated(hidden, inter, activation, m):
    b0, b1 = _model_weights(hidden, inter, torch.bfloat16, activation)
    _check(torch.randn(m, hidden, device="cuda").to(torch.bfloat16), b0, b1, activation)


@pytest.mark.gpu
def test_two_streams_at_once():
    # Calls in flight on two streams at the same time (each stream's work held back by a sleep,
    # then released together) must not share counters, h or partials: each matches on its own.
    # Two shapes per stream, one of them on both, split and unsplit.
    problems = [_problem(m, torch.bfloat16, "swiglu", hidden=1024, inter=2048, out=512) for m in (1, 300, 1, 300)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    outs = [None] * len(problems)
    for s in streams:
        with torch.cuda.stream(s):
            torch.cuda._sleep(SLEEP_CYCLES // 20)
    for i, (a, b0, b1) in enumerate(problems):
        with torch.cuda.stream(streams[i % 2]):
            outs[i] = [cute_ops.gemm_pair(a, b0, b1, split_k0=split, split_k1=split) for split in (None, 0, 128)]
    torch.cuda.synchronize()
    for (a, b0, b1), results in zip(problems, outs):
        for out in results:
            _assert_matches(out, a, b0, b1)


def _counter_sequence(arch):
    """The body of test_counters_left_zero_for_the_next_call, run in a child process. Every call
    gets fresh inputs (x new, the weights kept) into NaN-poisoned memory, so a GEMM1 tile that read
    h early would read another call's h or NaN, never this call's."""
    torch.manual_seed(0)
    gemm_pair = functools.partial(cute_ops.gemm_pair, arch=arch) if arch else cute_ops.gemm_pair
    hidden, inter, n1 = 1024, 2048, 512
    # (M, split_k0, split_k1, two launches): M = 600 and 1000 take 256-row tiles where sm90 runs.
    shapes = [(1, None, None, False), (300, 0, 0, False), (7, 128, 128, False), (1000, None, None, True),
              (64, 256, None, False), (600, None, None, False), (1, 0, 128, True)]
    weights = [_problem(1, torch.bfloat16, "swiglu", hidden=hidden, inter=inter, out=n1)[1:] for _ in shapes]
    largest = max(m for m, *_ in shapes)
    h_bytes, out_bytes = largest * inter * 2, largest * n1 * 2

    def run_all(inputs=None):
        """One call per shape, on fresh x unless `inputs` are given: [(out, x, b0, b1)]."""
        inputs = inputs or [torch.randn(m, hidden, device="cuda").to(torch.bfloat16) for m, *_ in shapes]
        calls = []
        for x, (b0, b1), (_, s0, s1, two) in zip(inputs, weights, shapes):
            poison_allocator(h_bytes, out_bytes)
            calls.append((gemm_pair(x, b0, b1, split_k0=s0, split_k1=s1, separate_launches=two), x, b0, b1))
        return calls

    def finished(*streams):
        events = [s.record_event() for s in streams]
        return _within(60.0, lambda: all(e.query() for e in events))

    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    side.wait_stream(main)
    calls = run_all() + run_all()
    with torch.cuda.stream(side):
        calls += run_all()
    assert finished(main, side), "eager gemm_pair calls did not finish"
    captured_x = [torch.randn(m, hidden, device="cuda").to(torch.bfloat16) for m, *_ in shapes]
    holder = {}
    graph = capture_graph(lambda: holder.update(calls=run_all(captured_x)))
    for _ in range(2):
        for x in captured_x:  # new values in the captured inputs, so each replay has new results
            x.copy_(torch.randn(x.shape, device="cuda"))
        graph.replay()
        calls += [(out.clone(), x.clone(), b0, b1) for out, x, b0, b1 in holder["calls"]]
        calls += run_all()
    assert finished(main), "gemm_pair calls between graph replays did not finish"
    for out, x, b0, b1 in calls:
        _assert_matches(out, x, b0, b1)


# The rows the op gives the sm90 64-row tiles, stated here apart from the op's rule so that a wrong
# threshold fails: measured on the H100 and H200 (perf notes, sessions 36 and 38).
SM90_SMALL_ROWS = (9, 64)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 9, 16, 32, 33, 64])
@pytest.mark.parametrize("block_m", [0, 64])
def test_automatic_kind_at_decode_sizes(m, block_m):
    # The op's own choice at decode sizes (small_on_sm90 in gemm_pair_op.cpp), with the tile
    # height left to it (0) or given: the kernel it launches is the one of the kind and tile
    # height expected, told apart by name (the two kinds' results need not differ in any bit).
    # The raw op, so the kernel_arch fixture's forced kind does not apply (it runs twice).
    major, minor = torch.cuda.get_device_capability()
    if major != 9:
        pytest.skip(f"the op chooses between kernel kinds on compute capability 9.x only; this GPU is {major}.{minor}")
    a, b0, b1 = _problem(m, torch.bfloat16, "swiglu", hidden=512, inter=1024, out=256)

    def names(arch, rows):
        return gpu_kernel_names(lambda: torch.ops.cute_ops.gemm_pair(a, b0, b1, "swiglu", "sequential", "tile",
                                                                      -1, -1, rows, -1, False, arch))
    if SM90_SMALL_ROWS[0] <= m <= SM90_SMALL_ROWS[1]:
        chosen = ("sm90", 64)
    else:
        chosen = ("sm80", block_m or (16 if m <= 16 else 64))
    expected = names(*chosen)
    if not expected:
        pytest.skip("the profiler recorded no kernels here (CUPTI taken by another tool?)")
    assert names("auto", block_m) == expected, f"M = {m}, block_m {block_m}: expected the {chosen[0]} kernels, {chosen[1]} rows"
    assert expected != names("sm90" if chosen[0] == "sm80" else "sm80", 64), "the kinds' kernel names do not differ"


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 3, 8, 9, 17])
def test_fused_mlp_kernel_choice(m):
    # fused_mlp's "auto": the two gemvs at 1 <= M <= gemv.MAX_ROWS with gemm_pair's settings left
    # alone, gemm_pair otherwise; told apart by the kernels launched (torch.profiler), and the
    # gemv route's result is exactly the two gemv calls'.
    from cute_ops.gemv import MAX_ROWS
    x, b0, b1 = _problem(m, torch.bfloat16, "swiglu", hidden=512, inter=1024, out=256)

    def two_gemvs(rows=x[:MAX_ROWS]):  # (the kernels' names need at most MAX_ROWS rows)
        return cute_ops.gemv(cute_ops.gemv(rows, b0, activation="swiglu"), b1)

    gemv_names = gpu_kernel_names(two_gemvs)
    if not gemv_names:
        pytest.skip("the profiler recorded no kernels here (CUPTI taken by another tool?)")
    pair_names = gpu_kernel_names(lambda: cute_ops.fused_mlp(x, b0, b1, kernel="gemm_pair"))
    assert set(pair_names).isdisjoint(gemv_names)
    auto_names = gpu_kernel_names(lambda: cute_ops.fused_mlp(x, b0, b1))
    if m <= MAX_ROWS:
        assert auto_names == gemv_names, f"M = {m}: fused_mlp ran {auto_names}, not the two gemvs"
        assert torch.equal(cute_ops.fused_mlp(x, b0, b1), two_gemvs())
        assert torch.equal(cute_ops.fused_mlp(x, b0, b1, kernel="gemv"), two_gemvs())
        # A gemm_pair setting given: "auto" runs gemm_pair.
        given = gpu_kernel_names(lambda: cute_ops.fused_mlp(x, b0, b1, split_k1=128))
        assert set(given).isdisjoint(gemv_names), f"M = {m} with split_k1: fused_mlp ran {given}"
    else:
        assert auto_names == pair_names, f"M = {m}: fused_mlp ran {auto_names}, not gemm_pair"
        with pytest.raises(ValueError, match=f"kernel='gemv' takes at most {MAX_ROWS} rows of x, got {m}"):
            cute_ops.fused_mlp(x, b0, b1, kernel="gemv")
    _assert_matches(cute_ops.fused_mlp(x, b0, b1), x, b0, b1)


@pytest.mark.gpu
def test_counters_left_zero_for_the_next_call(kernel_arch):
    # No memset before a launch: each launch leaves its stream's counters at zero (its last CTA
    # resets them). A counter left nonzero would hand the next call's CTAs tickets past its order
    # table (tiles skipped: GEMM1 tiles then wait forever for them) or let its GEMM1 tiles read h
    # early. So calls of different sizes, splits and launch counts follow each other on one
    # stream, then on a second stream, then inside a graph that replays between eager calls. In a
    # child process: once the GPU hangs, the next call's host side blocks too (a new order table's
    # cudaMalloc waits for the device), so only killing the process turns a hang into a failure.
    tests = os.path.dirname(os.path.abspath(__file__))
    code = (f"import sys; sys.path.insert(0, {tests!r}); import test_gemm_pair as t; "
            f"t._counter_sequence({kernel_arch!r}); print('sequence ok')")
    try:
        r = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(tests), capture_output=True, text=True,
                           timeout=120)
    except subprocess.TimeoutExpired as e:
        pytest.fail("the calls did not finish in 120 s: a launch left a counter set (or the GPU hung)\n"
                    f"{(e.stdout or '')[-2000:]}{(e.stderr or '')[-2000:]}")
    assert r.returncode == 0 and "sequence ok" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]


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
    cute_ops.gemm_pair(a, b0, b1, policy=policy)  # loads the kernel outside the contention
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
    assert _within(60, done.query), "gemm_pair did not finish within 60 s"
    torch.cuda.synchronize()
    _assert_matches(out, a, b0, b1)


# ---------------------------------------------------------------- GPU: few co-resident CTAs
FREE_SMS = 8


def _run_with_sms_held(launch, free_sms=FREE_SMS, seconds=60.0):
    """Calls launch() (which queues work on the current stream) while all but `free_sms` SMs are
    held by torch.ops.cute_ops._hold_sms, and returns its result once that work has finished.

    Each holder CTA takes an SM's whole shared memory, so no other CTA fits beside it. The holders
    are launched on their own stream and counted resident (a copy of their counter on a third
    stream, which does not wait for them) before launch() runs; they are released by a host-to-
    device copy on a fourth stream (a copy engine needs no SM). Work that does not finish while
    the SMs are held fails the test; work that does not finish even after the release ends the
    process, since every later synchronisation would hang."""
    holders = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count - free_sms
    hold_stream, read_stream, release_stream = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(hold_stream):  # not from the caller's stream's cached blocks
        control = torch.zeros(2, dtype=torch.int32, device="cuda")  # [holders resident, release]
    resident = torch.zeros(1, dtype=torch.int32).pin_memory()
    release = torch.ones(1, dtype=torch.int32).pin_memory()
    held, done = torch.cuda.Event(), torch.cuda.Event()
    torch.cuda.synchronize()  # nothing else runs when the holders take their SMs

    def all_resident():
        with torch.cuda.stream(read_stream):
            resident.copy_(control[:1], non_blocking=True)
        read_stream.synchronize()
        return resident.item() == holders

    with torch.cuda.stream(hold_stream):
        torch.ops.cute_ops._hold_sms(control, holders)
        held.record()
    try:
        assert _within(10, all_resident), \
            f"only {resident.item()} of {holders} SM holders became resident within 10 s (is the GPU shared?)"
        result = launch()
        done.record()
        finished = _within(seconds, done.query)
    finally:
        with torch.cuda.stream(release_stream):
            control[1:].copy_(release, non_blocking=True)
    if not _within(seconds, lambda: done.query() and held.query()):
        # Any later synchronisation (a fixture's teardown, pytest.exit's session teardown) would
        # hang on the stuck kernel: leave the process, which ends its CUDA context.
        sys.stderr.write(f"\nFATAL: work launched with {free_sms} free SMs still runs {seconds:.0f} s after the SM "
                         f"holders were released; the GPU is stuck, exiting\n")
        sys.stderr.flush()
        os._exit(1)
    assert finished, f"work did not finish within {seconds:.0f} s on {free_sms} free SMs (deadlock?), but did " \
                     f"once the other SMs were released"
    torch.cuda.synchronize()
    return result


@pytest.mark.gpu
@pytest.mark.parametrize("policy, granularity", POLICY_GRANULARITIES)
@pytest.mark.parametrize("split_k0", [None, 128])
def test_few_co_resident_ctas(policy, granularity, split_k0):
    # All SMs but 8 are held, so hundreds of tiles with dependencies run through the 8-24 CTA slots
    # of 8 SMs. With blockIdx-ordered tiles this could deadlock; with tickets it cannot
    # (docs/gemm_pair.md). On an H100, M = 1 makes 128 tiles (320 with split_k0 = 128), M = 300 384 (960).
    cases = [_problem(m, torch.bfloat16, "swiglu", hidden=512, inter=4096, out=512) for m in (1, 300)]
    kw = dict(policy=policy, granularity=granularity, lag=0, split_k0=split_k0)
    work = torch.cuda.Stream()
    with torch.cuda.stream(work):
        # Once before the SMs are held: loads the kernels (CUDA's lazy loading may synchronise the
        # context, which would wait for the holders) and caches this stream's blocks of these sizes.
        for a, b0, b1 in cases:
            cute_ops.gemm_pair(a, b0, b1, **kw)
        poison_allocator(*(a.shape[0] * b1.shape[0] * a.element_size() for a, _, b1 in cases))

        outs = _run_with_sms_held(lambda: [cute_ops.gemm_pair(a, b0, b1, **kw) for a, b0, b1 in cases])
    for (a, b0, b1), out in zip(cases, outs):
        _assert_matches(out, a, b0, b1)


@pytest.mark.gpu
def test_hold_sms_checks_its_arguments():
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    control = torch.zeros(2, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=rf"num_ctas must be in \[1, {sms}\]"):
        torch.ops.cute_ops._hold_sms(control, sms + 1)


# ---------------------------------------------------------------- GPU: graphs, streams, first calls
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
        _assert_matches(holder["out"], a, b0, b1)


SLEEP_CYCLES = 1_000_000_000  # torch.cuda._sleep: 0.5 s at 2 GHz, longer at lower clocks


@pytest.mark.gpu
def test_first_call_for_a_new_shape_does_not_wait_for_the_stream():
    # A serving loop meets a batch size it has not seen: building and uploading that shape's tile
    # order must not make the host wait for the work already queued on the stream.
    kw = dict(split_k0=0, split_k1=64)
    a, b0, b1 = _problem(5, torch.bfloat16, "swiglu")
    cute_ops.gemm_pair(a, b0, b1, **kw)  # loads this kernel; creates the upload stream and staging buffer
    b1_new = _fresh_b1(b1)
    torch.cuda._sleep(1)  # loads the sleep kernel
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    start = time.monotonic()
    out = cute_ops.gemm_pair(a, b0, b1_new, **kw)
    returned_after = time.monotonic() - start
    busy = not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    assert busy, (f"the first call for a new shape returned after {returned_after:.3f} s, when the stream had "
                  f"already run the ~0.5 s sleep queued before it: the call waited for the stream")
    _assert_matches(out, a, b0, b1_new)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 300])
def test_first_call_for_a_shape_inside_graph_capture(m):
    # The first call for a shape may come during capture: its order is uploaded then (the capture
    # waits on the host for that copy), and the graph replays it with new inputs.
    kw = dict(split_k0=64, split_k1=64)
    a, b0, b1 = _problem(m, torch.bfloat16, "swiglu")
    cute_ops.gemm_pair(a, b0, b1, **kw)  # loads this kernel: what is new in the capture is the shape
    b1_new = _fresh_b1(b1)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = cute_ops.gemm_pair(a, b0, b1_new, **kw)
    for _ in range(2):
        a.copy_(torch.randn_like(a, dtype=torch.float32).to(a.dtype))
        b1_new.copy_(torch.randn_like(b1_new, dtype=torch.float32).to(b1_new.dtype) * 0.1)
        graph.replay()
        torch.cuda.synchronize()
        _assert_matches(out, a, b0, b1_new)


@pytest.mark.gpu
def test_first_call_on_another_thread_does_not_break_a_capture():
    # While the main thread captures a graph in global mode (PyTorch's default, under which any
    # thread's capture-unsafe CUDA call invalidates the capture), another thread makes the first
    # call for a table: its cudaMalloc, pinned staging and event waits run in relaxed capture mode.
    kw = dict(split_k0=0, split_k1=64)
    a, b0, b1 = _problem(5, torch.bfloat16, "swiglu")
    b1_other = _fresh_b1(b1)
    side, capturing = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(side):
        # The same sizes with another policy (another table): loads the kernel and leaves blocks of
        # these sizes cached for `side`, so that PyTorch's allocator does not cudaMalloc during the
        # capture (it would, on a stream that is not capturing, and that is PyTorch's call, not ours).
        cute_ops.gemm_pair(a, b0, b1_other, policy="row_interleaved", **kw)
    with torch.cuda.stream(capturing):
        cute_ops.gemm_pair(a, b0, b1, **kw)  # the captured call is warm
    torch.cuda.synchronize()

    result, started = {}, threading.Event()

    def other_thread():
        try:
            started.wait(30)
            with torch.cuda.device(a.device), torch.cuda.stream(side):
                result["out"] = cute_ops.gemm_pair(a, b0, b1_other, policy="sequential", **kw)
        except BaseException as e:  # reported by the main thread
            result["error"] = e

    thread = threading.Thread(target=other_thread)
    thread.start()
    graph = torch.cuda.CUDAGraph()
    # capture_begin rather than torch.cuda.graph, which empties the allocator's cache first.
    with torch.cuda.stream(capturing):
        graph.capture_begin(capture_error_mode="global")
        try:
            started.set()
            thread.join(60)
            mine = cute_ops.gemm_pair(a, b0, b1, **kw)
        finally:
            capture_error = None
            try:
                graph.capture_end()
            except RuntimeError as e:
                capture_error = e
    assert not thread.is_alive(), "the other thread's call did not return within 60 s"
    assert "error" not in result, f"the other thread's first call failed: {result.get('error')!r}"
    assert capture_error is None, f"the capture was broken by the other thread's first call: {capture_error}"
    torch.cuda.synchronize()
    _assert_matches(result["out"], a, b0, b1_other)
    a.copy_(torch.randn_like(a, dtype=torch.float32).to(a.dtype))
    graph.replay()
    torch.cuda.synchronize()
    _assert_matches(mine, a, b0, b1)


@pytest.mark.gpu
def test_current_stream_and_opcheck():
    a, b0, b1 = _problem(33, torch.bfloat16, "swiglu")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = cute_ops.gemm_pair(a, b0, b1)
    torch.cuda.current_stream().wait_stream(side)
    _assert_matches(out, a, b0, b1)
    torch.library.opcheck(torch.ops.cute_ops.gemm_pair.default, (a, b0, b1), {"split_k0": 128, "split_k1": 64})


@pytest.mark.gpu
@pytest.mark.parametrize("m", [4, 24])  # fused_mlp's two routes: the gemvs, gemm_pair
def test_torch_compile_fullgraph(m):
    # Compiled, fused_mlp takes the route it takes eagerly: its results equal that route's bit
    # for bit (both are deterministic).
    a, b0, b1 = _problem(m, torch.bfloat16, "swiglu")
    route = "gemv" if m <= 8 else "gemm_pair"

    def mlp(x):
        return cute_ops.fused_mlp(x * 2, b0, b1).float() + 1

    expected = cute_ops.fused_mlp(a * 2, b0, b1, kernel=route).float() + 1
    assert torch.equal(torch.compile(mlp, fullgraph=True)(a), expected)


@pytest.mark.gpu
def test_zero_rows():
    a, b0, b1 = _problem(1, torch.bfloat16, "swiglu")
    assert cute_ops.gemm_pair(a[:0], b0, b1).shape == (0, OUT)
