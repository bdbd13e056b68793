"""pytest-benchmark suite: ours and every baseline of each case, grouped side by side.

    pytest perf --benchmark-group-by=group --benchmark-columns=median,iqr,rounds

Each timed round runs the callable INNER times and synchronises once, so launch overhead is
amortised; pytest-benchmark's numbers are per round. perf/run.py gives the event-timed figures that
go into perf/results/<gpu>.json.
"""
from __future__ import annotations

import pytest
import torch

from registry import all_cases

INNER = 20
CASES = all_cases()
PARAMS = [pytest.param(c, impl, id=f"{c.id}-{impl}") for c in CASES for impl in c.impls]

_impls_cache: dict = {}


def _impls(case):
    if case.id not in _impls_cache:
        _impls_cache.clear()  # keep one case's inputs alive at a time
        _impls_cache[case.id] = case.setup()
    return _impls_cache[case.id]


@pytest.mark.parametrize("case, impl", PARAMS)
def test_bench(benchmark, case, impl):
    impls = _impls(case)
    if impl not in impls:
        pytest.skip(f"{impl} refuses this case")
    fn = impls[impl]
    benchmark.group = case.id
    benchmark.extra_info["inner_calls"] = INNER

    def rounds():
        for _ in range(INNER):
            fn()
        torch.cuda.synchronize()

    benchmark.pedantic(rounds, warmup_rounds=2, rounds=10)
