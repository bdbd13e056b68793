"""A model of how evenly the sm90 flash_fwd's persistent CTAs share a launch's tiles, for choosing
the tile scheduler's L2 section size without a GPU (docs/perf-notes.md, issue 16, session 41).

Each tile costs OVERHEAD + its key blocks (causal: the blocks its last query row sees); the CTAs
take tiles in the scheduler's order. Printed per shape and section size: the balance, i.e. the
mean CTA's busy time over the longest one's (1.0 = every CTA ends together), for
  - dynamic: DynamicTileScheduler (csrc/flash_fwd/tile_scheduler_sm90.h): the first wave
    static, then each CTA takes the next tile when it has AHEAD blocks of its current one left;
  - alternating: the scheduler it replaced (ea4610c): rounds of one tile a CTA, alternating
    direction, causal sections alternating longest-first and shortest-first.
The model has no L2 in it: the section size's other effect (docs/perf-notes.md) is measured. Nor
does it see a tile's loads: a schedule it rated 0.98 against 0.88 (every head's shortest query
blocks last) measured no faster on an H200 (session 52).
With --tail: non-causal launches (equal tiles, where no order helps), the balance as launched
against a stream-K tail that splits the last two waves' key blocks evenly over the CTAs (each
tile cut between two CTAs pays MERGE blocks for its partial O written and merged).
Usage:
    python perf/tools/flash_fwd_schedule.py [D:S[:causal][:llama] ...]   e.g. 128:16384:causal
    python perf/tools/flash_fwd_schedule.py --claims [D:S[:causal][:llama] ...]
    python perf/tools/flash_fwd_schedule.py --tail [D:S[:llama] ...]
(the grid's shapes: 16k tokens a batch, 2048 / D heads; llama: 32 query heads sharing 8, one
sequence.)"""
from __future__ import annotations

import heapq
import math
import sys

SMS = 132           # an H100 SXM's SMs (the H200 has as many)
OVERHEAD = 2.5      # a tile's fixed cost, in key blocks (prologue, first softmax, epilogue)
AHEAD = 2.0         # key blocks before a tile's end at which its producer asks for the next
SECTIONS_MB = (1, 4, 8, 24)
MERGE = 1.0         # a split tile's partial O written by one CTA and merged by the other, in key blocks


def tile_config(d: int, causal: bool = False) -> tuple[int, int]:
    """(query rows, keys) of a tile per head dim (csrc/flash_fwd/flash_fwd_launch_sm90.h)."""
    return (192 if d == 64 else 128), ((64 if causal else 80) if d == 256 else 128)


def order(m_blocks: int, bh: int, section: int, causal: bool, alternate_sections: bool) -> list[int]:
    """Each tile's query block, in the scheduler's order (heads in sections, query-block-major)."""
    sections = -(-bh // section)
    out = []
    for sec in range(sections):
        width = min(section, bh - sec * section)
        longest_first = causal and (not alternate_sections or (sections - 1 - sec) % 2 == 0)
        for m in range(m_blocks):
            out += [m_blocks - 1 - m if longest_first else m] * width
    return out


def cost(m: int, m_blocks: int, causal: bool, block_m: int, block_n: int) -> float:
    return OVERHEAD + ((m + 1) * block_m / block_n if causal else m_blocks * block_m / block_n)


def balance_dynamic(costs: list[float], claim: str = "end", late: int = 0) -> float:
    """claim: when a CTA asks for its next tile, relative to the last one it holds (start, end):
    "end" at end - AHEAD (the default kernel: after the tile's last K/V load); "start" at
    start - AHEAD, as its loads begin (Q ahead: the claim a tile early); "late" when late + 1 of
    its blocks are left to load (session 56's Q_AHEAD_LATE knob, since removed), not before its
    loads begin."""
    g = min(len(costs), SMS)
    starts, ends = [0.0] * g, costs[:g]

    def ask(cta: int) -> float:
        s, e = starts[cta], ends[cta]
        if claim == "start":
            return max(0.0, s - AHEAD)
        if claim == "late":
            return max(0.0, s - AHEAD, e - AHEAD - (late + 1))
        return max(0.0, e - AHEAD)

    asks = [(ask(i), i) for i in range(g)]
    heapq.heapify(asks)
    for c in costs[g:]:
        _, cta = heapq.heappop(asks)
        starts[cta], ends[cta] = ends[cta], ends[cta] + c
        heapq.heappush(asks, (ask(cta), cta))
    return sum(costs) / g / max(ends)


def balance_alternating(costs: list[float]) -> float:
    g = min(len(costs), SMS)
    ends = [0.0] * g
    for idx, c in enumerate(costs):
        rnd, pos = divmod(idx, g)
        ends[g - 1 - pos if rnd % 2 else pos] += c
    return sum(costs) / g / max(ends)


class Shape:
    """A spec D:S[:causal][:llama] as the scheduler sees it: the grid's 16k tokens a batch and
    2048 / D heads, or LLaMA-3-8B's 32 query heads sharing 8 in one sequence."""

    def __init__(self, spec: str):
        d, s, *rest = spec.split(":")
        d, s = int(d), int(s)
        self.causal = "causal" in rest
        heads, batch, kv_heads = (32, 1, 8) if "llama" in rest else (2048 // d, 16384 // s, 2048 // d)
        self.block_m, self.block_n = tile_config(d, self.causal)
        self.m_blocks, self.bh = -(-s // self.block_m), batch * heads
        self.per_q_head = 2 * s * d * 2 // (heads // kv_heads)  # K and V bytes a query head reads

    def costs(self, section_mb: int, alternate_sections: bool) -> tuple[int, list[float]]:
        """(heads a section, each tile's cost in the scheduler's order)."""
        section = max(1, min(self.bh, (section_mb << 20) // self.per_q_head))
        return section, [cost(m, self.m_blocks, self.causal, self.block_m, self.block_n)
                         for m in order(self.m_blocks, self.bh, section, self.causal, alternate_sections)]


def balance_stream_k_tail(tiles: int, blocks: float) -> float:
    """Equal tiles of OVERHEAD + blocks each: whole tiles a CTA up to the last two waves, the rest's
    key blocks split evenly over the CTAs, each tile cut between two CTAs charged MERGE plus a second
    OVERHEAD. (Split evenly, how many waves the split spans does not change the result; shares are
    not rounded to whole blocks; below one wave every CTA has a tile and both balances read 1.0,
    so the SMs left idle there are not seen.)"""
    g = min(tiles, SMS)
    whole_waves = max(0, tiles // g - 2)
    rest = tiles - whole_waves * g
    cuts = g - math.gcd(rest, g)  # the g - 1 boundaries between CTAs' shares, less those on tile edges
    tail_work = rest * (OVERHEAD + blocks) + cuts * (OVERHEAD + MERGE)
    longest = whole_waves * (OVERHEAD + blocks) + tail_work / g
    return tiles * (OVERHEAD + blocks) / g / longest


def tail(specs: list[str]) -> None:
    """Non-causal shapes: the balance of equal tiles as launched (whole waves and a part-filled
    last one) against a stream-K tail (balance_stream_k_tail)."""
    for spec in specs or ["64:2048", "128:2048", "256:2048", "128:512", "128:16384", "256:16384"]:
        shape = Shape(spec)
        if shape.causal:
            raise SystemExit(f"--tail models equal (non-causal) tiles: {spec}")
        _, costs = shape.costs(4, False)
        blocks = costs[0] - OVERHEAD
        print(f"{spec:>22}  {len(costs)} tiles of {blocks:g} blocks, {len(costs) / SMS:.2f} waves: "
              f"as launched {balance_dynamic(costs):.3f}, stream-K tail "
              f"{balance_stream_k_tail(len(costs), blocks):.3f}")


def main(specs: list[str]) -> None:
    if specs[:1] == ["--claims"]:
        return claims(specs[1:])
    if specs[:1] == ["--tail"]:
        return tail(specs[1:])
    for spec in specs or ["128:2048", "128:16384:causal", "128:2048:causal", "64:2048:causal",
                          "256:2048:causal", "128:4096:causal:llama"]:
        shape, row = Shape(spec), []
        for mb in SECTIONS_MB:
            section, dyn = shape.costs(mb, False)
            _, alt = shape.costs(mb, True)
            row.append(f"{mb} MB ({section} heads): dynamic {balance_dynamic(dyn):.3f} "
                       f"alternating {balance_alternating(alt):.3f}")
        print(f"{spec:>22}  " + "  |  ".join(row))


def claims(specs: list[str]) -> None:
    """The dynamic scheduler's balance at the kernel's own section sizes (4 MB, causal 8 MB) under
    each claim rule of balance_dynamic (session 56: Q ahead's claim a tile early)."""
    for spec in specs or ["128:2048", "128:16384", "128:2048:causal", "128:8192:causal", "128:16384:causal",
                          "128:4096:causal:llama", "128:8192:causal:llama"]:
        shape = Shape(spec)
        _, costs = shape.costs(8 if shape.causal else 4, False)
        rules = [("end", 0), ("start", 0), ("late", 2), ("late", 4)]
        row = "  ".join(f"{rule}{n if rule == 'late' else ''} {balance_dynamic(costs, rule, n):.3f}"
                        for rule, n in rules)
        print(f"{spec:>22}  {len(costs)} tiles  {row}")


if __name__ == "__main__":
    main(sys.argv[1:])
