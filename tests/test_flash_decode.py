"""flash_decode: reference, fake impl and input checks everywhere; on the GPU, the kernel (split
attention with the merge of the splits, append with RoPE) against a float64 reference, contiguous
and paged caches."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._subclasses import FakeTensorMode

import cute_ops
from cute_ops import reference as ref
from conftest import (CHECK_DEVICES, assert_close_to_reference, capture_graph, decode_lengths, on_device,
                      poison_allocator)

DTYPES = [torch.float16, torch.bfloat16]
# out: at most K_OUT times PyTorch's own error on the same attention in the working dtype (scores,
# probabilities and P @ V each rounded), both against float64 (conftest.assert_close_to_reference).
# Ours rounds P once and the output once, with float32 scores and sums, so it is usually well
# inside PyTorch's error; 2 leaves room for the order of float32 sums.
K_OUT = 2.0
# lse sees no 16-bit rounding past the inputs: float32 scores, row maxima and sums.
LSE_TOL = dict(atol=1e-3, rtol=1e-4)


def _cache(batch, capacity, heads_kv, head_dim, dtype, device, page_size=None):
    """(k_cache, v_cache, block_table): contiguous when page_size is None, else paged with the
    pages of all sequences shuffled over a pool with a few spare pages."""
    if page_size is None:
        k = torch.randn(batch, capacity, heads_kv, head_dim, device=device).to(dtype)
        return k, torch.randn_like(k), None
    pages_per_seq = -(-capacity // page_size)
    num_pages = batch * pages_per_seq + 3
    k = torch.randn(num_pages, page_size, heads_kv, head_dim, device=device).to(dtype)
    table = torch.randperm(num_pages, device=device)[:batch * pages_per_seq].view(batch, pages_per_seq)
    return k, torch.randn_like(k), table.to(torch.int32)


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


# ---------------------------------------------------------------- CPU: reference
def test_reference_over_a_full_cache_is_attention():
    q = torch.randn(2, 3, 8, 64, dtype=torch.float64)
    k_cache, v_cache, _ = _cache(2, 20, 2, 64, torch.float64, "cpu")
    lengths = torch.tensor([20, 20], dtype=torch.int32)
    out, lse, _, _ = ref.decode_attention(q, k_cache, v_cache, lengths)
    expected, expected_lse = ref.attention(q, k_cache, v_cache, causal=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(lse, expected_lse)


def test_reference_paged_equals_contiguous_and_appends():
    torch.manual_seed(0)
    batch, capacity, page = 3, 64, 16
    k_pages, v_pages, table = _cache(batch, capacity, 2, 64, torch.float64, "cpu", page_size=page)
    # The same cache, gathered into the contiguous layout.
    rows = torch.arange(capacity)
    k_flat = torch.stack([k_pages[table[b, rows // page].long(), rows % page] for b in range(batch)])
    v_flat = torch.stack([v_pages[table[b, rows // page].long(), rows % page] for b in range(batch)])
    q = torch.randn(batch, 2, 4, 64, dtype=torch.float64)
    k_new, v_new = torch.randn(batch, 2, 2, 64, dtype=torch.float64), torch.randn(batch, 2, 2, 64, dtype=torch.float64)
    lengths = torch.tensor([0, 17, 62], dtype=torch.int32)
    cos, sin = (f(torch.randn(70, 16, dtype=torch.float64)) for f in (torch.cos, torch.sin))
    a = ref.decode_attention(q, k_pages, v_pages, lengths, k_new, v_new, table, cos, sin)
    b = ref.decode_attention(q, k_flat, v_flat, lengths, k_new, v_new, None, cos, sin)
    torch.testing.assert_close(a[0], b[0])
    torch.testing.assert_close(a[1], b[1])
    s = 17  # the second sequence's appended rows, read back from both layouts
    pages = table[1, torch.arange(s, s + 2) // page].long()
    torch.testing.assert_close(a[3][pages, torch.arange(s, s + 2) % page], v_new[1])
    torch.testing.assert_close(b[3][1, s:s + 2], v_new[1])
    assert not torch.equal(b[2][1, s:s + 2], k_new[1])  # rotated before it is stored


# ---------------------------------------------------------------- CPU: fake impl and checks
def test_fake_impl_shapes_and_meta():
    with FakeTensorMode():
        q = torch.empty(4, 1, 32, 128, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(4, 100, 8, 128, dtype=torch.bfloat16, device="cuda")
        lengths = torch.empty(4, dtype=torch.int32, device="cuda")
        out, lse = torch.ops.cute_ops.flash_decode(q, k, k.clone(), lengths)
        assert out.shape == q.shape and out.dtype == q.dtype
        assert lse.shape == (4, 32, 1) and lse.dtype == torch.float32
    q = _meta(2, 3, 8, 64)
    pages = _meta(10, 16, 2, 64)
    out, lse = torch.ops.cute_ops.flash_decode(q, pages, pages.clone(), _meta(2, dtype=torch.int32),
                                               block_table=_meta(2, 5, dtype=torch.int32))
    assert out.shape == q.shape and lse.shape == (2, 8, 3)


def test_opcheck_on_meta_tensors():
    q = _meta(2, 2, 8, 64)
    k, v = _meta(2, 40, 2, 64), _meta(2, 40, 2, 64)
    new = _meta(2, 2, 2, 64)
    torch.library.opcheck(torch.ops.cute_ops.flash_decode.default, (q, k, v, _meta(2, dtype=torch.int32)),
                          {"k_new": new, "v_new": new.clone(), "num_splits": 3})


def _args(**over):
    a = dict(q=_meta(2, 1, 8, 128), k_cache=_meta(2, 64, 2, 128), v_cache=_meta(2, 64, 2, 128),
             cache_seqlens=_meta(2, dtype=torch.int32))
    a.update(over)
    return a


@pytest.mark.parametrize("over, match", [
    (dict(q=_meta(2, 1, 8, 96)), "head_dim must be one of"),
    (dict(q=_meta(2, 17, 8, 128)), "1 to 16 new tokens"),
    (dict(q=_meta(2, 1, 7, 128)), "multiple of the cache's"),
    (dict(v_cache=_meta(2, 65, 2, 128)), "v_cache must have k_cache's shape"),
    (dict(k_cache=_meta(2, 64, 2, 128, dtype=torch.float16)), "dtype"),
    (dict(cache_seqlens=_meta(2, dtype=torch.int64)), "cache_seqlens must have dtype"),
    (dict(cache_seqlens=_meta(3, dtype=torch.int32)), "one length per sequence"),
    (dict(k_cache=_meta(3, 64, 2, 128), v_cache=_meta(3, 64, 2, 128)), "paged cache needs block_table"),
    (dict(k_cache=_meta(9, 24, 2, 128), v_cache=_meta(9, 24, 2, 128),
          block_table=_meta(2, 4, dtype=torch.int32)), "page_size a\\s+multiple of 16"),
    (dict(k_cache=_meta(0, 16, 2, 128), v_cache=_meta(0, 16, 2, 128),
          block_table=_meta(2, 4, dtype=torch.int32)), "at least one\\s+page"),
    (dict(block_table=_meta(3, 4, dtype=torch.int32)), "block_table must be"),
    (dict(k_new=_meta(2, 1, 2, 128)), "k_new and v_new go together"),
    (dict(k_new=_meta(2, 2, 2, 128), v_new=_meta(2, 2, 2, 128)), "k_new must have shape"),
    (dict(rotary_cos=_meta(100, 64, dtype=torch.float32), rotary_sin=_meta(100, 64, dtype=torch.float32)),
     "need k_new"),
    (dict(k_new=_meta(2, 1, 2, 128), v_new=_meta(2, 1, 2, 128), rotary_cos=_meta(100, 65, dtype=torch.float32),
          rotary_sin=_meta(100, 65, dtype=torch.float32)), "rotary_dim <= head_dim"),
    (dict(num_splits=129), "num_splits must be"),
    (dict(num_splits=-2), "num_splits must be -1"),
    (dict(softmax_scale=float("inf")), "softmax_scale must be a finite float"),
])
@pytest.mark.parametrize("dev", CHECK_DEVICES)
def test_input_checks(over, match, dev):
    a = {name: on_device(t, dev) for name, t in _args(**over).items()}
    with pytest.raises((ValueError, TypeError), match=match):
        cute_ops.flash_decode(**a)
    with pytest.raises((ValueError, TypeError), match=match):  # the op itself, as torch.compile calls it
        torch.ops.cute_ops.flash_decode(**a)


# ---------------------------------------------------------------- GPU: kernels
def _references(q, k_cache, v_cache, lengths, k_new=None, v_new=None, block_table=None, rotary=None,
                causal=True, softmax_scale=None):
    """(float64 reference (out, lse, k_cache, v_cache), PyTorch's out in the working dtype)."""
    cos, sin = rotary if rotary is not None else (None, None)
    args = (q, k_cache, v_cache, lengths, k_new, v_new, block_table, cos, sin, softmax_scale, causal)
    return ref.decode_attention(*args), ref.decode_attention(*args, upcast=False)[0]


def _run_and_check(q, k_cache, v_cache, lengths, *, k_new=None, v_new=None, block_table=None, rotary=None,
                   causal=True, num_splits=0, softmax_scale=None):
    cos, sin = rotary if rotary is not None else (None, None)
    expected, lowp = _references(q, k_cache, v_cache, lengths, k_new, v_new, block_table, rotary, causal,
                                 softmax_scale)
    batch, tokens, heads, dim = q.shape
    poison_allocator(q.numel() * q.element_size(), batch * heads * tokens * 4,
                     128 * batch * heads * tokens * dim * 4, 128 * batch * heads * tokens * 4)
    out, lse = cute_ops.flash_decode(q, k_cache, v_cache, lengths, k_new, v_new, block_table, cos, sin,
                                     softmax_scale=softmax_scale, causal=causal, num_splits=num_splits)
    assert out.shape == q.shape and lse.shape == (batch, heads, tokens)
    assert not out.isnan().any() and not lse.isnan().any(), "unwritten (poisoned) output elements"
    exp_out, exp_lse, exp_k, exp_v = expected
    assert_close_to_reference(out, exp_out, lowp, k=K_OUT)
    torch.testing.assert_close(lse.double(), exp_lse.double(), **LSE_TOL)
    # The caches: appended rows exactly as the reference stores them (rotated keys within one
    # rounding, as the kernel and the reference round the rotation differently), other rows untouched.
    if rotary is None:
        torch.testing.assert_close(k_cache, exp_k, atol=0, rtol=0)
    else:
        # One ulp, plus float32's rounding of the rotation where x1 cos - x2 sin cancels to ~0.
        exp = exp_k.double()
        tol = torch.finfo(q.dtype).eps * exp.abs() + 1e-5 * exp.abs().max()
        assert ((k_cache.double() - exp).abs() <= tol).all(), "rotated keys off by more than one rounding"
    torch.testing.assert_close(v_cache, exp_v, atol=0, rtol=0)
    return out, lse


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("heads_q, heads_kv", [(4, 4), (16, 4), (16, 2)])  # GQA 1, 4, 8
@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("page_size", [None, 16, 64])
def test_flash_decode_matches_reference(page_size, tokens, heads_q, heads_kv, head_dim, dtype):
    batch, capacity = 5, 1000
    k_cache, v_cache, table = _cache(batch, capacity, heads_kv, head_dim, dtype, "cuda", page_size)
    q = torch.randn(batch, tokens, heads_q, head_dim, device="cuda").to(dtype)
    _run_and_check(q, k_cache, v_cache, decode_lengths(batch, capacity), block_table=table)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("page_size", [None, 32])
@pytest.mark.parametrize("rotary", [None, "fp32", "dtype", "partial"])
@pytest.mark.parametrize("tokens", [1, 4, 16])
def test_append_with_and_without_rope(tokens, rotary, page_size, dtype):
    batch, capacity, heads_q, heads_kv, head_dim = 4, 300, 8, 2, 128
    k_cache, v_cache, table = _cache(batch, capacity, heads_kv, head_dim, dtype, "cuda", page_size)
    lengths = torch.tensor([0, 1, 150, capacity - tokens], dtype=torch.int32, device="cuda")
    q = torch.randn(batch, tokens, heads_q, head_dim, device="cuda").to(dtype)
    k_new = torch.randn(batch, tokens, heads_kv, head_dim, device="cuda").to(dtype)
    v_new = torch.randn(batch, tokens, heads_kv, head_dim, device="cuda").to(dtype)
    rot = None
    if rotary is not None:
        rot_dim = 64 if rotary == "partial" else head_dim
        cos_sin = cute_ops.rope_cos_sin_cache(rot_dim, capacity, device="cuda")
        cos, sin = cos_sin[:, :rot_dim // 2], cos_sin[:, rot_dim // 2:]
        if rotary == "dtype":
            cos, sin = cos.to(dtype), sin.to(dtype)
        rot = (cos, sin)
    _run_and_check(q, k_cache, v_cache, lengths, k_new=k_new, v_new=v_new, block_table=table, rotary=rot)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [None, 64])
def test_forced_splits_agree(page_size):
    batch, capacity = 3, 4097
    k_cache, v_cache, table = _cache(batch, capacity, 2, 128, torch.bfloat16, "cuda", page_size)
    q = torch.randn(batch, 2, 8, 128, device="cuda").to(torch.bfloat16)
    lengths = torch.tensor([4097, 1, 2000], dtype=torch.int32, device="cuda")
    results = [_run_and_check(q, k_cache, v_cache, lengths, block_table=table, num_splits=s)
               for s in (1, 2, 7, 33, 128)]
    for out, lse in results[1:]:
        torch.testing.assert_close(out, results[0][0], atol=1e-2, rtol=1e-2)
        torch.testing.assert_close(lse, results[0][1], atol=1e-4, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [None, 64])
def test_batch_invariant_splits_give_each_sequence_its_alone_bits(page_size):
    """num_splits=-1: each sequence's out, lse and appended cache rows are the bits of the same call
    on that sequence alone (B = 1), whatever it is batched with; the default (0) picks its split
    count from the batch, so at 16 sequences it splits the long ones elsewhere than alone does, and
    comparing those is the planted failure that shows the check can fail."""
    batch, capacity, heads_q, heads_kv, d = 16, 4097, 32, 8, 128
    k_cache, v_cache, table = _cache(batch, capacity, heads_kv, d, torch.bfloat16, "cuda", page_size)
    lengths = torch.randint(1, capacity, (batch,), dtype=torch.int32, device="cuda")
    lengths[:4] = torch.tensor([0, 16, 1000, capacity - 1], dtype=torch.int32)
    q = torch.randn(batch, 1, heads_q, d, device="cuda").to(torch.bfloat16)
    k_new, v_new = (torch.randn(batch, 1, heads_kv, d, device="cuda").to(torch.bfloat16) for _ in range(2))
    cos_sin = cute_ops.rope_cos_sin_cache(d, capacity, device="cuda")
    rot = dict(rotary_cos=cos_sin[:, :d // 2].contiguous(), rotary_sin=cos_sin[:, d // 2:].contiguous())

    def run(rows, splits):
        """(out, lse, k rows, v rows) of a call on sequences `rows`, on its own copy of the cache."""
        k, v = k_cache.clone(), v_cache.clone()
        t = None if table is None else table[rows]
        if table is None:
            k, v = k[rows].contiguous(), v[rows].contiguous()
        out, lse = cute_ops.flash_decode(q[rows], k, v, lengths[rows], k_new[rows], v_new[rows], block_table=t,
                                         num_splits=splits, **rot)
        new_rows = lengths[rows].long()  # the appended row of each sequence, read back from its page
        if t is None:
            at = (torch.arange(len(rows), device="cuda"), new_rows)
        else:
            at = (t[torch.arange(len(rows), device="cuda"), new_rows // page_size].long(), new_rows % page_size)
        return out, lse, k[at], v[at]

    everyone = list(range(batch))
    batched, default = run(everyone, -1), run(everyone, 0)
    differs = False
    for b in everyone:
        alone = run([b], -1)
        for got, want in zip(batched, alone):
            assert torch.equal(got[b], want[0]), f"sequence {b} (length {int(lengths[b])}) batched != alone"
        differs |= not torch.equal(default[0][b], alone[0][0])
    assert differs, "the default's split count gave every sequence its alone bits: the check shows nothing"


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("softmax_scale", [0.3, -0.2, 0.0])
def test_options(softmax_scale, causal):
    k_cache, v_cache, _ = _cache(2, 500, 2, 64, torch.float16, "cuda")
    q = torch.randn(2, 5, 4, 64, device="cuda").to(torch.float16)
    lengths = torch.tensor([500, 6], dtype=torch.int32, device="cuda")
    _run_and_check(q, k_cache, v_cache, lengths, causal=causal, softmax_scale=softmax_scale)


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [0, 3])  # 3: rows whose every split is empty, through the merge
def test_empty_cache_and_causal_tokens_without_keys(num_splits):
    # No keys at all: out 0, lse -inf. With 3 tokens over 2 keys (no append), the first token
    # sees none of them under causal masking.
    k_cache, v_cache, _ = _cache(2, 64, 2, 64, torch.bfloat16, "cuda")
    q = torch.randn(2, 3, 2, 64, device="cuda").to(torch.bfloat16)
    lengths = torch.tensor([0, 2], dtype=torch.int32, device="cuda")
    out, lse = _run_and_check(q, k_cache, v_cache, lengths, num_splits=num_splits)
    assert (out[0] == 0).all() and (lse[0] == -math.inf).all()
    assert (out[1, 0] == 0).all() and (lse[1, :, 0] == -math.inf).all()


@pytest.mark.gpu
def test_opcheck():
    k_cache, v_cache, table = _cache(2, 100, 2, 128, torch.bfloat16, "cuda", page_size=16)
    q = torch.randn(2, 2, 8, 128, device="cuda").to(torch.bfloat16)
    new = torch.randn(2, 2, 2, 128, device="cuda").to(torch.bfloat16)
    lengths = torch.tensor([10, 50], dtype=torch.int32, device="cuda")
    torch.library.opcheck(torch.ops.cute_ops.flash_decode.default, (q, k_cache, v_cache, lengths),
                          {"k_new": new, "v_new": new.clone(), "block_table": table})


@pytest.mark.gpu
def test_torch_compile_fullgraph_with_append():
    def step(q, k_cache, v_cache, lengths, k_new, v_new):
        out, lse = cute_ops.flash_decode(q, k_cache, v_cache, lengths, k_new, v_new)
        return out.float() * 2, lse

    k_cache, v_cache, _ = _cache(2, 64, 2, 64, torch.bfloat16, "cuda")
    q = torch.randn(2, 1, 4, 64, device="cuda").to(torch.bfloat16)
    k_new, v_new = (torch.randn(2, 1, 2, 64, device="cuda").to(torch.bfloat16) for _ in range(2))
    lengths = torch.tensor([5, 40], dtype=torch.int32, device="cuda")
    caches = (k_cache.clone(), v_cache.clone())
    expected = step(q, k_cache, v_cache, lengths, k_new, v_new)
    got = torch.compile(step, fullgraph=True)(q, *caches, lengths, k_new, v_new)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(caches, (k_cache, v_cache))  # the appends happened under compile too


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [None, 64])
def test_cuda_graph_replay_with_new_lengths(page_size):
    batch, capacity = 4, 3000
    k_cache, v_cache, table = _cache(batch, capacity, 8, 128, torch.bfloat16, "cuda", page_size)
    q = torch.randn(batch, 1, 32, 128, device="cuda").to(torch.bfloat16)
    k_new, v_new = (torch.randn(batch, 1, 8, 128, device="cuda").to(torch.bfloat16) for _ in range(2))
    lengths = torch.tensor([10, 20, 30, 40], dtype=torch.int32, device="cuda")
    outs = []
    snapshot = (k_cache.clone(), v_cache.clone())
    graph = capture_graph(lambda: outs.append(cute_ops.flash_decode(q, k_cache, v_cache, lengths, k_new, v_new,
                                                                  block_table=table)))
    out, lse = outs[-1]
    for new_lengths in ([1, 2999, 1500, 7], [2000, 0, 333, 2999]):
        k_cache.copy_(snapshot[0]), v_cache.copy_(snapshot[1])
        lengths.copy_(torch.tensor(new_lengths, dtype=torch.int32))
        for t in (q, k_new, v_new):
            t.copy_(torch.randn_like(t))
        (exp_out, exp_lse, exp_k, exp_v), lowp = _references(q, snapshot[0], snapshot[1], lengths, k_new, v_new,
                                                             table)
        graph.replay()
        assert_close_to_reference(out, exp_out, lowp, k=K_OUT)
        torch.testing.assert_close(lse.double(), exp_lse.double(), **LSE_TOL)
        torch.testing.assert_close((k_cache, v_cache), (exp_k, exp_v), atol=0, rtol=0)


@pytest.mark.gpu
def test_split_merge_counters_across_calls_streams_and_graphs():
    # The last split to arrive merges, counted in counters that each launch leaves at zero
    # (common/arrival_counters.h). A counter left nonzero by one call, or shared by two calls in
    # flight at once, leaves rows unmerged (whatever the allocator's block held: never this call's
    # answer, as every call has its own queries) or merged before all splits are in. So calls follow
    # each other on one stream, run on two streams at once (both held back by a sleep), and a graph
    # replays on one stream while eager calls run on the stream it was captured on. 5 tokens x GQA 4
    # = 20 packed rows: two row blocks, two counters a head. A missing reset failed its first
    # version (planted, H100, session 27: the second call on a stream never merges); counters shared
    # by the graph and its capture stream did not fail this version in 3 runs: those calls' CTAs
    # rarely arrive interleaved. (A tighter version, one sequence a call so that two calls' CTAs
    # are resident together and both streams released by one event, is the next thing to try.)
    batch, capacity, splits = 4, 4000, 7
    k_cache, v_cache, table = _cache(batch, capacity, 8, 128, torch.bfloat16, "cuda", 64)
    lengths = torch.tensor([4000, 5, 2500, 3999], dtype=torch.int32, device="cuda")
    queries = [torch.randn(batch, 5, 32, 128, device="cuda").to(torch.bfloat16) for _ in range(12)]

    def call(q):
        return cute_ops.flash_decode(q, k_cache, v_cache, lengths, block_table=table, num_splits=splits)

    def check(q, out, lse):
        (exp_out, exp_lse, _, _), lowp = _references(q, k_cache, v_cache, lengths, None, None, table)
        assert_close_to_reference(out, exp_out, lowp, k=K_OUT)
        torch.testing.assert_close(lse.double(), exp_lse.double(), **LSE_TOL)

    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.cuda._sleep(2_000_000)
    results = []
    for i, q in enumerate(queries):  # back to back on each stream, the two streams at once
        with torch.cuda.stream(streams[i % 2]):
            results.append(call(q))
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    for q, (out, lse) in zip(queries, results):
        check(q, out, lse)

    static_q = queries[0].clone()
    capture_stream = torch.cuda.Stream()
    capture_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture_stream):  # warm-up off the capture
        call(static_q)
    torch.cuda.current_stream().wait_stream(capture_stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture_stream):
        captured = call(static_q)
    eager = []
    for i, q in enumerate(queries[1:5]):
        static_q.copy_(q)
        for s in (streams[0], capture_stream):
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                torch.cuda._sleep(1_000_000)
        with torch.cuda.stream(streams[0]):
            graph.replay()
        with torch.cuda.stream(capture_stream):  # meanwhile, eager calls on the capture's own stream
            eager.append(call(queries[5 + i]))
        torch.cuda.current_stream().wait_stream(streams[0])
        check(q, *captured)
    torch.cuda.current_stream().wait_stream(capture_stream)
    for q, (out, lse) in zip(queries[5:9], eager):
        check(q, out, lse)


def _run_in_subprocess(code: str, **env) -> subprocess.CompletedProcess:
    # A kernel that traps leaves the CUDA context unusable, so each such case gets its own process.
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})


@pytest.mark.gpu
@pytest.mark.parametrize("case, message", [
    ("lengths = torch.tensor([60, 64], dtype=torch.int32, device='cuda'); table = None",
     "sequence 1 needs 65 cache rows"),
    # Sequence 1's only page is 99, in a cache of 4 pages.
    ("lengths = torch.tensor([3, 4], dtype=torch.int32, device='cuda');"
     "table = torch.tensor([[0, 1], [99, 3]], dtype=torch.int32, device='cuda')",
     "block_table\\[1\\]\\[0\\] = 99 is not a page of the cache \\(4 pages\\)"),
    ("lengths = torch.tensor([3, -2], dtype=torch.int32, device='cuda'); table = None",
     "cache_seqlens\\[1\\] = -2 is negative"),
])
def test_trap_mode_stops_with_a_message(case, message):
    # The opt-in debug mode (CUTE_OPS_DEVICE_ERRORS=trap) prints from the kernel and traps.
    proc = _run_in_subprocess(f"""
        import torch, cute_ops
        assert cute_ops.get_device_error_mode() == "trap"
        {case}
        shape = (2, 64, 2, 64) if table is None else (4, 16, 2, 64)
        k = torch.randn(shape, device='cuda', dtype=torch.bfloat16)
        v = torch.randn_like(k)
        q = torch.randn(2, 1, 2, 64, device='cuda', dtype=torch.bfloat16)
        new = torch.randn(2, 1, 2, 64, device='cuda', dtype=torch.bfloat16)
        cute_ops.flash_decode(q, k, v, lengths, new, new.clone(), block_table=table)
        torch.cuda.synchronize()
        print("NO ERROR")
    """, CUTE_OPS_DEVICE_ERRORS="trap")
    assert proc.returncode != 0 and "NO ERROR" not in proc.stdout, proc.stdout + proc.stderr
    assert re.search(message, proc.stdout + proc.stderr), proc.stdout + proc.stderr


# ---------------------------------------------------------------- GPU: bad device data, record mode
BAD_CASES = ["negative", "negative_no_append", "overflow", "overflow_no_append", "bad_page", "negative_page",
             "rotary"]


def _bad_batch(case, page_size):
    """A batch of 4 sequences whose sequence BAD is wrong in the way `case` says, and what the
    error must name: (inputs, bad value, message pattern)."""
    batch, capacity, heads_q, heads_kv, dim, tokens = 4, 320, 8, 2, 64, 2
    paged = case in ("bad_page", "negative_page") or page_size is not None
    k_cache, v_cache, table = _cache(batch, capacity, heads_kv, dim, torch.bfloat16, "cuda",
                                     (page_size or 32) if paged else None)
    lengths = torch.tensor([5, 200, 17, 300], dtype=torch.int32, device="cuda")
    append = not case.endswith("no_append")
    rotary = None
    if case.startswith("negative") and case != "negative_page":
        lengths[BAD], value, message = -3, -3, rf"cache_seqlens\[{BAD}\] = -3 is negative"
    elif case.startswith("overflow"):
        value = capacity - tokens + 1 if append else capacity + 1
        lengths[BAD] = value
        value += tokens if append else 0
        message = rf"sequence {BAD} needs {value} cache rows"
    elif case in ("bad_page", "negative_page"):
        value = -1 if case == "negative_page" else k_cache.shape[0] + 7
        table[BAD, 0] = value  # key 0 of the sequence: read by the attention kernel
        message = rf"block_table\[{BAD}\]\[0\] = {value} is not a page of the cache \({k_cache.shape[0]} pages\)"
    else:  # rotary: the table covers the other sequences' positions, not BAD's
        cos_sin = cute_ops.rope_cos_sin_cache(dim, 250, device="cuda")
        rotary = (cos_sin[:, :dim // 2], cos_sin[:, dim // 2:])
        lengths[3] = 240
        lengths[BAD] = value = 260
        message = rf"position 260 of sequence {BAD} is outside the 250 rows"
    q = torch.randn(batch, tokens, heads_q, dim, device="cuda").to(torch.bfloat16)
    new = [torch.randn(batch, tokens, heads_kv, dim, device="cuda").to(torch.bfloat16) for _ in range(2)]
    kw = dict(k_new=new[0], v_new=new[1]) if append else {}
    if rotary is not None:
        kw.update(rotary_cos=rotary[0], rotary_sin=rotary[1])
    return (q, k_cache, v_cache, lengths, table, kw), value, message


BAD = 2


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("page_size", [None, 32])
@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_sequence_is_recorded_and_isolated(case, page_size, num_splits):
    (q, k_cache, v_cache, lengths, table, kw), value, message = _bad_batch(case, page_size)
    others = [b for b in range(q.shape[0]) if b != BAD]
    k_before, v_before = k_cache.clone(), v_cache.clone()
    out, lse = cute_ops.flash_decode(q, k_cache, v_cache, lengths, block_table=table, num_splits=num_splits, **kw)
    with pytest.raises(cute_ops.DeviceDataError, match=rf"cute_ops\.flash_decode on cuda:\d+: {message}") as info:
        cute_ops.check_errors()
    assert info.value.error.sequence == BAD and info.value.error.value == value
    cute_ops.check_errors()  # reset by the read above
    assert out[BAD].isnan().all() and lse[BAD].isnan().all()

    # The same batch without the bad sequence, on copies of the caches as they were: a contiguous
    # cache loses the bad sequence's row, a paged one keeps its pool and loses its block table row.
    sub = torch.tensor(others, device="cuda")
    sub_kw = {name: t[sub] if name in ("k_new", "v_new") else t for name, t in kw.items()}
    contiguous = table is None
    k_alone = (k_before[sub] if contiguous else k_before).clone()
    v_alone = (v_before[sub] if contiguous else v_before).clone()
    sub_table = None if contiguous else table[sub]
    out_alone, lse_alone = cute_ops.flash_decode(q[sub], k_alone, v_alone, lengths[sub], block_table=sub_table,
                                                 num_splits=num_splits, **sub_kw)
    cute_ops.check_errors()
    # Bit for bit: each sequence's CTAs and split merges are the same computation in both batches.
    assert torch.equal(out[sub], out_alone) and torch.equal(lse[sub], lse_alone)
    if contiguous:
        assert torch.equal(k_cache[sub], k_alone) and torch.equal(v_cache[sub], v_alone)
        assert torch.equal(k_cache[BAD], k_before[BAD]) and torch.equal(v_cache[BAD], v_before[BAD])
    else:  # one pool: the bad sequence's pages untouched, the others' as written without it
        assert torch.equal(k_cache, k_alone) and torch.equal(v_cache, v_alone)
    # And the others are right, not only consistent.
    (exp_out, _, _, _), lowp = _references(q[sub], k_before[sub] if contiguous else k_before,
                                           v_before[sub] if contiguous else v_before, lengths[sub],
                                           block_table=sub_table, **_ref_kw(sub_kw))
    assert_close_to_reference(out_alone, exp_out, lowp, k=K_OUT)

    # The process goes on: a good call afterwards works and reports nothing.
    _run_and_check(q[sub], k_before[sub] if contiguous else k_before.clone(),
                   v_before[sub] if contiguous else v_before.clone(), lengths[sub], block_table=sub_table,
                   **{n: t for n, t in sub_kw.items() if n in ("k_new", "v_new")})
    cute_ops.check_errors()


def _ref_kw(kw):
    """flash_decode's keyword arguments as _references takes them."""
    out = {n: kw[n] for n in ("k_new", "v_new") if n in kw}
    if "rotary_cos" in kw:
        out["rotary"] = (kw["rotary_cos"], kw["rotary_sin"])
    return out


@pytest.mark.gpu
def test_check_errors_peek_and_modes():
    (q, k_cache, v_cache, lengths, table, kw), _, _ = _bad_batch("negative", None)
    cute_ops.check_errors()
    assert cute_ops.read_errors() is None
    cute_ops.flash_decode(q, k_cache, v_cache, lengths, **kw)
    torch.cuda.synchronize()
    peek = cute_ops.read_errors(wait=False, reset=False)  # no device sync, status kept
    assert peek is not None and peek.op == "flash_decode" and peek.sequence == BAD and peek.reports >= 1
    assert cute_ops.read_errors() == peek
    assert cute_ops.read_errors() is None
    assert cute_ops.get_device_error_mode() == "record"
    with pytest.raises(ValueError, match="'record' or 'trap'"):
        cute_ops.set_device_error_mode("ignore")


# ---------------------------------------------------------------- GPU: NaN in the cache
@pytest.mark.gpu
@pytest.mark.parametrize("where", ["k", "v"])
@pytest.mark.parametrize("page_size", [None, 64])
@pytest.mark.parametrize("num_splits", [0, 1, 2, 7, 33, 128])
def test_nan_in_the_cache_reaches_the_output(num_splits, page_size, where):
    # Only an empty row means "no keys": a NaN in one split's K must not vanish in the merge.
    batch, capacity, heads_q, heads_kv, dim = 3, 4097, 8, 2, 128
    k_cache, v_cache, table = _cache(batch, capacity, heads_kv, dim, torch.bfloat16, "cuda", page_size)
    lengths = torch.tensor([4097, 3000, 100], dtype=torch.int32, device="cuda")
    key, head_kv = 2345, 1  # sequence 1's key 2345 of kv head 1: read by one split only
    if table is None:
        (k_cache if where == "k" else v_cache)[1, key, head_kv, 17] = float("nan")
    else:
        page = table[1, key // page_size].long()
        (k_cache if where == "k" else v_cache)[page, key % page_size, head_kv, 17] = float("nan")
    q = torch.randn(batch, 1, heads_q, dim, device="cuda").to(torch.bfloat16)
    out, lse = cute_ops.flash_decode(q, k_cache, v_cache, lengths, block_table=table, num_splits=num_splits)
    (exp_out, exp_lse, _, _), lowp = _references(q, k_cache, v_cache, lengths, block_table=table)
    # A NaN in K makes the scores, so whole rows and their lse, NaN for the query heads of that kv
    # head; one in V only column 17 of their outputs. Ours must put NaN exactly where the float64
    # reference does, and match it everywhere else.
    group = heads_q // heads_kv
    heads = slice(head_kv * group, (head_kv + 1) * group)
    assert exp_out[1, :, heads, 17].isnan().all() and exp_out.isnan().sum() == (group * dim if where == "k" else group)
    assert torch.equal(out.isnan(), exp_out.isnan()), "a NaN in the cache vanished from (or spread in) the output"
    assert torch.equal(lse.isnan(), exp_lse.isnan())
    keep = ~exp_out.isnan()
    assert_close_to_reference(out[keep], exp_out[keep], lowp[keep], k=K_OUT)
    torch.testing.assert_close(lse[~exp_lse.isnan()].double(), exp_lse[~exp_lse.isnan()].double(), **LSE_TOL)


# ---------------------------------------------------------------- GPU: the check can fail
@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [None, 16])
def test_planted_bug_fails_the_comparison(page_size):
    # A kernel that read one wrong 16-key group of V (a wrong page, say) must not pass: our correct
    # output checked against references that read V with keys 512..527 swapped for 96..111 fails.
    batch, capacity = 2, 1024
    k_cache, v_cache, table = _cache(batch, capacity, 2, 128, torch.bfloat16, "cuda", page_size)
    q = torch.randn(batch, 1, 8, 128, device="cuda").to(torch.bfloat16)
    lengths = torch.tensor([1000, 1024], dtype=torch.int32, device="cuda")
    out, _ = cute_ops.flash_decode(q, k_cache, v_cache, lengths, block_table=table)
    (exp_out, _, _, _), lowp = _references(q, k_cache, v_cache, lengths, block_table=table)
    assert_close_to_reference(out, exp_out, lowp, k=K_OUT)  # the real comparison passes
    wrong = v_cache.clone()
    if table is None:
        wrong[1, 512:528] = v_cache[1, 96:112]
    else:
        wrong[table[1, 512 // 16].long()] = v_cache[table[1, 96 // 16].long()]
    (bad_out, _, _, _), bad_lowp = _references(q, k_cache, wrong, lengths, block_table=table)
    with pytest.raises(AssertionError, match="exceeds"):
        assert_close_to_reference(out, bad_out, bad_lowp, k=K_OUT)
