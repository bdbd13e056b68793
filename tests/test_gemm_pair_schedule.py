"""gemm_pair's tile order and dependencies (cute_ops.gemm_pair_schedule), on the CPU: every policy
puts each tile after its producers, tile-level producers cover exactly the K range a split reads,
and P concurrent workers with random tile durations never deadlock, for many P; an order that
breaks the rule is rejected and does deadlock."""
import math
import random

import pytest

from cute_ops.gemm_pair_schedule import (GRANULARITIES, POLICIES, PairShape, Tile, Tiling, check_order,
                                         make_schedule, simulate)

LLAMA = dict(k=4096, n0=2 * 14336, n1=4096)  # LLaMA-3-8B MLP: H = 4096, I = 14336
SMALL = dict(k=256, n0=2 * 1000, n1=384)     # same structure, fewer tiles (h width 1000: a partial tile)


def combos():
    for policy in POLICIES:
        for granularity in GRANULARITIES:
            if policy == "overlap" and granularity == "row":
                continue
            yield policy, granularity


@pytest.mark.parametrize("policy,granularity", list(combos()))
@pytest.mark.parametrize("m", [1, 7, 16, 64, 128, 1000, 4096])
@pytest.mark.parametrize("split_k0, split_k1", [(None, None), (None, 1024), (1024, 1152)])
def test_orders_are_complete_and_respect_producers(policy, granularity, m, split_k0, split_k1):
    s = make_schedule(PairShape(m=m, **LLAMA), Tiling(block_m=64, split_k1=split_k1, split_k0=split_k0), policy,
                      granularity)
    check_order(s)  # make_schedule checked already; an explicit second look
    splits = 1 if split_k1 is None else math.ceil(14336 / split_k1)
    splits0 = 1 if split_k0 is None else 4096 // split_k0
    m_blocks = math.ceil(m / 64)
    assert len(s.order) == m_blocks * (224 * splits0 + 32 * splits)
    assert len(s.table) == len(s.order) and all(len(row) == 4 for row in s.table)


@pytest.mark.parametrize("split_k1", [64, 128, 320, 1024])
def test_tile_producers_cover_exactly_the_split(split_k1):
    shape = PairShape(m=64, **SMALL)
    s = make_schedule(shape, Tiling(block_n0=128, split_k1=split_k1), "overlap", "tile")
    per_tile = 64  # h columns a GEMM0 tile of 128 interleaved gate/up columns makes
    for split in range(s.splits):
        lo, hi = split * split_k1, min((split + 1) * split_k1, shape.h_width)
        prods = s.producers(Tile(1, 0, 0, split))
        covered = set()
        for p in prods:
            cols = set(range(p.n * per_tile, min((p.n + 1) * per_tile, shape.h_width)))
            assert cols & set(range(lo, hi)), f"producer {p} makes none of split {split}'s columns"
            covered |= cols
        assert set(range(lo, hi)) <= covered
        assert s.wait_count(Tile(1, 0, 0, split)) == len(prods)


@pytest.mark.parametrize("policy,granularity", list(combos()))
def test_gemm0_splits_are_adjacent_and_all_awaited(policy, granularity):
    # split_k0 = 96 cuts K = 256 into 96, 96 and 64 columns.
    s = make_schedule(PairShape(m=100, **SMALL), Tiling(split_k1=128, split_k0=96), policy, granularity, lag=1)
    assert s.splits0 == 3
    for i, t in enumerate(s.order):
        if t.gemm == 0 and t.split == 0:
            assert s.order[i:i + 3] == (t, t._replace(split=1), t._replace(split=2))
    consumer = Tile(1, 1, 0, 1)
    prods = s.producers(consumer)
    tiles = {(p.m, p.n) for p in prods}
    assert sorted(prods) == sorted(Tile(0, m, n, k) for m, n in tiles for k in range(3))
    assert s.wait_count(consumer) == len(tiles)  # the kernel counts tiles, each signalled once


def test_row_granularity_waits_for_the_whole_row_block():
    s = make_schedule(PairShape(m=200, **SMALL), Tiling(split_k1=128), "row_interleaved", "row")
    assert s.producers(Tile(1, 2, 1, 3)) == [Tile(0, 2, j, 0) for j in range(s.n0_tiles)]
    assert s.producers(Tile(0, 2, 1, 0)) == []


def test_overlap_needs_tile_granularity():
    with pytest.raises(ValueError, match="comes later"):
        make_schedule(PairShape(m=16, **SMALL), Tiling(split_k1=128), "overlap", "row")


def test_overlap_starts_gemm1_before_gemm0_ends():
    s = make_schedule(PairShape(m=16, **LLAMA), Tiling(split_k1=1024), "overlap", "tile", lag=0)
    first_gemm1 = next(i for i, t in enumerate(s.order) if t.gemm == 1)
    assert first_gemm1 == 1024 // 64  # right after the 16 GEMM0 tiles that make split 0
    lagged = make_schedule(PairShape(m=16, **LLAMA), Tiling(split_k1=1024), "overlap", "tile", lag=100)
    assert next(i for i, t in enumerate(lagged.order) if t.gemm == 1) == 16 + 100
    seq = make_schedule(PairShape(m=16, **LLAMA), Tiling(split_k1=1024), "sequential", "tile")
    assert next(i for i, t in enumerate(seq.order) if t.gemm == 1) == seq.n0_tiles


@pytest.mark.parametrize("bad", [
    dict(policy="fastest"), dict(granularity="page"), dict(lag=-1), dict(tiling=Tiling(split_k1=100)),
    dict(tiling=Tiling(split_k1=128, split_k0=12)),
    dict(shape=PairShape(m=0, **SMALL)), dict(shape=PairShape(m=4, k=8, n0=7, n1=8))])
def test_bad_arguments(bad):
    args = dict(shape=PairShape(m=16, **SMALL), tiling=Tiling(split_k1=128), policy="overlap",
                granularity="tile", lag=1)
    args.update(bad)
    with pytest.raises(ValueError):
        make_schedule(**args)


@pytest.mark.parametrize("policy,granularity", list(combos()))
@pytest.mark.parametrize("workers", [1, 2, 3, 5, 8, 17, 64, 132, 1000])
def test_simulation_never_deadlocks(policy, granularity, workers):
    rng = random.Random(workers)
    for trial in range(3):
        m = rng.choice([1, 16, 100, 300])
        split = rng.choice([None, 64, 192])
        split0 = rng.choice([None, 64, 200])
        s = make_schedule(PairShape(m=m, **SMALL), Tiling(block_m=64, split_k1=split, split_k0=split0), policy,
                          granularity,
                          lag=rng.choice([0, 1, 2]))
        durations = {t: rng.expovariate(1.0) + 0.01 for t in s.order}  # heavy-tailed: some tiles much slower
        r = simulate(s, workers, durations)
        assert not r.deadlocked and r.finished == len(s.order)


def test_an_order_breaking_the_rule_is_rejected_and_deadlocks():
    s = make_schedule(PairShape(m=16, **SMALL), Tiling(split_k1=128), "sequential", "tile")
    bad = list(s.order)
    consumer = next(i for i, t in enumerate(bad) if t.gemm == 1)
    bad.insert(0, bad.pop(consumer))  # a GEMM1 tile first: it waits for tiles after it
    with pytest.raises(ValueError, match="comes later"):
        check_order(type(s)(s.shape, s.tiling, s.policy, s.granularity, tuple(bad)))
    # With one CTA slot, the first CTA waits forever for tiles no CTA can take.
    durations = {t: 1.0 for t in bad}
    assert simulate(bad, 1, durations, producers=s.producers).deadlocked
    # With enough slots for everything it is merely slow: the hazard depends on residency.
    assert not simulate(bad, len(bad), durations, producers=s.producers).deadlocked


def test_folded_splits_out_of_order_deadlock_in_the_simulation():
    # With split 1 of a tile ahead of split 0 and one CTA slot, split 1 computes, then holds the
    # slot waiting for split 0, which no CTA can take: what check_order's split rule prevents.
    s = make_schedule(PairShape(m=16, **SMALL), Tiling(split_k1=128), "sequential", "tile")
    order = list(s.order)
    first, second = order.index(Tile(1, 0, 0, 0)), order.index(Tile(1, 0, 0, 1))
    order[first], order[second] = order[second], order[first]
    durations = {t: 1.0 for t in order}
    assert simulate(order, 1, durations, producers=s.producers).deadlocked
    assert not simulate(order, 1, durations, producers=s.producers, fold_splits=False).deadlocked
    assert not simulate(s, 1, durations).deadlocked  # the policy's own order: in split order


def test_paired_last_splits_in_the_simulation():
    # The pair knob (CUTE_OPS_GEMM_PAIR_SM90_FOLD_PAIR): the next-to-last split waits for nothing,
    # the last for the two before it. The policies' orders still cannot deadlock, even on one slot.
    shape = PairShape(m=16, **SMALL)
    for split_k1 in (64, 128, 192):  # 3 or more splits of SMALL's h
        for policy in ("sequential", "row_interleaved", "overlap"):
            s = make_schedule(shape, Tiling(split_k1=split_k1), policy, "tile", lag=1)
            assert s.splits >= 3
            for workers in (1, 2, 7):
                assert not simulate(s, workers, seed=3, pair_last=True).deadlocked
    s = make_schedule(shape, Tiling(split_k1=64), "sequential", "tile")
    durations = {t: 1.0 for t in s.order}
    last = s.splits - 1

    def swapped(i: int, j: int) -> list[Tile]:  # the order with splits i and j of one tile swapped
        order = list(s.order)
        a, b = order.index(Tile(1, 0, 0, i)), order.index(Tile(1, 0, 0, j))
        order[a], order[b] = order[b], order[a]
        return order

    # The next-to-last split ahead of the one before it, on one slot: in the chain it computes and
    # then holds the slot for a split no CTA can take; paired, it waits for nothing.
    order = swapped(last - 2, last - 1)
    assert simulate(order, 1, durations, producers=s.producers).deadlocked
    assert not simulate(order, 1, durations, producers=s.producers, pair_last=True).deadlocked
    # The last split ahead of the next-to-last deadlocks either way.
    order = swapped(last - 1, last)
    assert simulate(order, 1, durations, producers=s.producers, pair_last=True).deadlocked


def test_simulation_pairs_the_last_splits_as_the_default_build_does():
    # Left unset, pair_last follows the default build: paired at 64- and 128-row tiles, the chain
    # at 256 rows. The probe is an order with the next-to-last split ahead of the one before it,
    # which deadlocks one slot in the chain only.
    for block_m, paired in ((64, True), (128, True), (256, False)):
        s = make_schedule(PairShape(m=16, **SMALL), Tiling(block_m=block_m, split_k1=64), "sequential", "tile")
        last = s.splits - 1
        order = list(s.order)
        a, b = order.index(Tile(1, 0, 0, last - 2)), order.index(Tile(1, 0, 0, last - 1))
        order[a], order[b] = order[b], order[a]
        probe = type(s)(s.shape, s.tiling, s.policy, s.granularity, tuple(order))
        durations = {t: 1.0 for t in order}
        assert simulate(probe, 1, durations).deadlocked != paired
        assert simulate(order, 1, durations, producers=s.producers).deadlocked  # a bare order: the chain


def _violates_by_definition(s) -> bool:
    """The rule as stated, pair by pair: some tile's producer has a later ticket, or some GEMM1
    split a later ticket than the next split of its output tile."""
    ticket = s.ticket()
    return any(ticket[p] >= ticket[t] for t in s.order for p in s.producers(t)) or any(
        ticket[t._replace(split=t.split - 1)] > ticket[t] for t in s.order if t.gemm == 1 and t.split > 0)


def test_a_gemm1_split_before_the_split_it_folds_onto_is_rejected():
    # The SM90 kernel's folded K-splits: split s of an output tile waits for split s - 1's running
    # sum, so every order must keep a tile's GEMM1 splits in split order (every policy does).
    s = make_schedule(PairShape(m=16, **SMALL), Tiling(split_k1=128), "sequential", "tile")
    order = list(s.order)
    first = order.index(Tile(1, 0, 0, 0))
    second = order.index(Tile(1, 0, 0, 1))
    order[first], order[second] = order[second], order[first]
    with pytest.raises(ValueError, match="comes before split 0"):
        check_order(type(s)(s.shape, s.tiling, s.policy, s.granularity, tuple(order)))


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_check_order_agrees_with_the_rule_pair_by_pair(granularity):
    # check_order looks only at the latest split of each producer column (linear in the tiles); on
    # orders broken by random moves it must reject exactly those the pairwise rule rejects.
    rng = random.Random(granularity)
    s = make_schedule(PairShape(m=100, **SMALL), Tiling(split_k1=128, split_k0=96), "sequential", granularity)
    rejected = accepted = 0
    for _ in range(300):
        order = list(s.order)
        for _ in range(rng.choice([1, 2, 5])):  # move a few tiles to random places
            order.insert(rng.randrange(len(order)), order.pop(rng.randrange(len(order))))
        moved = type(s)(s.shape, s.tiling, s.policy, s.granularity, tuple(order))
        if _violates_by_definition(moved):
            rejected += 1
            with pytest.raises(ValueError, match="comes later|comes before split"):
                check_order(moved)
        else:
            accepted += 1
            check_order(moved)
    assert rejected > 30 and accepted > 30  # both outcomes exercised
