"""The tile order and dependencies of gemm_pair (the LLaMA MLP as one launch), as data.

gemm_pair computes ``act(a @ b0.T) @ b1.T`` in one kernel launch: GEMM0 tiles produce row blocks
and column slices of the intermediate h, GEMM1 tiles (optionally split along K) read them. Every
CTA takes a ticket from a global counter when it starts; the ticket indexes `Schedule.order`, which
says which GEMM, which tile and which K-split the CTA computes. Because a tile only ever waits for
tiles with smaller tickets, already handed to CTAs that are running, the launch cannot deadlock
whatever the number of co-resident CTAs (docs/gemm_pair.md has the argument).

This module is the policy logic, independent of any GPU: it builds orders (policies are data, not
recompiled code), lists each tile's producers at the chosen sync granularity, checks that an order
respects them, and simulates P concurrent workers with random tile durations. The kernel reads
the same order as an int32 table (`Schedule.table`).
"""
from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections.abc import Sequence
from typing import NamedTuple

POLICIES = ("sequential", "row_interleaved", "overlap")
GROUP_N = 8  # column tiles a "sequential" order sweeps over all row blocks before moving on
GRANULARITIES = ("row", "tile")


class Tile(NamedTuple):
    """One unit of work: a K-split of a GEMM0 tile (gemm=0, m, n, split) or of a GEMM1 tile
    (gemm=1, m, n, split); split is 0 when that GEMM is not split."""

    gemm: int
    m: int
    n: int
    split: int


@dataclasses.dataclass(frozen=True)
class PairShape:
    """GEMM0: a [m, k] x b0 [n0, k]^T -> act -> h [m, h_width]; GEMM1: h x b1 [n1, h_width]^T.
    With swiglu, b0 holds gate and up interleaved per tile, so h_width = n0 / 2."""

    m: int
    k: int
    n0: int
    n1: int
    gated: bool = True

    @property
    def h_width(self) -> int:
        return self.n0 // 2 if self.gated else self.n0


@dataclasses.dataclass(frozen=True)
class Tiling:
    """Tile sizes: block_m rows for both GEMMs; block_n0 columns of b0 a GEMM0 tile (block_n0 / 2
    columns of h when gated); block_n1 columns of the output a GEMM1 tile; split_k0 columns of K
    a GEMM0 split reads (a multiple of 8); split_k1 columns of h (GEMM1's K) a GEMM1 split reads,
    a multiple of the h columns one GEMM0 tile produces.

    A GEMM0 tile split along K is finished by whichever of its splits ends last (it sums the
    float32 partials and writes h), so a consumer waits for every split of each producer tile."""

    block_m: int = 64
    block_n0: int = 128
    block_n1: int = 128
    split_k1: int | None = None  # None: GEMM1 is not split along K
    split_k0: int | None = None  # None: GEMM0 is not split along K


@dataclasses.dataclass(frozen=True)
class Schedule:
    shape: PairShape
    tiling: Tiling
    policy: str
    granularity: str
    order: tuple[Tile, ...]
    lag: int = 0

    # -- geometry --------------------------------------------------------------------------------
    @property
    def m_blocks(self) -> int:
        return math.ceil(self.shape.m / self.tiling.block_m)

    @property
    def h_cols_per_tile0(self) -> int:
        return self.tiling.block_n0 // 2 if self.shape.gated else self.tiling.block_n0

    @property
    def n0_tiles(self) -> int:
        return math.ceil(self.shape.h_width / self.h_cols_per_tile0)

    @property
    def n1_tiles(self) -> int:
        return math.ceil(self.shape.n1 / self.tiling.block_n1)

    @property
    def splits(self) -> int:
        k = self.tiling.split_k1 or self.shape.h_width
        return math.ceil(self.shape.h_width / k)

    @property
    def splits0(self) -> int:
        return math.ceil(self.shape.k / (self.tiling.split_k0 or self.shape.k))

    def producers(self, tile: Tile) -> list[Tile]:
        """The GEMM0 units `tile` must wait for (every K-split of each producer tile): at "row"
        granularity every GEMM0 tile of its row block; at "tile" granularity only those producing
        the h columns its K-split reads."""
        return [Tile(0, tile.m, j, s) for j in self.producer_columns(tile) for s in range(self.splits0)]

    def producer_columns(self, tile: Tile) -> range:
        """The GEMM0 tile columns (in `tile`'s row block) of producers(tile)."""
        if tile.gemm == 0:
            return range(0)
        if self.granularity == "row":
            return range(self.n0_tiles)
        k = self.tiling.split_k1 or self.shape.h_width
        first = tile.split * k // self.h_cols_per_tile0
        last = min(self.n0_tiles, math.ceil(min((tile.split + 1) * k, self.shape.h_width) / self.h_cols_per_tile0))
        return range(first, last)

    def wait_count(self, tile: Tile) -> int:
        """What the kernel's consumer compares its flag against: the number of producer tiles (each
        signals once, from its last split) on the counter it waits on (per row block, or per
        (row block, K-split))."""
        return len({(p.m, p.n) for p in self.producers(tile)})

    @property
    def table(self) -> list[list[int]]:
        """The order as rows (gemm, m, n, split), the int32 table the kernel indexes by ticket."""
        return [list(t) for t in self.order]

    def ticket(self) -> dict[Tile, int]:
        return {t: i for i, t in enumerate(self.order)}


def _all_tiles(s: Schedule) -> set[Tile]:
    g0 = {Tile(0, m, j, k) for m in range(s.m_blocks) for j in range(s.n0_tiles) for k in range(s.splits0)}
    g1 = {Tile(1, m, n, k) for m in range(s.m_blocks) for n in range(s.n1_tiles) for k in range(s.splits)}
    return g0 | g1


def check_order(s: Schedule) -> None:
    """Raises ValueError unless the order holds every tile exactly once, every tile comes after
    all its producers, and each GEMM1 K-split comes after the split before it of the same output
    tile (the SM90 kernel's folded splits wait for it: docs/gemm_pair.md). Those are the
    properties that rule out deadlock."""
    if len(set(s.order)) != len(s.order):
        raise ValueError("the order holds a tile twice")
    missing = _all_tiles(s) - set(s.order)
    extra = set(s.order) - _all_tiles(s)
    if missing or extra:
        raise ValueError(f"the order misses {len(missing)} tiles and has {len(extra)} unknown ones")
    # A tile comes after all its producers when it comes after the latest of them. Every producer
    # set is all K-splits of some GEMM0 tile columns of one row block (producer_columns), so the
    # latest split of each (row block, column) and, for "row" granularity, of each row block, are
    # enough: linear in the tiles rather than tiles x producers.
    # (m, n) of a GEMM0 tile -> (ticket, tile) of its latest split: a later split overwrites.
    latest = {(t.m, t.n): (i, t) for i, t in enumerate(s.order) if t.gemm == 0}
    latest_in_row: dict[int, tuple[int, Tile]] = {}
    for (m, _), entry in latest.items():
        latest_in_row[m] = max(latest_in_row.get(m, entry), entry)
    g1_ticket = {t: i for i, t in enumerate(s.order) if t.gemm == 1}
    for i, t in enumerate(s.order):
        if t.gemm == 1 and t.split > 0 and g1_ticket[Tile(1, t.m, t.n, t.split - 1)] > i:
            raise ValueError(f"{t} (ticket {i}) comes before split {t.split - 1} of its output tile")
        cols = s.producer_columns(t)
        if not cols:
            continue
        if s.granularity == "row":
            at, p = latest_in_row[t.m]
        else:
            at, p = max(latest[(t.m, j)] for j in cols)
        if at >= i:
            raise ValueError(f"{t} (ticket {i}) waits for {p} (ticket {at}), which comes later")


def make_schedule(shape: PairShape, tiling: Tiling, policy: str, granularity: str = "tile",
                  lag: int = 0) -> Schedule:
    """Builds and checks the order of `policy`:

    Every policy places the K-splits of a GEMM0 tile at consecutive tickets (they run side by side).

    - "sequential": every GEMM0 tile, then every GEMM1 tile (one launch, no overlap), each GEMM
      in column groups of GROUP_N tiles swept over all row blocks (weights reused from L2).
    - "row_interleaved": row block by row block, GEMM0's tiles then GEMM1's, so that GEMM1 reads
      an h row block that is still in L2.
    - "overlap": for decode sizes (one or few row blocks), GEMM0 tiles in the order of the K-split
      that reads them, each split's GEMM1 tiles placed `lag` GEMM0 tiles after the split's last
      producer. A consumer that takes its ticket before its producers finish holds an SM while it
      waits, so `lag` should be about the number of co-resident CTAs (divided by GEMM0's K-splits):
      by the time the consumer starts, its producers started a wave earlier. Needs "tile" granularity: at "row"
      granularity a split would wait for GEMM0 tiles ordered after it, which check_order rejects.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if min(shape.m, shape.k, shape.n0, shape.n1) < 1 or (shape.gated and shape.n0 % 2):
        raise ValueError(f"bad shape {shape}")
    if tiling.split_k1 is not None:
        per_tile = tiling.block_n0 // 2 if shape.gated else tiling.block_n0
        if tiling.split_k1 < 1 or tiling.split_k1 % per_tile:
            raise ValueError(f"split_k1 must be a positive multiple of the {per_tile} h columns a GEMM0 tile makes")
    if tiling.split_k0 is not None and (tiling.split_k0 < 1 or tiling.split_k0 % 8):
        raise ValueError("split_k0 must be a positive multiple of 8")
    if lag < 0:
        raise ValueError("lag must be >= 0")
    s = Schedule(shape, tiling, policy, granularity, (), lag)
    g0_tile = lambda m, j: [Tile(0, m, j, k) for k in range(s.splits0)]  # noqa: E731
    g0 = lambda m: [t for j in range(s.n0_tiles) for t in g0_tile(m, j)]  # noqa: E731
    g1 = lambda m, k: [Tile(1, m, n, k) for n in range(s.n1_tiles)]  # noqa: E731
    order: list[Tile] = []
    if policy == "sequential":
        # Column groups of GROUP_N tiles, each swept over every row block: the group's weight
        # tiles stay in L2 while all row blocks pass (row-major order would stream the whole
        # weight matrix from DRAM once per row block). Splits come first in GEMM1, so that the
        # first splits' producers, which finish first, are waited on first.
        for j0 in range(0, s.n0_tiles, GROUP_N):
            for m in range(s.m_blocks):
                order += [t for j in range(j0, min(j0 + GROUP_N, s.n0_tiles)) for t in g0_tile(m, j)]
        for k in range(s.splits):
            for n0 in range(0, s.n1_tiles, GROUP_N):
                for m in range(s.m_blocks):
                    order += [Tile(1, m, n, k) for n in range(n0, min(n0 + GROUP_N, s.n1_tiles))]
    elif policy == "row_interleaved":
        for m in range(s.m_blocks):
            order += g0(m)
            for k in range(s.splits):
                order += g1(m, k)
    else:
        k_cols = s.tiling.split_k1 or s.shape.h_width
        for m in range(s.m_blocks):
            emitted = 0  # GEMM0 tiles of this row block emitted so far
            pending = list(range(s.splits))  # K-splits whose GEMM1 tiles are not yet emitted
            for j in range(s.n0_tiles):
                order += g0_tile(m, j)
                emitted = j + 1
                # a split is released `lag` GEMM0 tiles after its last producer
                while pending:
                    k = pending[0]
                    last_producer = math.ceil(min((k + 1) * k_cols, s.shape.h_width) / s.h_cols_per_tile0)
                    if emitted < min(s.n0_tiles, last_producer + lag):
                        break
                    order += g1(m, pending.pop(0))
            for k in pending:
                order += g1(m, k)
    s = dataclasses.replace(s, order=tuple(order))
    check_order(s)
    return s


def tile_work(s: Schedule, tile: Tile) -> float:
    """A tile's weight elements (n columns x K extent), in units of an unsplit GEMM0 tile's: at
    decode sizes the tiles stream weights, so time goes with them."""
    full = s.tiling.block_n0 * s.shape.k
    if tile.gemm == 0:
        k0 = s.tiling.split_k0 or s.shape.k
        return min(k0, s.shape.k - tile.split * k0) / s.shape.k
    k = s.tiling.split_k1 or s.shape.h_width
    k = min(k, s.shape.h_width - tile.split * k)
    return s.tiling.block_n1 * k / full


@dataclasses.dataclass
class SimResult:
    makespan: float
    deadlocked: bool
    finished: int
    wait_time: float  # total time workers spent holding a ticket whose producers were not done


def simulate(s: Schedule | Sequence[Tile], workers: int, durations: dict[Tile, float] | None = None,
             seed: int = 0, producers=None, fold_splits: bool = True,
             pair_last: bool | None = None) -> SimResult:
    """P = `workers` CTA slots run the launch: a free slot takes the next ticket (a new CTA starts
    and atomically increments the counter), then holds the slot, waiting, until every producer of
    its tile has finished, then runs for the tile's duration. With `fold_splits` (the SM90
    kernel's folded GEMM1 K-splits) a GEMM1 split s > 0 that is done computing also holds its slot
    until split s - 1 of its output tile has finished, and finishes with it. With `pair_last` too
    (the build knob CUTE_OPS_GEMM_PAIR_SM90_FOLD_PAIR), in an output tile of S >= 3 splits split
    S - 2 waits for nothing and split S - 1 waits for splits S - 3 and S - 2; left None, it is what
    the default build does: paired for a Schedule of 64- or 128-row tiles, the chain for a bare
    order or 256-row tiles. Reports deadlock when
    every slot holds a waiting tile and nothing is running. `s` may be a bare order (with
    `producers`) to exercise orders that check_order would reject."""
    order = list(s.order) if isinstance(s, Schedule) else list(s)
    deps = s.producers if isinstance(s, Schedule) else producers
    in_order = set(order)
    if pair_last is None:
        pair_last = isinstance(s, Schedule) and s.tiling.block_m <= 128
    rng = random.Random(seed)
    if durations is None:
        if not isinstance(s, Schedule):
            raise ValueError("a bare order needs explicit durations")
        durations = {t: rng.uniform(0.75, 1.25) * tile_work(s, t) for t in order}

    splits_of: dict[tuple[int, int], int] = {}  # GEMM1 output tile -> its splits in the order
    for t in order:
        if t.gemm == 1:
            splits_of[(t.m, t.n)] = max(splits_of.get((t.m, t.n), 0), t.split + 1)

    def fold_predecessors(tile: Tile) -> list[Tile]:
        """The splits whose folds `tile` waits for once it is done computing."""
        if not fold_splits or tile.gemm != 1 or tile.split == 0:
            return []
        last = splits_of[(tile.m, tile.n)] - 1
        if pair_last and last >= 2 and tile.split >= last - 1:
            wanted = [] if tile.split == last - 1 else [last - 2, last - 1]
        else:
            wanted = [tile.split - 1]
        return [p for p in (tile._replace(split=k) for k in wanted) if p in in_order]

    finished_at: dict[Tile, float] = {}
    now, next_ticket, wait_time = 0.0, 0, 0.0
    running: list[tuple[float, int, Tile]] = []  # (end time, tie-break, tile)
    waiting: list[tuple[Tile, float]] = []        # (tile, time it took its ticket)
    folding: dict[Tile, list[Tile]] = {}          # computed, waiting for these splits' folds
    free = workers
    seq = 0
    while len(finished_at) < len(order):
        while free and next_ticket < len(order):  # new CTAs take tickets
            waiting.append((order[next_ticket], now))
            next_ticket += 1
            free -= 1
        still = []
        for tile, since in waiting:  # waiting CTAs whose producers are done start computing
            if all(p in finished_at for p in deps(tile)):
                wait_time += now - since
                seq += 1
                heapq.heappush(running, (now + durations[tile], seq, tile))
            else:
                still.append((tile, since))
        waiting = still
        if not running:
            return SimResult(now, True, len(finished_at), wait_time)
        end, _, tile = heapq.heappop(running)
        now = end
        preds = [p for p in fold_predecessors(tile) if p not in finished_at]
        if preds:
            folding[tile] = preds  # holds its slot until its predecessors are in the running sum
            continue
        done = [tile]
        while done:  # a finished split lets the splits folding onto it finish, and so on
            t = done.pop()
            finished_at[t] = now
            free += 1
            for f, ps in list(folding.items()):
                if all(p in finished_at for p in ps):
                    done.append(f)
                    del folding[f]
    return SimResult(now, False, len(finished_at), wait_time)
