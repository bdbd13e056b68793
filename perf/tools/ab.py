#!/usr/bin/env python3
"""Same-session A/B of two builds of cute_ops on the benchmark's own cases, timed as perf/run.py
times them (our op only, no baselines).

Run it once per build and round, alternating builds, in one session on one GPU; each run loads
the cute_ops found first on PYTHONPATH (a tree built in place) and writes one JSON line per case:

    PYTHONPATH=<tree A> python perf/tools/ab.py --families gemm_pair,flash_decode > a1.jsonl
    PYTHONPATH=<tree B> python perf/tools/ab.py --families gemm_pair,flash_decode > b1.jsonl
    ... (a2, b2, ...)
    python perf/tools/ab.py --compare a1.jsonl,a2.jsonl b1.jsonl,b2.jsonl

--compare prints, per case, the best time of each build over its rounds and the ratio B / A, and
last the largest and the median ratio. The cases come from this tree's perf/ (the two builds must
take the same Python arguments); --match keeps the cases whose id contains any of the given
substrings.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))


def run(families: list[str] | None, match: list[str]) -> None:
    import cute_ops
    from harness import time_case
    from registry import all_cases

    where = str(pathlib.Path(cute_ops.__file__).parent)
    for case in all_cases(families):
        if match and not any(s in case.id for s in match):
            continue
        setup = case.setup
        case.setup = lambda setup=setup: {k: v for k, v in setup().items() if k == "ours"}
        times, how = time_case(case)
        print(json.dumps({"id": case.id, "ours_us": round(times["ours"], 3), "timing": how["ours"],
                          "cute_ops": where}), flush=True)


def _best(paths: str) -> dict[str, float]:
    best: dict[str, float] = {}
    for path in paths.split(","):
        for line in pathlib.Path(path).read_text().splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                best[r["id"]] = min(best.get(r["id"], float("inf")), r["ours_us"])
    return best


def compare(a_paths: str, b_paths: str) -> None:
    a, b = _best(a_paths), _best(b_paths)
    ratios = []
    print("| case | A (us) | B (us) | B / A |\n|---|---|---|---|")
    for case in a:
        if case in b:
            ratios.append(b[case] / a[case])
            print(f"| {case} | {a[case]:.2f} | {b[case]:.2f} | {ratios[-1]:.3f} |")
    if ratios:
        print(f"\n{len(ratios)} cases: B / A largest {max(ratios):.3f}, median {statistics.median(ratios):.3f}, "
              f"smallest {min(ratios):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", help="comma list (default: all)")
    ap.add_argument("--match", default="", help="comma list of substrings of case ids")
    ap.add_argument("--compare", nargs=2, metavar=("A_FILES", "B_FILES"),
                    help="comma lists of this tool's outputs for build A and build B")
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
    else:
        run(args.families.split(",") if args.families else None, [s for s in args.match.split(",") if s])


if __name__ == "__main__":
    main()
