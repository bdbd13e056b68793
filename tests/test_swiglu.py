"""swiglu: silu(gate) * up over a gate/up product in pack_gate_up's column order. Its input rules
and shape inference on meta tensors everywhere; on the GPU, against a float64 reference at odd
sizes (one row, a partial last gate/up block, output rows that are not whole 16-byte vectors,
strided and n-d inputs), outputs poisoned, a planted bug failing the bound, in a CUDA graph and
under torch.compile."""
from __future__ import annotations

import pytest
import torch

import cute_ops
from cute_ops import reference as ref
from conftest import CHECK_DEVICES, assert_close_to_reference, capture_graph, on_device, poison_allocator

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# The bound of conftest.assert_close_to_reference: our output is rounded once from float32 where
# PyTorch's F.silu(gate) * up rounds twice, so for 16-bit types ours is within PyTorch's error plus
# half an ulp (k = 1). In float32 the rounding is no longer what dominates: the kernel's fast-math
# exp and division (a few ulp) against PyTorch's exact-rounded ones, hence k = 8 there.
ERROR_K = {torch.float16: 1, torch.bfloat16: 1, torch.float32: 8}


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


@pytest.mark.skipif(not cute_ops.schemas_loaded(), reason="cute_ops._C not built")
@pytest.mark.parametrize("shape", [(1, 128), (37, 400), (2, 3, 16), (8,)])
def test_fake_impl_and_opcheck_on_meta(shape):
    gate_up = _meta(*shape)
    out = torch.ops.cute_ops.swiglu(gate_up)
    assert out.shape == (*shape[:-1], shape[-1] // 2) and out.dtype == gate_up.dtype
    torch.library.opcheck(torch.ops.cute_ops.swiglu.default, (gate_up,))


@pytest.mark.skipif(not cute_ops.schemas_loaded(), reason="cute_ops._C not built")
@pytest.mark.parametrize("dev", CHECK_DEVICES)
@pytest.mark.parametrize("make, match, exc", [
    (lambda: torch.empty(3, 64, dtype=torch.bfloat16), "gate_up must be a CUDA tensor", ValueError),
    (lambda: _meta(3, 64, dtype=torch.float64), r"gate_up must have dtype in", TypeError),
    (lambda: _meta(3, 66)[:, :63], "must be even", ValueError),
    (lambda: _meta(3, 128)[:, ::2], "last dim contiguous|last dimension contiguous|stride 1", ValueError),
    (lambda: _meta(3, 68)[:, :64], "row stride .* must be a multiple of 8", ValueError),
    (lambda: _meta(4, 3, 64).transpose(0, 1), "leading dims must be viewable as one dim", ValueError),
    (lambda: _meta(3, 136)[:, :64], None, None),  # strided rows, 16-byte aligned: fine
    (lambda: _meta(0, 64), None, None),  # no rows: an empty output
])
def test_input_checks(make, match, exc, dev):
    gate_up = on_device(make(), dev)
    if exc is None:
        assert cute_ops.swiglu(gate_up).shape == (gate_up.shape[0], gate_up.shape[-1] // 2)
        return
    with pytest.raises(exc, match=match):
        cute_ops.swiglu(gate_up)


def _product(rows, inter, dtype, device="cuda"):
    """x @ pack_gate_up(w_gate, w_up).T, as the model's cuBLAS gate/up matmul makes it: values of
    order 1 in both halves."""
    x = torch.randn(rows, 64, device=device, dtype=torch.float64)
    w = cute_ops.pack_gate_up(torch.randn(inter, 64, device=device, dtype=torch.float64),
                              torch.randn(inter, 64, device=device, dtype=torch.float64)) / 8
    return (x @ w.T).to(dtype)


def _check(out, gate_up, what="swiglu"):
    assert_close_to_reference(out, ref.swiglu(gate_up.double()), ref.swiglu(gate_up), k=ERROR_K[gate_up.dtype],
                              what=what)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 17, 1000, 4097])
@pytest.mark.parametrize("inter", [64, 200, 4, 1000, 14336])
def test_matches_reference(rows, inter, dtype):
    if rows * inter > 4097 * 1000:
        rows = 3  # the LLaMA-3-8B width: a few rows are enough
    gate_up = _product(rows, inter, dtype)
    poison_allocator(rows * inter * gate_up.element_size())
    _check(cute_ops.swiglu(gate_up), gate_up)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_strided_and_nd_inputs(dtype):
    wide = _product(2 * 3 * 17, 2 * 200 + 8, dtype)
    gate_up = wide[:, :400]  # rows 808 elements apart
    _check(cute_ops.swiglu(gate_up), gate_up, "strided rows")
    nd = _product(2 * 5, 136, dtype).view(2, 5, 272)
    out = cute_ops.swiglu(nd)
    assert out.shape == (2, 5, 136) and out.is_contiguous()
    _check(out, nd, "3-d input")


@pytest.mark.gpu
@pytest.mark.parametrize("bug", ["swapped_vector", "tail_element"])
def test_reference_check_fails_a_small_bug(bug):
    """The bound above fails one vector of 8 outputs with gate and up swapped, and one wrong output
    of the partial last block."""
    gate_up = _product(17, 200, torch.bfloat16)
    out = cute_ops.swiglu(gate_up)
    _check(out, gate_up)
    bad = out.clone()
    if bug == "swapped_vector":
        gate, up = gate_up[5, 128:136].float(), gate_up[5, 192:200].float()
        bad[5, 64:72] = (torch.nn.functional.silu(up) * gate).to(bad.dtype)
    else:
        bad[16, 199] = bad[16, 198]
    with pytest.raises(AssertionError, match="exceeds"):
        _check(bad, gate_up)


@pytest.mark.gpu
def test_cuda_graph_and_torch_compile():
    gate_up = _product(33, 200, torch.bfloat16)
    expected = cute_ops.swiglu(gate_up)
    out = {}
    graph = capture_graph(lambda: out.__setitem__("y", cute_ops.swiglu(gate_up)))
    gate_up.copy_(_product(33, 200, torch.bfloat16))
    graph.replay()
    _check(out["y"], gate_up, "graph replay on new inputs")
    fn = torch.compile(lambda t: cute_ops.swiglu(t) * 2, fullgraph=True, dynamic=True)
    torch.testing.assert_close(fn(gate_up), cute_ops.swiglu(gate_up) * 2, rtol=0, atol=0)
    assert not torch.equal(expected, out["y"])  # the replay read the new inputs
