"""Tensor-parallel LLaMA (cute_ops.models.llama.parallel).

CPU: which part of each weight a rank holds; a sharded checkpoint load reassembling to the whole
model for 2 and 4 ranks; random sharded weights; and the sharded forward over 2 gloo processes
(prefill, decode on both paths, greedy generation) against one rank, with the model's GPU ops
replaced by cute_ops.reference's plain PyTorch versions, so that the split of the math and the
collectives are checked on any machine. GPU (2 or more GPUs): the same over NCCL with the real
kernels and CUDA-graph decode, against transformers in float64.
"""
from __future__ import annotations


import json

import pytest
import torch
import torch.multiprocessing as mp

import cute_ops
from cute_ops.models.llama import Generator, Llama, LlamaConfig, PagedKVCache, from_hf_state_dict, load_checkpoint
from cute_ops.models.llama.parallel import MULTICAST_OFF, TensorParallel, disable_multicast
from cute_ops.models.llama.weights import HostMemoryPeak, hf_shapes
from cute_ops.rope import Llama3RopeScaling

# Spawned ranks import this module; they must not import conftest (another test module may have put
# perf/, which has its own conftest.py, first on the path they inherit): the checks that use
# conftest's helpers import them where they run, in the test process.


def _cfg(**kw) -> LlamaConfig:
    # The vocabulary splits unevenly into ranks and a rank's intermediate slice (528 or 264) into
    # 64-row blocks: the padding of the vocabulary and pack_gate_up's short last block are exercised.
    base = dict(vocab_size=1001, hidden_size=256, intermediate_size=1056, num_layers=2, num_heads=8, num_kv_heads=4,
                head_dim=64, rms_norm_eps=1e-5, rope_theta=500000.0, max_position=1024,
                rope_scaling=Llama3RopeScaling(factor=8.0, original_max_position=256), eos_token_ids=(1000,))
    base.update(kw)
    return LlamaConfig(**base)


def _state_dict(cfg: LlamaConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {n: torch.randn(s, generator=gen) * (0.1 if n.endswith("norm.weight") else s[-1] ** -0.5)
            + (1.0 if n.endswith("norm.weight") else 0.0) for n, s in hf_shapes(cfg).items()}


# ---------------------------------------------------------------- CPU: the split of the weights
def test_hf_split_of_each_tensor():
    cfg = _cfg()
    tp = TensorParallel(rank=1, world_size=2)
    p = "model.layers.0."
    assert tp.hf_split(cfg, p + "self_attn.q_proj.weight") == (0, slice(256, 512))   # query heads 4..7
    assert tp.hf_split(cfg, p + "self_attn.k_proj.weight") == (0, slice(128, 256))   # kv heads 2..3
    assert tp.hf_split(cfg, p + "self_attn.o_proj.weight") == (1, slice(256, 512))
    assert tp.hf_split(cfg, p + "mlp.up_proj.weight") == (0, slice(528, 1056))
    assert tp.hf_split(cfg, p + "mlp.down_proj.weight") == (1, slice(528, 1056))
    assert tp.hf_split(cfg, "lm_head.weight") == (0, slice(501, 1001))             # 500 rows + 1 of padding
    for whole in (p + "input_layernorm.weight", "model.embed_tokens.weight", "model.norm.weight"):
        assert tp.hf_split(cfg, whole) is None
    assert TensorParallel().hf_split(cfg, p + "self_attn.q_proj.weight") is None
    assert tp.vocab_rows(1001) == 501 and TensorParallel(3, 4).vocab_part(1001) == slice(753, 1001)


def test_split_rules():
    with pytest.raises(ValueError, match=r"num_kv_heads \(4\) to be a multiple of 8"):
        Llama(_cfg(), device="meta", tp=TensorParallel(0, 8))
    with pytest.raises(ValueError, match=r"intermediate_size \(1004\) to be a multiple of 8"):
        Llama(_cfg(num_kv_heads=8, intermediate_size=1004), device="meta", tp=TensorParallel(0, 8))
    with pytest.raises(ValueError, match=r"gives each 500 of the intermediate size \(1000\); the MLP kernels need "
                                         r"a multiple of 8"):
        Llama(_cfg(intermediate_size=1000), device="meta", tp=TensorParallel(0, 2))
    with pytest.raises(ValueError, match="rank 2 of 2"):
        TensorParallel(2, 2)
    with pytest.raises(ValueError, match="torchrun --nproc-per-node 2"):
        TensorParallel.from_torchrun(2)
    model = Llama(_cfg(), device="meta", tp=TensorParallel(0, 4))
    with pytest.raises(ValueError, match="build the cache with the model's tp"):
        Generator(model, PagedKVCache(_cfg(), 4, 16, device="meta"))
    assert PagedKVCache(_cfg(), 4, 16, device="meta", tp=model.tp).k.shape[3] == 1


def test_multicast_stays_off(monkeypatch):
    for name in MULTICAST_OFF:
        monkeypatch.delenv(name, raising=False)
    disable_multicast()
    import os
    assert {n: os.environ[n] for n in MULTICAST_OFF} == MULTICAST_OFF
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    with pytest.raises(RuntimeError, match="NCCL_NVLS_ENABLE=1 would allow NVLink multicast"):
        disable_multicast()


def test_which_all_reduces_take_which_path():
    """TensorParallel's all-reduce paths, the rules a CPU can check (the CUDA ones: the next test):
    a CPU tensor (gloo) and one rank take neither kernel; an unknown kind is refused; the one-shot
    buffer holds a B = 64 decode step of the 70B's rows."""
    from cute_ops.models.llama.parallel import ONE_SHOT_MAX_BYTES

    row = torch.ones(1, 4096, dtype=torch.bfloat16)
    for kind in ("auto", "one_shot", "pushed"):
        two = TensorParallel(0, 2, all_reduce_kind=kind)
        assert not two.takes_peer(row) and not two.takes_one_shot(row)
        assert not two.pushes(row, torch.ones(4096, 4096, dtype=torch.bfloat16))
    assert not TensorParallel().takes_peer(row) and not TensorParallel().takes_one_shot(row)
    with pytest.raises(ValueError, match="all_reduce_kind must be one of"):
        TensorParallel(0, 2, all_reduce_kind="multimem")
    assert ONE_SHOT_MAX_BYTES >= 64 * 8192 * 2


def test_auto_pushes_the_row_parallel_gemvs_at_one_row_only(monkeypatch):
    """Which row-parallel gemvs push their rows (TensorParallel.pushes), with the peer kernel taken as
    built and the operands as taken: "pushed" at every gemv batch, "auto" up to AUTO_PUSH_MAX_ROWS
    rows (one: measured faster at B = 1 only), "one_shot" and "nccl" never, nor one rank."""
    from cute_ops import allreduce
    from cute_ops.models.llama.parallel import AUTO_PUSH_MAX_ROWS

    monkeypatch.setattr(TensorParallel, "_peer_built", staticmethod(lambda *also: True))
    monkeypatch.setattr(allreduce.PeerAllReduce, "takes_gemv", staticmethod(lambda x, weight: True))
    weight = torch.ones(4096, 4096, dtype=torch.bfloat16)
    one, eight = torch.ones(1, 4096, dtype=torch.bfloat16), torch.ones(8, 4096, dtype=torch.bfloat16)
    assert AUTO_PUSH_MAX_ROWS == 1
    auto, pushed = TensorParallel(0, 2), TensorParallel(0, 2, all_reduce_kind="pushed")
    assert auto.pushes(one, weight) and not auto.pushes(eight, weight)
    assert pushed.pushes(one, weight) and pushed.pushes(eight, weight)
    for kind in ("one_shot", "nccl"):
        assert not TensorParallel(0, 2, all_reduce_kind=kind).pushes(one, weight)
    assert not TensorParallel().pushes(one, weight)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA tensor")
def test_all_reduce_path_rules_on_cuda_tensors():
    from cute_ops.models.llama.parallel import ONE_SHOT_MAX_BYTES

    auto, one_shot = TensorParallel(0, 2), TensorParallel(0, 2, all_reduce_kind="one_shot")
    nccl = TensorParallel(0, 2, all_reduce_kind="nccl")
    row = torch.ones(8, 4096, dtype=torch.bfloat16, device="cuda")
    # auto: the peer kernel for 16-bit and float32 rows up to 1 MiB, 8-byte granules.
    assert auto.takes_peer(row) and auto.takes_peer(row.half()) and auto.takes_peer(row.float())
    assert not auto.takes_one_shot(row) and not nccl.takes_peer(row) and not one_shot.takes_peer(row)
    assert not auto.takes_peer(row[:, :4095])  # not contiguous
    assert not auto.takes_peer(row.view(-1)[:3])  # 6 bytes
    assert not auto.takes_peer(torch.ones(64 * 8192 + 4, dtype=torch.bfloat16, device="cuda"))
    # one_shot: bfloat16 and float32, 16-byte granules, a PyTorch that has the op.
    assert one_shot.takes_one_shot(row) == hasattr(torch.ops.symm_mem, "one_shot_all_reduce_copy_out")
    assert not nccl.takes_one_shot(row) and not one_shot.takes_one_shot(row.half())
    assert not one_shot.takes_one_shot(row.view(-1)[1:4097])  # starts 2 bytes into a 16-byte vector
    assert not one_shot.takes_one_shot(torch.ones(ONE_SHOT_MAX_BYTES // 2 + 8, dtype=torch.bfloat16, device="cuda"))


def _reassemble(parts: list[Llama]) -> dict[str, torch.Tensor]:
    """The whole model's tensors from the ranks' parts (rank order), as the one-rank model holds them."""
    cfg, n = parts[0].config, len(parts)
    q, kv = cfg.q_size // n, cfg.kv_size // n
    out = {"embed": parts[0].embed, "norm": parts[0].norm}
    for m in parts[1:]:  # replicated: the same on every rank
        assert torch.equal(m.embed, out["embed"]) and torch.equal(m.norm, out["norm"])
    out["lm_head"] = torch.cat([m.lm_head for m in parts])[:cfg.vocab_size]
    for i in range(cfg.num_layers):
        layers = [m.layers[i] for m in parts]
        out[f"{i}.wqkv"] = torch.cat([torch.cat([layer.wqkv[s] for layer in layers]) for s in
                                      (slice(0, q), slice(q, q + kv), slice(q + kv, None))])
        out[f"{i}.wo"] = torch.cat([layer.wo for layer in layers], dim=1)
        gate_up = [cute_ops.unpack_gate_up(layer.w_gate_up) for layer in layers]
        out[f"{i}.w_gate_up"] = cute_ops.pack_gate_up(torch.cat([g for g, _ in gate_up]), torch.cat([u for _, u in gate_up]))
        out[f"{i}.w_down"] = torch.cat([layer.w_down for layer in layers], dim=1)
        for norm in ("attn_norm", "mlp_norm"):
            out[f"{i}.{norm}"] = getattr(layers[0], norm)
            assert all(torch.equal(getattr(layer, norm), out[f"{i}.{norm}"]) for layer in layers)
    for m in parts:  # the padding rows of the vocabulary are zero
        part = m.tp.vocab_part(cfg.vocab_size)
        assert not m.lm_head[part.stop - part.start:].any()
    return out


def _whole(model: Llama) -> dict[str, torch.Tensor]:
    out = {"embed": model.embed, "norm": model.norm, "lm_head": model.output_weight}
    for i, layer in enumerate(model.layers):
        out.update({f"{i}.{n}": p for n, p in layer.named_parameters()})
    return out


def _save_checkpoint(tmp_path, cfg: LlamaConfig, sd: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file
    names = sorted(sd)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for f, ns in shards.items():
        save_file({n: sd[n].contiguous() for n in ns}, str(tmp_path / f))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: f for f, ns in shards.items() for n in ns}}))


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("tied", [False, True])
def test_sharded_load_reassembles_the_whole_model(tmp_path, monkeypatch, world, tied):
    # Small reads, so that the row-chunked copies are exercised on every tensor.
    monkeypatch.setattr("cute_ops.models.llama.weights.READ_BYTES", 3000)
    cfg = _cfg(tie_word_embeddings=tied)
    sd = _state_dict(cfg)
    _save_checkpoint(tmp_path, cfg, sd)
    whole = _whole(from_hf_state_dict(cfg, sd, device="cpu"))
    parts = [load_checkpoint(tmp_path, device="cpu", config=cfg, tp=TensorParallel(r, world)) for r in range(world)]
    for m in parts:
        assert m.layers[0].wqkv.shape == ((cfg.num_heads + 2 * cfg.num_kv_heads) // world * 64, 256)
        # A step reads 1/world of each split weight, the layers' norms whole, and its vocabulary rows.
        split = sum(t.numel() for n, t in whole.items() if n.endswith(("wqkv", "wo", "w_gate_up", "w_down")))
        assert m.weight_bytes == 2 * (split // world + 2 * cfg.num_layers * cfg.hidden_size
                                      + m.tp.vocab_rows(cfg.vocab_size) * cfg.hidden_size)
    got = _reassemble(parts)
    assert got.keys() == whole.keys()
    for name, t in whole.items():
        assert torch.equal(got[name], t), name
    # The state dict path gives the same parts.
    direct = from_hf_state_dict(cfg, sd, device="cpu", tp=TensorParallel(world - 1, world))
    for (n, a), (_, b) in zip(direct.named_parameters(), parts[-1].named_parameters()):
        assert torch.equal(a, b), n


@pytest.mark.skipif(HostMemoryPeak._anon() is None, reason="needs /proc/self/status (Linux) to read RssAnon")
def test_loading_holds_little_host_memory(tmp_path, monkeypatch):
    # A 318 MB float32 checkpoint (a tied 262 MB embedding), loaded in bf16 as rank 0 of 2 onto the
    # CPU: the private host memory the load adds at its peak is the rank's model and next to nothing
    # more (safetensors maps the file; its pages are the page cache's). Planted bug: a loader that
    # holds a float32 copy of each whole tensor (the embedding) shows.
    from cute_ops.models.llama import weights
    from safetensors.torch import save_file
    cfg = _cfg(vocab_size=32000, hidden_size=2048, intermediate_size=512, num_layers=1, num_heads=16, num_kv_heads=4,
               head_dim=128, tie_word_embeddings=True)
    save_file({n: torch.randn(s) for n, s in hf_shapes(cfg).items()}, str(tmp_path / "model.safetensors"))
    monkeypatch.setattr(weights, "READ_BYTES", 16 << 20)
    tp = TensorParallel(0, 2)
    model_bytes = sum(p.numel() * 2 for p in Llama(cfg, device="meta", tp=tp).parameters())

    def load():
        with HostMemoryPeak() as mem:
            model = load_checkpoint(tmp_path, device="cpu", config=cfg, tp=tp)
        del model
        return mem.added

    added = load()
    assert 0.9 * model_bytes < added < model_bytes + 32e6, (added, model_bytes)
    monkeypatch.setattr(weights, "_copy_rows", lambda dst, rows_of: dst.copy_(rows_of(slice(0, dst.shape[0])).clone()))
    assert load() > model_bytes + 100e6


def test_random_sharded_weights():
    cfg = _cfg(tie_word_embeddings=True)
    a, b = (Llama.random(cfg, device="cpu", tp=TensorParallel(r, 2)) for r in range(2))
    assert torch.equal(a.embed, b.embed) and torch.equal(a.layers[1].mlp_norm, b.layers[1].mlp_norm)
    assert not torch.equal(a.layers[0].wqkv, b.layers[0].wqkv)   # each rank draws its own part
    assert torch.equal(b.lm_head[:500], b.embed[501:]) and not b.lm_head[500:].any()  # tied rows, padding
    # The scale of the whole weight: o's parts are drawn for its full fan-in.
    assert abs(a.layers[0].wo.float().std().item() * cfg.q_size ** 0.5 - 1) < 0.05
    one = Llama.random(cfg, device="cpu")
    assert one.lm_head is None and torch.equal(one.embed, a.embed)


# ---------------------------------------------------------------- the sharded forward
def _use_reference_ops(set_attr=setattr) -> None:
    """Swap the model's GPU ops for cute_ops.reference (plain PyTorch, any device), keeping the
    ops' in-place effects (RoPE on q and k, the cache append).
    set_attr: monkeypatch.setattr in the test process (undone after the test), setattr in a rank's
    own process."""
    from cute_ops import reference as ref
    from cute_ops.models.llama import model

    def rotary_embedding(q, k, positions, cos_sin):
        q_rot, k_rot = ref.rotary_embedding(q, k, positions, cos_sin)
        q.copy_(q_rot)
        k.copy_(k_rot)

    def flash_decode(q, k_cache, v_cache, seqlens, k_new, v_new, block_table, cos, sin, num_splits=0):
        out, lse, k_after, v_after = ref.decode_attention(q, k_cache, v_cache, seqlens, k_new, v_new, block_table,
                                                          cos, sin)
        k_cache.copy_(k_after)
        v_cache.copy_(v_after)
        return out.to(q.dtype), lse

    for name, op in (("rms_norm", ref.rms_norm),
                     ("rotary_embedding", rotary_embedding),
                     ("flash_fwd_varlen", lambda q, k, v, cu_q, cu_k, max_q, max_k, causal: ref.attention_varlen(
                         q, k, v, cu_q, cu_k, causal=causal)),
                     ("flash_decode", flash_decode), ("gemv", ref.gemv), ("swiglu", ref.swiglu),
                     ("fused_mlp", lambda x, w_gate_up, w_down: ref.gemm_pair(x, w_gate_up, w_down, "swiglu"))):
        set_attr(model, name, op)


LENGTHS, STEPS = [37, 5, 1], 16


def _float64(model: Llama) -> Llama:
    """The model converted in place to float64 (the same bf16-rounded weights, exact arithmetic
    through the reference ops)."""
    with torch.inference_mode():
        return model.to(torch.float64)


def _run(model: Llama, seqs: list[torch.Tensor], device, wide: bool = False) -> list[torch.Tensor]:
    """Logits of a prefill of each sequence's first LENGTHS[b] tokens and STEPS teacher-forced decode
    steps ([prompt rows + STEPS, vocab] per sequence). wide: the batch repeated to 3 x 3 = 9
    sequences, past the gemv path's rows (the decode of more than 8 sequences)."""
    reps = 3 if wide else 1
    lengths = LENGTHS * reps
    seqs = seqs * reps
    cache = PagedKVCache.for_tokens(model.config, sum(lengths) + len(lengths) * (STEPS + 16), page_size=16,
                                    dtype=model.embed.dtype, device=device, tp=model.tp)
    for i, n in enumerate(lengths):
        cache.allocator.allocate(i, n + STEPS)
    tokens = torch.cat([s[:n] for s, n in zip(seqs, lengths)]).to(device)
    cu = torch.tensor([0] + lengths).cumsum(0).to(torch.int32)
    positions = torch.cat([torch.arange(n) for n in lengths]).to(device)
    slots = cache.slots(list(range(len(lengths))), lengths).to(device)
    logits = model.prefill(tokens, cu.to(device), max(lengths), positions, slots, cache)
    out = [[logits[cu[b]:cu[b + 1]]] for b in range(len(lengths))]
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=device)
    table = cache.block_table_rows(list(range(len(lengths)))).to(device)
    for t in range(STEPS):
        step = model.decode(torch.stack([s[n + t] for s, n in zip(seqs, lengths)]).to(device), seqlens, table, cache)
        for b in range(len(lengths)):
            out[b].append(step[b:b + 1])
        seqlens += 1
    return [torch.cat(o) for o in out[:len(LENGTHS)]]


def _greedy(model: Llama, device, cuda_graphs: bool) -> tuple[list[list[int]], torch.Tensor]:
    """Greedy generation of 3 prompts through Generator: (tokens, the logits each token was picked
    from, [steps, 3, vocab])."""
    from cute_ops.models.llama import generate

    prompts = [list(range(3, 3 + n)) for n in (9, 30, 2)]
    cache = PagedKVCache.for_tokens(model.config, 3 * 64, page_size=16, max_seq_len=64, dtype=model.embed.dtype,
                                    device=device, tp=model.tp)
    seen = []
    sample = generate.sample

    def recorded(logits, params, gen=None):
        seen.append(logits.float().cpu())
        return sample(logits, params, gen)

    generate.sample = recorded
    try:
        tokens = Generator(model, cache, max_batch=4, cuda_graphs=cuda_graphs).generate(prompts, 12, stop_tokens=())
    finally:
        generate.sample = sample
    return tokens, torch.stack(seen)


def _assert_same_greedy_tokens(got: list[list[int]], want: list[list[int]], want_logits: torch.Tensor,
                               tol: float) -> None:
    """The same tokens, except that a sequence may part ways where the one-rank run's logits had
    another token within `tol` of the one it picked (a near tie that rounding may break either
    way); the tokens after that point are not compared. Random models have flat logits: in the
    CPU test's one-rank run, 3 of 36 steps had their top two logits equal in bf16."""
    assert [len(g) for g in got] == [len(w) for w in want], "a different number of tokens"
    for b, (g, w) in enumerate(zip(got, want)):
        for t, (x, y) in enumerate(zip(g, w)):
            if x != y:
                logits = want_logits[t, b]
                assert logits[y] - logits[x] <= tol, \
                    f"sequence {b}, token {t}: {x} against {y}, whose logit was {logits[y] - logits[x]:.4f} higher"
                break


def _worker(rank: int, world: int, init: str, backend: str, cfg: LlamaConfig, sd, queue, plant: str | None) -> None:
    """One rank: its part of the model from the state dict, the forward passes, and its results
    (rank 0's, and whether every rank's logits are the same) saved next to the rendezvous file,
    then "done" put on `queue`. plant: a bug to plant."""
    import torch.distributed as dist

    if plant == "fold":  # not a bug: the gemv decode step with its all-reduces folded into the gemvs
        Llama.fold_all_reduce = True
    # Not bugs either: NCCL's or PyTorch's one-shot all-reduce for every decode step's rows, or the
    # gemv decode steps' row-parallel gemvs pushing their rows themselves.
    kind = plant if plant in ("nccl", "one_shot", "pushed") else "auto"
    pushed_calls = []
    if kind in ("auto", "pushed"):  # count the pushed gemvs: the way must have taken them
        push = TensorParallel.pushed_gemv

        def counted(self, *args):
            pushed_calls.append(1)
            return push(self, *args)

        TensorParallel.pushed_gemv = counted
    if plant == "wrong kv heads":
        split = TensorParallel.hf_split

        def wrong(self, cfg, name):
            got = split(self, cfg, name)
            return (0, split(TensorParallel(0, self.world_size), cfg, name)[1]) if name.endswith(
                ("k_proj.weight", "v_proj.weight")) else got

        TensorParallel.hf_split = wrong

    disable_multicast()
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    else:
        _use_reference_ops()
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    try:
        tp = TensorParallel(rank, world, all_reduce_kind=kind)
        torch.manual_seed(0)  # the same sequences on every rank
        seqs = [torch.randint(0, cfg.vocab_size, (n + STEPS,)) for n in LENGTHS]
        model = from_hf_state_dict(cfg, sd, dtype=torch.bfloat16, device=device, tp=tp)
        logits = _run(model, seqs, device)
        wide = _run(model, seqs, device, wide=True)
        tokens, _ = _greedy(model, device, cuda_graphs=backend == "nccl")
        if backend == "nccl" and kind == "pushed":
            assert pushed_calls, "no decode step's o or down gemv took TensorParallel.pushed_gemv"
        if backend == "nccl" and kind == "auto":  # "auto" pushes at one row (AUTO_PUSH_MAX_ROWS) only
            assert not pushed_calls, "auto pushed a gemv of several rows"
            one = PagedKVCache.for_tokens(cfg, 64, page_size=16, max_seq_len=64, dtype=model.embed.dtype,
                                          device=device, tp=tp)
            Generator(model, one, max_batch=1).generate([list(range(3, 12))], 4, stop_tokens=())
            assert pushed_calls, "no one-row decode step's o or down gemv took TensorParallel.pushed_gemv"
        if backend == "nccl" and kind in ("auto", "pushed"):  # the decode steps took the peer kernel, not NCCL's
            assert any(key[0] == "peer" for key in tp._buffers), "no all-reduce took PeerAllReduce"
        if backend == "nccl" and kind == "one_shot" and hasattr(torch.ops.symm_mem, "one_shot_all_reduce_copy_out"):
            assert any(isinstance(key[0], torch.device) for key in tp._buffers), "no all-reduce took the one-shot"
        # Every rank must hold the same logits (the gather) and pick the same tokens.
        mine = torch.cat([x.flatten() for x in logits + wide]).float()
        everyone = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(everyone, mine)
        same = all(torch.equal(e, mine) for e in everyone)
        objs = [None] * world
        dist.all_gather_object(objs, tokens)
        same = same and all(o == tokens for o in objs)
        if rank == 0:  # through a file: tensors put on the queue would need this process alive to be read
            torch.save(([x.cpu() for x in logits], [x.cpu() for x in wide], tokens, same), init[len("file://"):] + ".pt")
            queue.put("done")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _run_ranks(tmp_path, world: int, backend: str, cfg: LlamaConfig, sd, plant: str | None = None):
    """Rank 0's results from `world` spawned ranks; fails as soon as a rank dies (its traceback is on
    stderr) rather than waiting for the others, which may hang in a collective, and stops them."""
    import queue as queues
    import time

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    init = f"file://{tmp_path}/rendezvous"
    procs = [ctx.Process(target=_worker, args=(r, world, init, backend, cfg, sd, queue, plant)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 600
    try:
        while True:
            try:
                queue.get(timeout=2)
                result = torch.load(init[len("file://"):] + ".pt")
                break
            except queues.Empty:
                dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                assert not dead, f"ranks died (rank, exit code): {dead}; their tracebacks are on stderr"
                assert time.monotonic() < deadline, "the ranks gave no result in 600 s"
        for p in procs:
            p.join(timeout=120)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
        return result
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()


def _check_against_one_rank(result, one: tuple, ref: list[torch.Tensor], low: list[torch.Tensor]) -> None:
    """result: _run_ranks'; one: the one-rank model's (_run, _greedy); ref/low: float64 and
    low-precision references of _run's logits (low may be the one-rank run itself, which is then
    not checked against itself)."""
    from conftest import assert_close_to_reference

    logits, wide, tokens, same = result
    assert same, "the ranks' logits or tokens differ"
    runs = [(logits, "tp=2"), (wide, "tp=2, 9 sequences")] + ([] if low is one[0] else [(one[0], "tp=1")])
    for b in range(len(LENGTHS)):
        for got, what in runs:
            assert_close_to_reference(got[b], ref[b], low[b], k=2, what=f"{what}, sequence {b}")
    # A near tie: within twice the largest difference between the two runs' logits seen above.
    tol = 2 * max((a - b).abs().max().item() for a, b in zip(logits, one[0]))
    _assert_same_greedy_tokens(tokens, one[1], one[2], tol)


@pytest.mark.parametrize("intermediate", [1056, 2048], ids=["fused_mlp", "cublas_mlp"])
def test_two_ranks_on_cpu_match_one(tmp_path, monkeypatch, intermediate):
    """gloo, reference ops: TP=2 against TP=1 (both against float64). A rank's 1024 of 2048 takes
    the MLP's cuBLAS route past 8 rows (rank 0's down adds the residual in its epilogue), 528 of
    1056 fused_mlp's."""
    _use_reference_ops(monkeypatch.setattr)
    cfg = _cfg(intermediate_size=intermediate)
    sd = _state_dict(cfg)
    one, ref = _one_rank_on_cpu(cfg, sd)
    _check_against_one_rank(_run_ranks(tmp_path, 2, "gloo", cfg, sd), one, ref, one[0])


def _one_rank_on_cpu(cfg: LlamaConfig, sd) -> tuple[tuple, list[torch.Tensor]]:
    """The one-rank model's (_run, *_greedy) in bf16, and _run in float64: the same bf16-rounded
    weights, every step exact (the reference ops compute in the inputs' dtype)."""
    torch.manual_seed(0)
    seqs = [torch.randint(0, cfg.vocab_size, (n + STEPS,)) for n in LENGTHS]
    one_model = from_hf_state_dict(cfg, sd, dtype=torch.bfloat16, device="cpu")
    one = (_run(one_model, seqs, "cpu"), *_greedy(one_model, "cpu", cuda_graphs=False))
    return one, _run(_float64(one_model), seqs, "cpu")


def test_planted_bug_fails_the_two_rank_check(tmp_path, monkeypatch):
    # Rank 1 loads rank 0's kv heads (a split that indexes k/v by the rank's query-head range of
    # the wrong size, say): half the query heads attend over the wrong keys. The check must fail.
    _use_reference_ops(monkeypatch.setattr)
    cfg = _cfg(num_layers=1)
    sd = _state_dict(cfg)
    one, ref = _one_rank_on_cpu(cfg, sd)
    result = _run_ranks(tmp_path, 2, "gloo", cfg, sd, plant="wrong kv heads")
    with pytest.raises(AssertionError, match="exceeds"):
        _check_against_one_rank(result, one, ref, one[0])


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="tensor parallelism over NCCL needs 2 GPUs")
@pytest.mark.parametrize("way", ["auto", "one_shot", "nccl", "fold", "pushed"],
                         ids=["peer_all_reduce", "one_shot_all_reduce", "nccl_all_reduce", "folded_all_reduce",
                              "pushed_all_reduce"])
def test_two_gpus_match_one(tmp_path, way):
    """NCCL, the real kernels, CUDA-graph decode: TP=2 and TP=1 each within the LLaMA parity
    tests' bound of transformers in float64; the same greedy tokens. way: the all-reduce as the
    model runs it by default (PeerAllReduce up to 1 MiB, NCCL above), PyTorch's one-shot, NCCL's
    for every one, the gemv decode steps' all-reduces folded into the gemvs
    (Llama.fold_all_reduce), or their row-parallel gemvs pushing their rows into the peer
    all-reduce's inboxes (kind "pushed")."""
    from test_llama import _hf_models
    cfg = _cfg()
    sd = _state_dict(cfg)
    hf = _hf_models(cfg, sd, [torch.float64, torch.bfloat16])
    torch.manual_seed(0)
    seqs = [torch.randint(0, cfg.vocab_size, (n + STEPS,)) for n in LENGTHS]
    with torch.no_grad():
        ref = [hf[torch.float64](s[None].cuda()).logits[0].cpu() for s in seqs]
        low = [hf[torch.bfloat16](s[None].cuda()).logits[0].float().cpu() for s in seqs]
    one_model = from_hf_state_dict(cfg, sd, dtype=torch.bfloat16)
    one = ([x.cpu() for x in _run(one_model, seqs, "cuda")], *_greedy(one_model, "cuda", cuda_graphs=True))
    del one_model, hf
    torch.cuda.empty_cache()
    _check_against_one_rank(_run_ranks(tmp_path, 2, "nccl", cfg, sd, plant=None if way == "auto" else way), one, ref,
                            low)
