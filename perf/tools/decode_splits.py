#!/usr/bin/env python3
"""flash_decode's time against its split count, beside cuDNN, on the benchmark's own cases and
timing (perf/cases_decode.py, harness.time_case). A tuning aid for the split heuristic: how many
CTAs an SM (bytes in flight) the device's DRAM needs.

    python perf/tools/decode_splits.py [--match B1-L131072,B16-L8192] [--splits 8,16,33]

Each case is timed with the automatic split count ("ours") and with each forced count that the
case's cache allows; one table row per case, times in us, the best marked.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

DEFAULT_MATCH = ("B1-L16384-", "B1-L131072-", "B4-L32768-", "B4-L131072-", "B16-L8192-", "B16-L32768-",
                 "B64-L8192-")
_FORCED = [0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--match", default=",".join(DEFAULT_MATCH), help="comma list of substrings of case ids")
    ap.add_argument("--splits", default="1,2,3,4,6,8,12,16,24,33,48,66",
                    help="comma list of forced split counts (each case keeps those that give 16 CTAs to "
                         "--max-waves waves of one CTA an SM)")
    ap.add_argument("--max-waves", type=int, default=8, help="the most CTAs a forced count may give, in SMs")
    args = ap.parse_args()

    import cute_ops
    import cases_decode
    from harness import time_case

    real = cute_ops.flash_decode

    def patched(*a, **k):  # the cases call cute_ops.flash_decode at call (and capture) time
        if _FORCED[0]:
            k["num_splits"] = _FORCED[0]
        return real(*a, **k)

    cute_ops.flash_decode = patched
    sms = torch.cuda.get_device_properties().multi_processor_count
    print(f"{torch.cuda.get_device_name()}, {sms} SMs; us a call (graph replay, rotated inputs)")
    match = [s for s in args.match.split(",") if s]
    for case in cases_decode.cases():
        if match and not any(s in case.id for s in match):
            continue
        ctas = case.shape["B"] * case.shape["Hkv"]
        splits = [s for s in map(int, args.splits.split(",")) if 16 <= ctas * s <= args.max_waves * sms
                  and s <= max(1, case.shape["L"] // 128)]
        setup = case.setup

        def with_forced(setup=setup, splits=splits):
            impls = setup()
            keep = {k: v for k, v in impls.items() if k in ("ours", "sdpa_cudnn")}
            for s in splits:
                def call(fn=impls["ours"], s=s):
                    _FORCED[0] = s
                    try:
                        return fn()
                    finally:
                        _FORCED[0] = 0
                keep[f"ours_s{s}"] = call
            return keep

        case.setup = with_forced
        times, _ = time_case(case)
        best = min(t for k, t in times.items() if k.startswith("ours"))
        cells = " ".join(f"{k.removeprefix('ours_')}={t:.1f}{'*' if t == best else ''}" for k, t in times.items())
        read_tb = case.bytes / best / 1e6
        print(f"{case.id}: {cells} | best ours {read_tb:.2f} TB/s, cudnn/best {times.get('sdpa_cudnn', 0) / best:.3f}",
              flush=True)


if __name__ == "__main__":
    main()
